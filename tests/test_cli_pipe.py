"""A reader that goes away before the output is written (`trl-zoo list | head -1` on a long list) ends the command
quietly: no traceback, exit 141 (the shell's code for SIGPIPE)."""

from __future__ import annotations

import subprocess
import sys

COMMAND = [sys.executable, "-c", "import sys; from trl_zoo.cli import main; sys.exit(main(['list']))"]


def test_a_closed_pipe_ends_trl_zoo_list_without_a_traceback():
    process = subprocess.Popen(COMMAND, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the list (written after seconds of imports) is printed
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_the_same_command_prints_the_list_to_a_reader():
    done = subprocess.run(COMMAND, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("losses (")
