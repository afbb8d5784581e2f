"""Copies every rank's flight recorder (`<heartbeat file>.ring`) into the snapshot bundle.

The ring holds the last steps of a rank even when its heartbeat file was throttled or the rank
died by SIGKILL or a native crash, which is why it goes into every bundle: the raw file (for the
record) and a decoded JSON next to it (for the reader). Ring files are opened without following
symlinks and read up to the size their header declares, so a hostile or foreign file costs
little and cannot pull another file into the bundle.
"""

from __future__ import annotations

import json
import os
from typing import List, Optional

from watchdog.parse import flight_recorder as fr
from watchdog.observations import HeartbeatObservation
from watchdog.host.rankfiles import open_rank_file
from watchdog.snapshots.collect import rank_owners
from watchdog.snapshots.bundle import NOT_FOUND, Item, oserror_reason
from watchdog.snapshots.context import CaptureContext
from watchdog.snapshots.files import expand, member_name

#: The most a ring file may declare (header + records) before it is refused.
MAX_RING_BYTES = 8 * 1024 * 1024


def heartbeat_files(ctx: CaptureContext) -> List[str]:
    """Heartbeat files from the config and from the heartbeat probe's last round."""
    found: List[str] = []
    for pattern in ctx.config.probes.heartbeat.paths:
        found += [p for p in expand(pattern) if not p.endswith(fr.SUFFIX)]
    if ctx.runtime is not None:
        sample = ctx.runtime.state.view().latest("heartbeat")
        if sample is not None and isinstance(sample.value, HeartbeatObservation):
            found += [r.path for r in sample.value.readings]
    return sorted(set(found))


def read_ring(path: str, uid: Optional[int] = None) -> bytes:
    """The ring's bytes, at most what its header declares (raises OSError / RingFormatError).
    Opened through `rankfiles` (no link, regular files of the rank's user only)."""
    fd = open_rank_file(path, uid)
    try:
        header = fr.parse_header(os.pread(fd, fr.HEADER.size, 0))
        if header.file_size > MAX_RING_BYTES:
            raise fr.RingFormatError(f"declares {header.file_size} bytes, more than {MAX_RING_BYTES}")
        return os.pread(fd, header.file_size, 0)
    finally:
        os.close(fd)


def collect_flight_recorders(ctx: CaptureContext, item: Item) -> None:
    rings = [fr.ring_path(p) for p in heartbeat_files(ctx)]
    rings = [p for p in rings if os.path.lexists(p)]
    if not rings:
        item.note = "no flight recorder next to any heartbeat file"
        return
    owners = rank_owners(ctx)
    for path in rings:
        try:
            data = read_ring(path, owners.get(path))
            ring = fr.parse_ring(data)
        except fr.RingFormatError as exc:
            item.fail("error", f"{path}: {exc}", what=path)
            continue
        except OSError as exc:
            reason = oserror_reason(exc) if not isinstance(exc, FileNotFoundError) else NOT_FOUND
            item.fail(reason, f"{path}: {exc.strerror or exc}", what=path)
            continue
        name = member_name("flight-recorder", path)
        ctx.bundle.add(name, data)
        decoded = {"path": path, "header": ring.header.__dict__, "torn_records": ring.torn,
                   "notes": list(ring.notes), "records": list(ring.records)}
        ctx.bundle.add(name + ".json", json.dumps(decoded, indent=1))
        item.files += [name, name + ".json"]
