"""`python3` for the test session's child processes, without a pyenv shim's detour.

The fakes (npu-smi, hccn_tool: `#!/usr/bin/env -S python3 -S`, without `site`: they need only the
standard library, and the `.pth` files an interpreter's site-packages may hold cost about 20 ms
a call) and the fake launchers run through whatever `python3` PATH names. Where that is a pyenv shim (a shell script that runs `pyenv exec`),
each call cost about 90 ms of CPU against about 13 ms for the interpreter itself, measured on the
project's 2-core VM: with every test daemon calling the fake npu-smi every second, the shims took
a good share of the machine during `make test`. The interpreter the shim would pick is linked
first on PATH: the same program, reached directly. Nothing changes where `python3` is no shim.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile


def link_python3() -> None:
    exe = shutil.which("python3")
    if not exe or "shims" not in exe.split(os.sep):
        return
    r = subprocess.run([exe, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                       timeout=60)
    real = r.stdout.strip()
    if r.returncode != 0 or not real or not os.path.isabs(real) or "shims" in real.split(os.sep):
        return
    folder = tempfile.mkdtemp(prefix="npu-watchdog-tests-python3-")
    atexit.register(shutil.rmtree, folder, True)
    os.symlink(real, os.path.join(folder, "python3"))
    os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
