"""Reading a rank's flight recorder ring (written by the trainer-side heartbeat package).

Pure functions over bytes, apart from any I/O, so they are tested on real files written by the
helper and on damaged ones. The layout is restated here on purpose (the daemon never imports the
trainer package): a 64-byte header (magic, version, header size, record size, capacity, rank,
pid, write counter, creation time) and `capacity` fixed-size records, record `seq` in slot
(seq - 1) % capacity. A record counts only when both copies of its seq agree and its CRC
matches, so a rank killed mid-write, or a read racing the writer, loses that one record at most.
Bad headers raise `RingFormatError` with the exact reason; a damaged record is counted, not fatal.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

MAGIC = b"NPUWDFR\x00"
VERSION = 1
HEADER = struct.Struct("<8sHHIIiIIQd16x")
#: The version-1 record: the reader needs records at least this long (newer ones may be longer).
RECORD = struct.Struct("<QqddddddqBBHI8x")
RECORD_SIZE_V1 = 96
BODY_START, BODY_END = 8, 76
#: Bounds that keep a hostile header from making the daemon read or allocate much.
MAX_CAPACITY = 1 << 16
MAX_RECORD_SIZE = 4096
#: What a ring file name ends with (next to its heartbeat file).
SUFFIX = ".ring"

UNITS = {1: "tokens_per_s", 2: "samples_per_s"}
PHASES = {1: "init", 2: "train", 3: "eval", 4: "checkpoint", 5: "done"}
_OPTIONAL = (("loss", 2), ("lr", 4), ("grad_norm", 8), ("loss_scale", 16), ("throughput", 32))


class RingFormatError(ValueError):
    """The bytes are not a readable flight recorder: the message says exactly why."""


@dataclass(frozen=True)
class RingHeader:
    version: int
    header_size: int
    record_size: int
    capacity: int
    rank: Optional[int]
    pid: int
    counter: int
    created: float

    @property
    def file_size(self) -> int:
        return self.header_size + self.capacity * self.record_size

    def slot_offset(self, seq: int) -> int:
        return self.header_size + ((seq - 1) % self.capacity) * self.record_size


@dataclass(frozen=True)
class Ring:
    header: RingHeader
    #: Valid records, oldest first, as plain dicts (JSON-ready; NaN stays NaN).
    records: Tuple[Dict[str, Any], ...]
    #: Slots holding a torn or corrupt record (not the empty ones).
    torn: int = 0
    notes: Tuple[str, ...] = field(default_factory=tuple)


def ring_path(heartbeat_path: str) -> str:
    return heartbeat_path + SUFFIX


def parse_header(data: bytes) -> RingHeader:
    if len(data) < HEADER.size:
        raise RingFormatError(f"too short for a header: {len(data)} of {HEADER.size} bytes")
    magic, version, hsize, rsize, cap, rank, pid, _res, counter, created = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise RingFormatError(f"not a flight recorder (magic {magic[:8]!r})")
    if version != VERSION:
        raise RingFormatError(f"unsupported version {version} (this daemon reads {VERSION})")
    if hsize < HEADER.size or hsize > 4096:
        raise RingFormatError(f"bad header size {hsize}")
    if rsize < RECORD_SIZE_V1 or rsize > MAX_RECORD_SIZE:
        raise RingFormatError(f"bad record size {rsize} (expected {RECORD_SIZE_V1}..{MAX_RECORD_SIZE})")
    if not 1 <= cap <= MAX_CAPACITY:
        raise RingFormatError(f"bad capacity {cap} (expected 1..{MAX_CAPACITY})")
    return RingHeader(version, hsize, rsize, cap, None if rank < 0 else rank, pid, counter,
                      created if math.isfinite(created) else 0.0)


def decode_record(data: bytes, offset: int, record_size: int) -> Optional[Dict[str, Any]]:
    """One record as a dict; None for an empty slot; raises RingFormatError for a torn one."""
    head = struct.unpack_from("<Q", data, offset)[0]
    tail = struct.unpack_from("<Q", data, offset + record_size - 8)[0]
    if head == 0 and tail == 0:
        return None
    if head != tail or head == 0:
        raise RingFormatError("torn record (seq copies differ)")
    (seq, step, ts, loss, lr, grad_norm, loss_scale, throughput, seed, unit, phase, present,
     crc) = RECORD.unpack_from(data, offset)
    if zlib.crc32(data[offset + BODY_START:offset + BODY_END]) != crc:
        raise RingFormatError("torn record (checksum)")
    values = {"loss": loss, "lr": lr, "grad_norm": grad_norm, "loss_scale": loss_scale, "throughput": throughput}
    rec: Dict[str, Any] = {"seq": seq, "time": ts}
    if present & 1:
        rec["step"] = step
    for name, bit in _OPTIONAL:
        if present & bit:
            rec[name] = values[name]
    if present & 32 and unit in UNITS:
        rec["unit"] = UNITS[unit]
    if present & 64:
        rec["seed"] = seed
    if present & 128:
        rec["skipped"] = True
    if phase in PHASES:
        rec["phase"] = PHASES[phase]
    return rec


def parse_ring(data: bytes) -> Ring:
    """All valid records of a ring file's bytes, oldest first (the newest `capacity` ones)."""
    header = parse_header(data)
    notes: List[str] = []
    if len(data) < header.file_size:
        notes.append(f"file shorter than its header says ({len(data)} of {header.file_size} bytes)")
    records: List[Dict[str, Any]] = []
    torn = 0
    for slot in range(header.capacity):
        off = header.header_size + slot * header.record_size
        if off + header.record_size > len(data):
            break
        try:
            rec = decode_record(data, off, header.record_size)
        except RingFormatError:
            torn += 1
            continue
        if rec is not None:
            records.append(rec)
    records.sort(key=lambda r: r["seq"])
    return Ring(header, tuple(records[-header.capacity:]), torn, tuple(notes))


def tail_slots(header: RingHeader, n: int) -> List[Tuple[int, int]]:
    """(seq, file offset) of the slots that can hold the newest `n` records.

    One slot past the header's counter is included: a rank killed between storing a record and
    bumping the counter leaves its newest record there.
    """
    first = max(1, header.counter - min(n, header.capacity) + 1)
    return [(seq, header.slot_offset(seq)) for seq in range(first, header.counter + 2)]


def tail_records(header: RingHeader, chunks: Dict[int, bytes], n: int) -> List[Dict[str, Any]]:
    """The newest `n` valid records from slot bytes read for each seq `tail_slots` named.

    A slot still holding an older record (seq differs from the one expected there) is skipped.
    """
    out = []
    for seq, data in chunks.items():
        if len(data) < header.record_size:
            continue
        try:
            rec = decode_record(data, 0, header.record_size)
        except RingFormatError:
            continue
        if rec is not None and rec["seq"] == seq:
            out.append(rec)
    out.sort(key=lambda r: r["seq"])
    return out[-n:]


#: What `/api/status` shows of a ring record: the values `/metrics` exports anyway (the rank's
#: progress). Other fields (the seed, the learning rate) stay in the snapshot bundle only.
PUBLIC_FIELDS = ("seq", "time", "step", "phase", "loss", "grad_norm", "loss_scale", "throughput", "unit", "skipped")


def public_record(rec: Dict[str, Any]) -> Dict[str, Any]:
    return {k: rec[k] for k in PUBLIC_FIELDS if k in rec}
