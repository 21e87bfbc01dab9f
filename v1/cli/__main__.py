"""``python -m v1.cli ...``: the `v1` command line."""

import sys

from v1.cli import main

if __name__ == "__main__":
    sys.exit(main())
