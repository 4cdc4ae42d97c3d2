"""`python -m streamvid.cli`: the `streamvid` command (main.py)."""

import sys

from streamvid.cli.main import main

sys.exit(main())
