"""`python -m watchdog.docsgen` (`make docs`): rewrite the generated blocks and pages of docs/."""

import sys

from watchdog.docsgen import update

changed = update()
print("updated: " + ", ".join(changed) if changed else "all generated blocks are current")
sys.exit(0)
