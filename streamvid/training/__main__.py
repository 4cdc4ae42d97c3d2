"""`python -m streamvid.training`: train-tiny with `--resume` (see `cli.py`)."""

import sys

from streamvid.training.cli import main

sys.exit(main())
