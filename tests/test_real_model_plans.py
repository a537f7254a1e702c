"""Every plan of the real-model study (benchmarks/real_model.py) lists its runs, and every run's flags are ones
`trl-zoo train` accepts — a study that fails on its first device call costs device time, so this is checked here."""

import pytest

from benchmarks import real_model
from trl_zoo.cli.arguments.train_arguments import parse_train_args

PLANS = ["easy", "medium", "hard", "offpolicy", "methods", "tools", "trl", "gemma"]


@pytest.mark.parametrize("name", PLANS)
def test_every_run_of_a_plan_parses_as_train_flags(name, tmp_path):
    task, runs = real_model.plan(name)
    assert runs
    for run, flags in runs.items():
        command = real_model.command(task, flags, 0, tmp_path / run, [])
        train_flags = command[command.index("--task"):]
        parsed = parse_train_args(train_flags, log=lambda *_: None)
        assert parsed is not None, run


def test_the_easy_plan_has_every_zoo_loss_and_trl_beside_it():
    _, runs = real_model.plan("easy")
    assert {"grpo", "dr_grpo", "dapo", "gspo", "cispo", "sapo", "control"} <= set(runs)
    assert {f"trl_{loss}" for loss in real_model.TRL_LOSSES} <= set(runs)
    assert all(runs[f"trl_{loss}"][:2] == ["--trainer", "trl"] for loss in real_model.TRL_LOSSES)


def test_clip_higher_is_the_only_difference_between_the_dapo_pair():
    _, runs = real_model.plan("offpolicy")
    symmetric, higher = runs["dapo_symmetric"], runs["dapo_clip_higher"]
    assert [flag for flag in higher if flag not in symmetric] == ["--epsilon_high", "0.28"]


# each method's run and what its flags must set in the parsed arguments (task, training fields)
METHODS = {
    "grpo": {"loss_type": "grpo", "advantage_estimator": None},
    "control": {"null_reward_control": True},
    "maxrl": {"advantage_estimator": "maxrl"},
    "passk": {"advantage_estimator": "passk", "passk_k": 4},
    "grpo_passk": {"advantage_estimator": "grpo_passk"},
    "dppo": {"loss_type": "dppo", "num_iterations": 4, "max_steps": 60, "dppo_kl_coef": 0.001},
    "topr": {"loss_type": "topr", "num_iterations": 4, "max_steps": 60},
    "m2po": {"loss_type": "m2po", "num_iterations": 4, "max_steps": 60},
    "ipo": {"loss_type": "ipo", "num_iterations": 4, "max_steps": 60},
    "luffy": {"loss_type": "luffy", "expert_traces": True, "expert_column": "expert_answer"},
    "chord": {"loss_type": "grpo", "expert_traces": True, "expert_column": "expert_answer"},
    "a2po": {"loss_type": "a2po", "advantage_estimator": "a2po", "beta": 0.001, "reference_reward_samples": 8,
             "train_prompts": 640},
    "grpo_teacher": {"teacher_model": "self", "teacher_prompt_template": real_model.TEACHER},
    "dler": {"truncation_penalty": 0.0},
    "ttrl": {"reward_funcs": ["benchmarks.lib.real_model_run.recorded_final_number", "majority_vote"],
             "reward_weights": [0.0, 1.0]},
    "gdpo": {"reward_funcs": ["benchmarks.lib.real_model_run.recorded_final_number", "exact_match"],
             "multi_objective_aggregation": "normalize_then_sum"},
}


def _train_argv(command):
    """What real_model_run.py hands `trl-zoo train`: the run's flags with the recording reward."""
    from benchmarks.lib.real_model_run import with_recording_reward

    return with_recording_reward(command[command.index("--task"):])


