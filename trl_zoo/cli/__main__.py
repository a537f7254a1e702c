"""`python -m trl_zoo.cli`: the `trl-zoo` command (`accelerate launch -m trl_zoo.cli train ...`)."""

import sys

from . import main

sys.exit(main())
