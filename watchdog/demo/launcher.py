"""A torchrun-like launcher: starts N ranks as its children and waits for them.

Like torchrun, it stays alive while ranks run and exits when all have exited (with the first
non-zero status). The process probe recognises the ranks as this launcher's children.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import List

from watchdog.compat import exitcode_of

def main() -> int:
    root, helper_dir, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
    procs: List[subprocess.Popen] = []
    for r in range(world):
        # What torchrun and a job script set: discovery reads it (ranks, NPUs, heartbeat files).
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                   ASCEND_RT_VISIBLE_DEVICES=",".join(str(i) for i in range(world)),
                   NPU_WATCHDOG_HEARTBEAT=os.path.join(root, "hb", "rank{rank}.json"))
        procs.append(subprocess.Popen([sys.executable, "-m", "watchdog.demo.rank", root, helper_dir], env=env))

    def forward(signum: int, _frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    # Reap each rank as soon as it exits (a dead rank must not linger as a zombie).
    remaining = {p.pid for p in procs}
    first_bad = 0
    while remaining:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid in remaining:
            remaining.discard(pid)
            code = exitcode_of(status)
            if code != 0 and first_bad == 0:
                first_bad = code
    return first_bad


if __name__ == "__main__":
    sys.exit(main())
