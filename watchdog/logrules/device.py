"""Which device a log line names: the chip logic id in plogs, driver kernel logs and torch_npu.

Pure and linear-time (one RE2-compatible alternation, bounded digit runs). The logic id is what
the runtime calls a device; `npu-smi info -m` maps it to the NPU ID and chip npu-smi and our
metrics use (the logs detector does that mapping with the npu probe's table).
"""

from __future__ import annotations

import re
from typing import Optional

# Forms seen in real logs: plog `device_id=3, stream_id=2`, MindSpore `device_id: 0,`, black box
# `device_id = 2,`, runtime `Device[1] lost heartbeat`, driver `Heartbeat lost! (device=1;`,
# tsdrv `devid=1 tsid=0` / `[devid-0][tsid-0]`, AI CPU `devId=7`, IMP `(device_id:1 die_id:0)`.
_DEVICE = re.compile(
    r"\bdevice_id\s*[=:]\s*(\d{1,5})\b"
    r"|\bdev[Ii]d\s*[=:]\s*(\d{1,5})\b"
    r"|\bDevice\[(\d{1,5})\]"
    r"|\(device=(\d{1,5});"
    r"|\[devid-(\d{1,5})\]", re.ASCII)


def device_of(text: str) -> Optional[int]:
    """The first device (chip logic id) named in `text`, else None."""
    m = _DEVICE.search(text)
    if m is None:
        return None
    return int(next(g for g in m.groups() if g is not None))
