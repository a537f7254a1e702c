"""A YAML `env:` block, applied before the libraries read it.

    apply_config_env(argv, restart)    sets the block's variables; restarts the command when one was new

Libraries read some variables once, when they are imported (`datasets`: HF_DATASETS_CACHE; `huggingface_hub`: HF_HOME,
HF_HUB_CACHE, HF_HUB_OFFLINE; torch: its thread settings), and importing `trl_zoo.cli` has imported them all, so a
variable set afterwards, as TRL's `TrlParser` sets `env:`, would not act. The `trl-zoo` command therefore sets the
block's variables and starts itself again (`os.execv`, the same process id, the same arguments), and the new start
imports the libraries with them set; a block whose variables are already set as given starts nothing, so the command
starts at most twice. Called from Python (`trl_zoo.cli.main([...])`), nothing restarts: the variables are set as TRL
sets them, and act only where a library reads them later.

Tests: tests/test_config_env.py (the restart, and HF_DATASETS_CACHE honoured by a real command).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ..errors import ConfigError
from .train_arguments import config_path, load_yaml


def config_env(argv: list[str]) -> dict[str, str]:
    """The `env:` block of the `--config` file in `argv`, as text ({} without a file or a block). A file that is
    missing is left for the argument parser to report."""
    path = config_path(argv)
    if path is None or not os.path.isfile(path):
        return {}
    config = load_yaml(path)  # nested aliases refused before anything spells them out
    block = config.get("env") if isinstance(config, dict) else None
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ConfigError(f"env: in {path} must map variable names to values (NAME: value), got {block!r:.80}.")
    for name, value in block.items():
        if isinstance(value, (list, dict)):
            raise ConfigError(
                f"env: {name} in {path} must be one value (text or a number), got a {type(value).__name__}."
            )
    variables = {str(name): str(value) for name, value in block.items()}
    for name, value in variables.items():
        if not name or "=" in name or "\0" in name:
            raise ConfigError(f"env: {name!r} in {path} is not a variable name: give a non-empty name without '=' "
                              f"or NUL bytes (NAME: value).")
        if "\0" in value:
            raise ConfigError(f"env: {name} in {path} holds a NUL byte, which no environment variable can hold: "
                              f"remove it from the value.")
    return variables


def restart_command() -> None:
    """Start this command again in this process, with the same interpreter and arguments."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def apply_config_env(argv: list[str], restart: Callable[[], None] | None = restart_command) -> None:
    """Set the `--config` file's `env:` variables; when one was not set so already and `restart` is given, call it
    (the command starts again with them set before any import)."""
    new = {name: value for name, value in config_env(argv).items() if os.environ.get(name) != value}
    if not new:
        return
    os.environ.update(new)
    if restart is not None:
        restart()
