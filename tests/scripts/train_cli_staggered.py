"""Worker for tests/test_launched_run.py: `trl-zoo train` as one process of a distributed launch, every process but
the first starting to parse its arguments `argv[1]` seconds after it has joined the launch's process group.

The first process joins the group while it parses (transformers' TrainingArguments do), waits there for the others,
then goes on to choose and claim its run folder; the others parse only after the pause, when that folder exists."""

from __future__ import annotations

import os
import sys
import time

from accelerate import PartialState

from trl_zoo.cli import main

if __name__ == "__main__":
    if os.environ.get("RANK", "0") != "0":
        PartialState()
        time.sleep(float(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
