"""`python -m watchdog` is the same as the `npu-watchdog` command."""

import sys

from watchdog.cli import main

if __name__ == "__main__":
    sys.exit(main())