def test_the_methods_plan_lists_one_command_per_method_and_seed(tmp_path, capsys):
    assert real_model.main(["--plan", "methods", "--out", str(tmp_path), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(METHODS) * 3
    _, runs = real_model.plan("methods")
    assert list(runs) == list(METHODS)
    for seed in (0, 1, 2):
        for name, flags in runs.items():
            folder = tmp_path / "chat_arithmetic" / name / f"seed{seed}"
            line = next(line for line in lines if f" --output_dir {folder} " in line)
            assert f" --task chat_arithmetic --seed {seed} " in line and " ".join(flags) in line, name


def test_every_method_of_the_plan_parses_to_the_fields_it_names(tmp_path):
    task, runs = real_model.plan("methods")
    for name, flags in runs.items():
        parsed = parse_train_args(_train_argv(real_model.command(task, flags, 0, tmp_path / name, [])),
                                  log=lambda *_: None)
        found = {key: getattr(parsed.task, key) if hasattr(parsed.task, key) else getattr(parsed.training, key)
                 for key in METHODS[name]}
        assert found == METHODS[name], name
        # the preset's batch shape everywhere: 16 prompts × 8 completions in micro-batches of 32
        assert (parsed.training.per_device_train_batch_size, parsed.training.gradient_accumulation_steps,
                parsed.training.num_generations) == (32, 4, 8), name
        assert parsed.training.max_steps in (40, 60), name
        if name not in ("ttrl", "gdpo"):  # the recording reward alone, which scores the held-out evaluation
            assert parsed.task.reward_funcs == ["benchmarks.lib.real_model_run.recorded_final_number"], name


def test_the_recording_reward_comes_first_of_a_runs_own_rewards():
    from benchmarks.lib.real_model_run import RECORDING_REWARD, with_recording_reward

    assert with_recording_reward(["--seed", "0"]) == ["--seed", "0", "--reward_funcs", RECORDING_REWARD]
    argv = ["--reward_funcs", "majority_vote", "--reward_weights", "0", "1"]
    assert with_recording_reward(argv) == ["--reward_funcs", RECORDING_REWARD, "majority_vote",
                                           "--reward_weights", "0", "1"]


def test_the_label_free_run_is_scored_with_the_labels_and_trained_without_them():
    from trl_zoo.cli.rewards.reward_names import heldout_scorer, resolve_reward

    _, runs = real_model.plan("methods")
    flags = runs["ttrl"]
    names = _train_argv(["--task", *flags])[2:]
    names = names[names.index("--reward_funcs") + 1:names.index("--reward_weights")]
    weights = flags[flags.index("--reward_weights") + 1:]
    functions = [resolve_reward(name) for name in names]
    assert heldout_scorer(functions) is functions[0]  # the recording final_number: labels score the evaluation
    trained = [name for name, weight in zip(names, weights) if float(weight) != 0]
    assert trained == ["majority_vote"]


def test_an_unknown_plan_names_the_plans():
    with pytest.raises(SystemExit, match="easy, medium, hard, offpolicy, methods, tools, trl or gemma"):
        real_model.plan("hardest")


def test_a_stopped_run_resumes_from_its_checkpoint_and_keeps_only_its_records(tmp_path):
    import json

    from benchmarks.lib.real_model_run import keep_records_up_to, resumed_step

    out = tmp_path / "run"
    (out / "checkpoint-4").mkdir(parents=True)
    (out / "checkpoint-4" / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    (out / "checkpoint-6").mkdir()  # a save the stop cut short: no trainer_state.json
    assert real_model.resumable(out)
    command = real_model.command("chat_arithmetic", ["--loss_type", "grpo"], 0, out, [], resume=True)
    assert "--overwrite_output_dir" not in command
    argv = command[command.index("--task"):]
    assert resumed_step(argv, out) == 4
    assert resumed_step(["--output_dir", str(out)], out) == 0
    records = out / "completions.jsonl"
    records.write_text("".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in [1, 2, 3, 4, 4, 5, 6]))
    keep_records_up_to(records, 4)
    assert [json.loads(line)["step"] for line in records.read_text().splitlines()] == [1, 2, 3, 4, 4]
    keep_records_up_to(records, 0)
    assert records.read_text() == ""


def test_a_run_without_a_complete_checkpoint_starts_afresh(tmp_path):
    assert not real_model.resumable(tmp_path / "never-started")
    (tmp_path / "cut" / "checkpoint-2").mkdir(parents=True)
    assert not real_model.resumable(tmp_path / "cut")


def _fake_run(root, task, name, seed, after, before=0.1):
    import json

    folder = root / task / name / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(
        json.dumps({"accuracy_before": before, "accuracy_after": after, "seed": seed})
    )
    (folder / "costs.json").write_text(json.dumps({"median_step_seconds": 1.0, "peak_memory_gib": 2.0}))
    records = [{"kind": "train", "step": s, "reward": after, "entropy": 1.0 - after} for s in (1, 2)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_report_pairs_each_task_with_its_own_control(tmp_path):
    from benchmarks import real_model_report

    for seed in (0, 1):
        _fake_run(tmp_path / "runs", "easy_task", "grpo", seed, 0.70 + seed / 100)
        _fake_run(tmp_path / "runs", "easy_task", "control", seed, 0.20)
        _fake_run(tmp_path / "runs", "hard_task", "grpo", seed, 0.30)
        _fake_run(tmp_path / "runs", "hard_task", "control", seed, 0.05)
    assert real_model_report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--seeds", "0,1"]) == 0
    text = (tmp_path / "out" / "tables.md").read_text()
    easy, hard = text.split("## hard_task")
    assert "| grpo | 10.0% | 70.0% / 71.0% |" in easy and "+50.0 / +51.0" in easy
    assert "| grpo | 10.0% | 30.0% / 30.0% |" in hard and "+25.0 / +25.0" in hard
    # compare's paired verdict, within each task: +50 and +51 points over two seeds is beyond seed noise
    assert "| grpo − control | +50.5 | [+44.1, +56.9] | 2 of 2 seeds | significant |" in easy
    assert "| grpo − control | +25.0 |" in hard


def test_the_report_draws_held_out_accuracy_of_the_eight_updates_losses_per_seed(tmp_path):
    import json

    from benchmarks import real_model_report

    for name in ("dapo_symmetric", "m2po"):
        for seed in (0, 1):
            _fake_run(tmp_path / "runs", "chat_arithmetic", name, seed, 0.6)
            evals = [{"kind": "eval", "step": s, "heldout_accuracy": 0.1 + s / 100} for s in (0, 20, 40)]
            with open(tmp_path / "runs" / "chat_arithmetic" / name / f"seed{seed}" / "metrics.jsonl", "a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in evals))
    runs, _ = real_model_report.load_runs([tmp_path / "runs"])
    assert [r["step"] for r in runs[("chat_arithmetic", "m2po", 1)].evals] == [0, 20, 40]
    assert real_model_report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--seeds", "0,1"]) == 0
    assert (tmp_path / "out" / "heldout_offpolicy.png").stat().st_size > 0
    assert "![heldout_offpolicy.png](heldout_offpolicy.png)" in (tmp_path / "out" / "tables.md").read_text()


@pytest.mark.parametrize("name", ["hard", "medium"])
def test_the_teacher_pair_differs_only_by_the_answer_in_the_teachers_prompt(name):
    _, runs = real_model.plan(name)
    with_context, without = runs["grpo_teacher"], runs["grpo_teacher_no_context"]
    assert [flag for flag in with_context if flag not in without] == ["--teacher_prompt_template", real_model.TEACHER]
    assert "{answer}" in real_model.TEACHER


def test_the_report_answers_the_studys_own_questions_paired_by_seed(tmp_path):
    from benchmarks import real_model_report

    # the teacher pair's final accuracies of the medium study; grpo 10 points above the teacher on every seed
    for seed, (teacher, no_context) in enumerate([(0.070, 0.048), (0.074, 0.038), (0.058, 0.040)]):
        _fake_run(tmp_path / "runs", "task", "grpo_teacher", seed, teacher)
        _fake_run(tmp_path / "runs", "task", "grpo_teacher_no_context", seed, no_context)
        _fake_run(tmp_path / "runs", "task", "grpo", seed, teacher + 0.10)
    assert real_model_report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "tables.md").read_text()
    # d = +2.2, +3.6, +1.8 points: mean 2.53, sd 0.945, t(0.975, 2) = 4.303 -> ± 2.35
    assert "| grpo_teacher − grpo_teacher_no_context | +2.5 | [+0.2, +4.9] | 3 of 3 seeds | significant |" in text
    assert "| grpo_teacher − grpo | -10.0 |" in text and "0 of 3 seeds" in text
    assert "maxrl − grpo" not in text  # a question asks only where both configurations ran


def test_the_studys_recording_reward_reads_the_answer_line_of_a_base_models_prompts():
    """The instrumented reward forwards the dataset's `answer_first_line` column, as final_number does: without it a
    base model's few-shot completion ("85\n\nQuestion: …\nAnswer: 21") is graded by its last number."""
    from benchmarks.lib.real_model_run import recorded_final_number

    completions = [" 85\n\nQuestion: What is 10 + 11?\nAnswer: 21"] * 2
    graded = recorded_final_number(completions, answer=["85", "21"], answer_first_line=[True, True])
    assert graded == [1.0, 0.0]
    assert recorded_final_number(completions, answer=["85", "21"]) == [0.0, 1.0]


def test_the_gemma_plan_runs_at_the_models_own_preset_unless_a_flag_overrides_it(tmp_path):
    task, runs = real_model.plan("gemma")
    for run, flags in runs.items():
        argv = real_model.command(task, flags, 0, tmp_path / run, [])
        _, training, model = parse_train_args(argv[argv.index("--task"):], log=lambda *_: None)
        assert model.model_name_or_path == "gemma3-270m", run
        assert (training.learning_rate, training.max_completion_length) == (5e-5, 24), run
    argv = real_model.command(task, runs["grpo"], 0, tmp_path / "lr", ["--learning_rate", "2e-4"])
    assert parse_train_args(argv[argv.index("--task"):], log=lambda *_: None).training.learning_rate == 2e-4


def test_the_recording_reward_labels_training_batches_with_their_step_and_the_evaluations_none(tmp_path,
                                                                                                 monkeypatch):
    """Both get the trainer's state; the held-out evaluation's call is told apart by its no-op loggers."""
    import json
    from types import SimpleNamespace

    from benchmarks.lib import real_model_run
    from trl_zoo.tasks.evaluation import not_recorded

    record = tmp_path / "completions.jsonl"
    monkeypatch.setenv(real_model_run.RECORD_ENV, str(record))
    state = SimpleNamespace(global_step=3)
    batch = {"completions": [" 5", " 6"], "answer": ["5", "5"], "completion_ids": [[1], [2, 3]],
             "trainer_state": state}
    real_model_run.recorded_final_number(**batch, log_metric=lambda *a: None)
    real_model_run.recorded_final_number(**batch, log_metric=not_recorded)
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [row["step"] for row in rows] == [4, None]
    assert rows[0]["reward"] == 0.5 and rows[0]["length_right"] == 1 and rows[0]["length_wrong"] == 2


def test_reference_samples_scored_before_training_are_not_recorded_as_a_batch(tmp_path, monkeypatch):
    """A*-PO's reference samples are scored by the run's rewards, the recording one included, with no trainer."""
    from benchmarks.lib import real_model_run

    record = tmp_path / "completions.jsonl"
    monkeypatch.setenv(real_model_run.RECORD_ENV, str(record))
    rewards = real_model_run.recorded_final_number([" 5", " 6"], answer=["5", "5"], completion_ids=[[1], [2]])
    assert rewards == [1.0, 0.0] and not record.exists()


def test_the_report_names_the_methods_plan_as_real_model_does():
    from benchmarks import real_model_report

    assert real_model_report.METHODS == [name for name in real_model.method_runs() if name not in ("grpo", "control")]
    assert set(real_model_report.METHODS) <= set(real_model_report.ORDER)


def test_the_report_asks_each_method_against_grpo_and_draws_them_beside_the_control(tmp_path):
    import json

    from benchmarks import real_model_report

    for name, after in (("grpo", 0.6), ("control", 0.2), ("ttrl", 0.4), ("dppo", 0.5)):
        for seed in (0, 1):
            _fake_run(tmp_path / "runs", "chat_arithmetic", name, seed, after + seed / 100)
            evals = [{"kind": "eval", "step": s, "heldout_accuracy": 0.1 + s / 100} for s in (0, 20, 40)]
            with open(tmp_path / "runs" / "chat_arithmetic" / name / f"seed{seed}" / "metrics.jsonl", "a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in evals))
    assert real_model_report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--seeds", "0,1"]) == 0
    text = (tmp_path / "out" / "tables.md").read_text()
    assert "- ttrl − grpo: ttrl against GRPO" in text and "| ttrl − grpo | -20.0 |" in text
    assert "- dppo − grpo: dppo against GRPO" in text
    assert "| ttrl | 10.0% | 40.0% / 41.0% |" in text and "+20.0 / +20.0" in text  # over the control, by seed
    assert (tmp_path / "out" / "heldout_methods.png").stat().st_size > 0
    assert not (tmp_path / "out" / "heldout_offpolicy.png").exists()  # no offpolicy plan: its 8 updates not drawn


def test_the_tools_plan_teaches_the_call_in_every_arm_but_one_and_runs_the_multi_turn_estimators(tmp_path):
    task, runs = real_model.plan("tools")
    assert task == "chat_arithmetic_calculator"
    expected = {"grpo": None, "gigpo": "gigpo", "mt_grpo": "mt_grpo", "control": None, "grpo_no_sft": None}
    assert set(runs) == set(expected)
    for run, estimator in expected.items():
        command = real_model.command(task, runs[run], 0, tmp_path / run, [])
        task_args, training, _ = parse_train_args(command[command.index("--task"):], log=lambda *_: None)
        assert training.advantage_estimator == estimator and training.max_tool_calling_iterations == 1, run
        assert task_args.expert_traces == (run != "grpo_no_sft") and task_args.null_reward_control == (
            run == "control"), run
