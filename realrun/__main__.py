"""Worker entry: ``torchrun ... -m realrun <verb> [options]``."""

import sys

from realrun.cli import main

sys.exit(main())
