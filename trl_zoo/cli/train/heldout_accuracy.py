"""A `trl-zoo train` run's greedy held-out evaluation: measured every `eval_every_steps` by every process together,
said before RL and recorded in the run log by the first process; a resumed run's earlier evaluations start its
history.

Tests: tests/test_heldout_reward_checks.py (the config's reward settings reach the evaluation),
tests/test_heldout_eval_multiprocess.py (two processes, one record), tests/test_heldout_mean_reward.py.
"""

from __future__ import annotations

from ...tasks.evaluation import EvaluationProgress, HeldOutAccuracyCallback, HeldOutResult, greedy_evaluation
from ...tasks.evaluation import format_mean_reward as mean_text


def heldout_accuracy_callback(
    heldout, tokenizer, scorer, run_log, task_args, training_args, log, environment_factory=None
) -> HeldOutAccuracyCallback:
    """The greedy held-out evaluation, every `eval_every_steps`, recorded in the run log (a resumed run's earlier
    evaluations start its history); with `environment_factory`, each rollout with its tool round."""
    heldout_columns = {name: heldout[name] for name in heldout.column_names if name != "prompt"}

    def evaluate(model) -> HeldOutResult:  # every process of a distributed run takes part and gets the same result
        return greedy_evaluation(
            model,
            tokenizer,
            heldout["prompt"],
            max_new_tokens=training_args.max_completion_length,
            reward=scorer,
            reward_kwargs=heldout_columns,
            batch_size=task_args.eval_batch_size,
            across_processes=True,
            progress=EvaluationProgress(log) if training_args.process_index == 0 else None,
            trainer_state=accuracy_callback.state,  # the trainer's, as TRL hands it to a reward
            nan_rewards=training_args.nan_rewards,  # training's reward checks and watchdog
            reward_timeout_warning=training_args.reward_timeout_warning,
            reward_timeout=training_args.reward_timeout,
            environment_factory=environment_factory,
        )

    def record(step: int, result: HeldOutResult):
        if step == 0:
            graded = (
                "; the reward is graded: accuracy counts completions with reward exactly 1" if result.graded else ""
            )
            log(f"Held-out greedy accuracy before RL: {result.accuracy:.1%}, mean reward "
                f"{mean_text(result.mean_reward)} ({len(heldout)} prompts{graded}).")
        if training_args.process_index == 0:  # one record per measurement, however many processes measured
            run_log.write({"kind": "eval", "step": step, "heldout_accuracy": result.accuracy,
                           "heldout_mean_reward": result.mean_reward, "heldout_reward_graded": result.graded})

    earlier = [
        (record["step"], HeldOutResult(record["heldout_accuracy"], record.get("heldout_mean_reward"),
                                       record.get("heldout_reward_graded", False)))
        for record in run_log.kept
        if record["kind"] == "eval"
    ]
    accuracy_callback = HeldOutAccuracyCallback(
        evaluate, task_args.eval_every_steps, on_result=record, history=earlier
    )
    return accuracy_callback
