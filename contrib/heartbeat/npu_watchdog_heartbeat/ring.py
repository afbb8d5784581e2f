"""The flight recorder: the last N steps of one rank in a small memory-mapped ring file.

Practitioners ask for "the core metrics in an in-memory buffer every step, put on disk before the
crash". A shared file mapping is exactly that: each step is a store into memory, the kernel's page
cache owns the bytes, and they survive the process (SIGKILL, a segfault in a native kernel, the OOM
killer) without any write or fsync in the training loop. The watchdog reads the file when it takes
a snapshot and for its status page.

Layout (little-endian, version 1), duplicated on purpose in the daemon's reader
(watchdog/parse/flight_recorder.py), which never imports this package; a test checks they agree.

    header, 64 bytes:  magic b"NPUWDFR\\0", u16 version, u16 header size, u32 record size,
                       u32 capacity, i32 rank (-1 unknown), u32 pid, u32 reserved,
                       u64 write counter (records ever written), f64 created (epoch s), 16 reserved
    record, 96 bytes:  u64 seq, i64 step, f64 time, f64 loss, f64 lr, f64 grad_norm,
                       f64 loss_scale, f64 throughput, i64 seed, u8 unit, u8 phase,
                       u16 present bits, u32 crc32(bytes 8..76), 8 reserved, u64 seq again

Record `seq` (1-based) goes to slot (seq - 1) % capacity. A record is valid only when both seq
copies agree, are not 0, and the CRC matches: the writer zeroes the first copy, writes the body,
then the second copy, then the first. A rank killed mid-write, or a reader racing the writer,
therefore sees that one record as torn and skips it; every other record stays readable.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import threading
import time
import zlib
from typing import Any, Dict, Optional

MAGIC = b"NPUWDFR\x00"
VERSION = 1
HEADER = struct.Struct("<8sHHIIiIIQd16x")
RECORD = struct.Struct("<QqddddddqBBHI8xQ")
BODY = struct.Struct("<qddddddqBBH")
COUNTER_OFFSET = 32
DEFAULT_CAPACITY = 512

UNITS = {None: 0, "tokens_per_s": 1, "samples_per_s": 2}
PHASE_CODES = {None: 0, "init": 1, "train": 2, "eval": 3, "checkpoint": 4, "done": 5}
#: Present bits, in body order; `skipped` marks a step the optimizer skipped (overflow).
BITS = {"step": 1, "loss": 2, "lr": 4, "grad_norm": 8, "loss_scale": 16, "throughput": 32,
        "seed": 64, "skipped": 128}

assert HEADER.size == 64 and RECORD.size == 96 and BODY.size == 68


def _num(value: Any) -> Optional[float]:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def encode_record(seq: int, rec: Dict[str, Any]) -> bytes:
    """One 96-byte record from a dict of the known fields (missing ones are simply absent)."""
    present = 0
    values = {}
    for name in ("loss", "lr", "grad_norm", "loss_scale", "throughput"):
        v = _num(rec.get(name))
        if v is not None:
            present |= BITS[name]
        values[name] = v if v is not None else math.nan
    step = rec.get("step")
    seed = rec.get("seed")
    if isinstance(step, int):
        present |= BITS["step"]
    if isinstance(seed, int):
        present |= BITS["seed"]
    if rec.get("skipped"):
        present |= BITS["skipped"]
    body = BODY.pack(
        step if isinstance(step, int) else 0, float(rec.get("time") or 0.0),
        values["loss"], values["lr"], values["grad_norm"], values["loss_scale"], values["throughput"],
        seed if isinstance(seed, int) and -2**63 <= seed < 2**63 else 0,
        UNITS.get(rec.get("unit"), 0), PHASE_CODES.get(rec.get("phase"), 0), present)
    return RECORD.pack(seq, *BODY.unpack(body), zlib.crc32(body), seq)


class FlightRecorder:
    """One rank's ring file. Single writer; every public method is exception-free."""

    def __init__(self, path: str, capacity: int = DEFAULT_CAPACITY, rank: Optional[int] = None):
        self.path = path
        self.capacity = max(1, int(capacity))
        self.errors = 0
        self.last_error: Optional[str] = None
        self._lock = threading.Lock()
        self._mm: Optional[mmap.mmap] = None
        self._seq = 0
        self._last_step: Optional[int] = None
        try:
            self._open(rank)
        except Exception as exc:
            self._count(exc)

    def _count(self, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = type(exc).__name__ + ": " + str(exc)

    def _open(self, rank: Optional[int]) -> None:
        size = HEADER.size + self.capacity * RECORD.size
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            kept = self._resume(fd, size)
            if not kept:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, size)
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the file
        if not kept:
            self._mm[0:HEADER.size] = HEADER.pack(MAGIC, VERSION, HEADER.size, RECORD.size, self.capacity,
                                                  -1 if rank is None else rank, os.getpid(), 0, 0, time.time())
        else:  # a restarted rank keeps its predecessor's steps: they are the evidence
            struct.pack_into("<iI", self._mm, 20, -1 if rank is None else rank, os.getpid())

    def _resume(self, fd: int, size: int) -> bool:
        """Continue an existing ring of the same geometry (seq after its newest valid record)."""
        if os.fstat(fd).st_size != size:
            return False
        data = os.pread(fd, size, 0)
        magic, version, hsize, rsize, cap = HEADER.unpack_from(data)[:5]
        if (magic, version, hsize, rsize, cap) != (MAGIC, VERSION, HEADER.size, RECORD.size, self.capacity):
            return False
        for slot in range(cap):
            off = HEADER.size + slot * RECORD.size
            head, tail = struct.unpack_from("<Q", data, off)[0], struct.unpack_from("<Q", data, off + 88)[0]
            if head and head == tail:
                self._seq = max(self._seq, head)
        return True

    def record(self, rec: Dict[str, Any]) -> bool:
        """Store one step. The same step again (a later hook adding its loss) updates that record."""
        mm = self._mm
        if mm is None:
            return False
        try:
            with self._lock:
                step = rec.get("step")
                if step is None or step != self._last_step or self._seq == 0:
                    self._seq += 1
                self._last_step = step
                off = HEADER.size + ((self._seq - 1) % self.capacity) * RECORD.size
                data = encode_record(self._seq, rec)
                mm[off:off + 8] = b"\x00" * 8            # torn until the last store below
                mm[off + 8:off + 88] = data[8:88]
                mm[off + 88:off + 96] = data[88:96]
                mm[off:off + 8] = data[0:8]
                struct.pack_into("<Q", mm, COUNTER_OFFSET, self._seq)
            return True
        except Exception as exc:
            self._count(exc)
            return False

    def close(self) -> None:
        with self._lock:
            if self._mm is not None:
                try:
                    self._mm.close()
                except Exception as exc:
                    self._count(exc)
                self._mm = None
