"""Pure parsing of the kernel's structured log, `/dev/kmsg`.

One `read()` of /dev/kmsg returns one record (Documentation/ABI/testing/dev-kmsg):

    prio,seq,usec,flags[,more];message text
     KEY=value
     KEY=value

`prio` holds the syslog facility and level (`facility << 3 | level`), `seq` the record's
sequence number (it grows by one per record from boot; a gap means records were overwritten
before they were read), `usec` the monotonic time since boot in microseconds, and `flags` `-`
or `c` (continuation). Lines after the first start with a space and carry the device
dictionary (`SUBSYSTEM=`, `DEVICE=`). Non-printable bytes in the message arrive escaped as
`\\xNN`, so a record is one text line. Everything here is linear in the record's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

#: Records longer than this are cut (the kernel's own limit is about 8 KiB per record).
MAX_RECORD_BYTES = 16384
LEVELS = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")


class KmsgFormatError(ValueError):
    """A record is not in the /dev/kmsg format (the message says what is wrong)."""


@dataclass(frozen=True)
class KmsgRecord:
    seq: int
    #: Syslog level 0 (emerg) .. 7 (debug).
    level: int
    #: Microseconds since boot (CLOCK_MONOTONIC of the kernel).
    usec: int
    message: str
    #: The device dictionary lines (`SUBSYSTEM=pci`, ...), as (key, value) pairs.
    dictionary: Tuple[Tuple[str, str], ...] = ()

    @property
    def level_name(self) -> str:
        return LEVELS[self.level]


def parse_record(raw: bytes) -> KmsgRecord:
    """One record as read from /dev/kmsg -> KmsgRecord; raises KmsgFormatError."""
    if len(raw) > MAX_RECORD_BYTES:
        raw = raw[:MAX_RECORD_BYTES]
    text = raw.decode("utf-8", "replace").replace("\x00", "")
    head, sep, rest = text.partition(";")
    if not sep:
        raise KmsgFormatError(f"no ';' after the record header: {text[:80]!r}")
    fields = head.split(",")
    if len(fields) < 4:
        raise KmsgFormatError(f"record header needs prio,seq,usec,flags: {head[:80]!r}")
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        raise KmsgFormatError(f"record header fields are not numbers: {head[:80]!r}") from None
    if prio < 0 or seq < 0 or usec < 0:
        raise KmsgFormatError(f"negative record header field: {head[:80]!r}")
    lines = rest.split("\n")
    message = lines[0].rstrip("\r")
    dictionary = []
    for line in lines[1:]:
        if line.startswith(" ") and "=" in line:
            key, _, value = line[1:].partition("=")
            dictionary.append((key, value))
    return KmsgRecord(seq=seq, level=prio & 7, usec=usec, message=message,
                      dictionary=tuple(dictionary))
