"""`trl-zoo train`: the command and the steps of its run.

    command.py             the command, in steps: claim the folder, prepare, train, save, summarize
    run_folder.py            the run's folder, claimed once, never shared
    training_setup.py        everything up to `trainer.train()`, its steps listed in order:
    resume_checkpoint.py       the checkpoint the run resumes, or a fresh start
    training_data.py           a dataset's splits; chat prompts
    policy.py                  the policy's path, resolved once, and how the trainer loads it
    policy_prompts.py          the prompts as the policy reads them
    reference_samples.py       A*-PO's reference samples scored into the data (--reference_reward_samples)
    heldout_accuracy.py        the greedy held-out evaluation
    progress.py                the lines printed while training
    run_summary.py           summary.json, the model card, the closing lines, the report
    model_card.py              the saved adapter's (or model's) README.md

Its arguments are `cli/arguments/`'s, its rewards `cli/rewards/`'s, its run log `cli/report/run_log.py`, and what it
meets on the machine (threads, GPUs, a launch, the disk) `cli/environment/`'s.
"""
