"""`trl-zoo train`'s arguments (which `compare` passes on to each run): flags, config files, layered defaults.

    train_arguments.py   TRL's parser over trl_zoo's dataclasses, config files, the layered defaults and presets,
                         plugin fields as flags, PEFT's field names read as TRL's
    train_help.py        `train --help`'s layout: trl_zoo's field groups first, then TRL's
    preset_lengths.py    a preset's lengths scaled to the built-in task's policy; the policy's positions read
                         before it loads
    config_env.py        a config file's `env:`, applied before the libraries read it
"""
