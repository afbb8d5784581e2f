"""Pure parsers for npu-smi output: the `npu-smi info` table and `npu-smi info -t health`.

Why it is written this way:
- The table changed width across generations (80 to 116 columns), added columns (`Phy-ID`,
  `Device`, a fifth process column) and prints pairs as `3408 / 65536` or `41052/ 65536`. So
  nothing here uses column positions: a row is split on `|` into cells, a cell into whitespace
  tokens (with `a / b` pairs glued back together), and the meaning of each token comes from the
  table's own header rows.
- Output that does not look like a known table is an error that names the first line it could
  not read. A guess ("no rows -> zero NPUs") would turn a broken npu-smi into a lost-card alert,
  or worse, into silence.
- A cut table (npu-smi killed mid-write, a pipe closed early) must never read as fewer cards: the
  table must end with a closed block (a separator after the last row), a version that prints a
  process table must have one (except 310B boards, which print devices only), and when that
  table lists idle NPUs every NPU must be accounted for. Anything else is a parse failure, never
  "card lost". Without a process table the observation says `processes_known=False`: the
  processes are unknown, which is not the same as "no process holds a chip".
- Values are bounded: NaN, inf or a 5000-digit number is a parse failure naming the line, and the
  whole answer is capped (MAX_OUTPUT_CHARS), so hostile output costs bounded time.
- npu-smi reports its own failures as text (`dcmi model initialized failed ... ret is -8020`,
  sometimes with exit code 0 or unknown): those raise `NpuSmiUnavailable`, never "zero NPUs".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from watchdog.observations import NpuChip, NpuObservation, NpuProcess


class NpuSmiError(Exception):
    """Base of every npu-smi problem."""


class NpuSmiParseError(NpuSmiError):
    """The output is not a table (or key list) we know. Names the first unreadable line."""

    def __init__(self, message: str, line_no: Optional[int] = None, line: Optional[str] = None):
        self.line_no = line_no
        self.line = line
        self.reason = message
        where = ""
        if line_no is not None:
            shown = line if line is not None else ""
            if len(shown) > 160:
                shown = shown[:157] + "..."
            where = f" at line {line_no}: {shown!r}"
        super().__init__(f"cannot read npu-smi output{where}: {message}")


class NpuSmiUnavailable(NpuSmiError):
    """npu-smi answered, but with its own failure text: the devices cannot be seen right now."""

    def __init__(self, message: str):
        self.reason = message
        super().__init__(f"npu-smi unavailable: {message}")


#: No real `npu-smi info` answer comes near this (16 dies with processes is ~20 KB).
MAX_OUTPUT_CHARS = 4 << 20
#: The first npu-smi version whose `info` prints a process table (22.0.3.1 and older did not).
PROCESS_TABLE_SINCE = 23
#: Chip names of boards whose npu-smi prints the devices only, whatever its version (the 310B
#: SoC of Atlas 200I A2-class boards; seen with npu-smi 23.0.0). Their processes are unknown.
NO_PROCESS_TABLE_CHIPS = ("310B",)
#: Longest run of digits taken as a number (beyond it a value is garbage, not a reading).
MAX_DIGITS = 18
_WHOLE = re.compile(r"\d{1,%d}" % MAX_DIGITS)
_SEPARATOR = re.compile(r"\+[-=+]*\+")
#: Failure texts are short; longer lines are only searched in their first characters.
_FAILURE_SCAN_CHARS = 512

# --- failure texts ---------------------------------------------------------------------------

#: Lines npu-smi prints instead of data when the driver/DCMI cannot be used, or on bad arguments.
_FAILURE_PATTERNS: Tuple[re.Pattern, ...] = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"\bdcmi\w*\b.*\b(?:fail|failed|error)\b",      # dcmi model initialized failed ... / dcmi module initialize failed
    r"\bret is -\d+",                                # ... ret is -8020 / -8005
    r"^invalid (?:card|chip|device) id",             # Invalid card id.
    r"^error parameter of\b",                        # Error parameter of -i
    r"^usage: npu-smi\b",                            # usage printed instead of data
    r"error while loading shared libraries",         # driver libraries missing (container without mounts)
    r"^(?:the )?device (?:does not exist|not exist|is not exist)",
))


def detect_failure(text: str) -> Optional[str]:
    """Return the first npu-smi failure line in `text` (stripped), or None.

    Used on every answer, whatever its exit code: the exit code of these failures is not
    documented, and a failure text must never be read as "no devices".
    """
    for raw in text.splitlines():
        line = raw.strip()[:_FAILURE_SCAN_CHARS]
        if not line or line.startswith(("|", "+")):
            continue
        for pat in _FAILURE_PATTERNS:
            if pat.search(line):
                return line[:300]
    return None


# --- the `npu-smi info` table ----------------------------------------------------------------

_NULLS = ("NA", "-", "N/A", "")
#: `a / b` pairs (any spacing) or single tokens; `/` never occurs inside a single value.
_TOKEN = re.compile(r"([^\s/]+)\s*/\s*([^\s/]+)|([^\s/]+)")
_NO_PROCS = re.compile(r"^No running processes found in NPU\s+(\d+)$", re.IGNORECASE)
_VERSION = re.compile(r"Version:\s*(\S+)")

#: Header column name (lower case) -> NpuChip field(s). Pairs map to (used, total).
_COLUMNS: Dict[str, Union[str, Tuple[str, str]]] = {
    "power(w)": "power_w",
    "temp(c)": "temp_c",
    "aicore(%)": "aicore_util_pct",
    "memory-usage(mb)": ("memory_used_mb", "memory_total_mb"),
    "hbm-usage(mb)": ("hbm_used_mb", "hbm_total_mb"),
    # checked like the others (a malformed pair is a parse error); nothing reads it, so not kept
    "hugepages-usage(page)": ("hugepages_used", "hugepages_total"),
}


def _cells(line: str) -> List[str]:
    """`| a | b |` -> ['a', 'b']; tolerates a missing closing bar (truncated copies)."""
    body = line.strip()[1:]
    if body.endswith("|"):
        body = body[:-1]
    return [c.strip() for c in body.split("|")]


def _tokens(cell: str) -> List[Tuple[str, ...]]:
    out: List[Tuple[str, ...]] = []
    for m in _TOKEN.finditer(cell):
        if m.group(3) is not None:
            out.append((m.group(3),))
        else:
            out.append((m.group(1), m.group(2)))
    return out


def _num(text: str, kind: type, what: str, line_no: int, line: str):
    if text.upper() in _NULLS or text == "-":
        return None
    try:
        value = float(text) if len(text) <= 2 * MAX_DIGITS else math.inf
    except ValueError:
        raise NpuSmiParseError(f"{what} is not a number: {text!r}", line_no, line) from None
    if not math.isfinite(value) or abs(value) >= 10.0 ** MAX_DIGITS:
        raise NpuSmiParseError(f"{what} is not a finite reading: {text[:40]!r}", line_no, line)
    if kind is int:
        if value != int(value):
            raise NpuSmiParseError(f"{what} is not a whole number: {text!r}", line_no, line)
        return int(value)
    return value


def _int(text: str, what: str, line_no: int, line: str) -> int:
    if not _WHOLE.fullmatch(text):
        raise NpuSmiParseError(f"{what} is not a number: {text!r}", line_no, line)
    return int(text)


@dataclass
class _Header:
    """What the two device header rows say each cell holds."""

    has_device_id: bool
    top: List[str]      # column names of the metric cell in the first row (Power, Temp, Hugepages)
    bottom: List[str]   # ... in the second row (AICore, Memory, HBM)


@dataclass
class _ProcHeader:
    ncols: int
    pid: int
    name: int
    memory: int


@dataclass
class _Parsed:
    version: Optional[str] = None
    chips: List[NpuChip] = field(default_factory=list)
    processes: List[NpuProcess] = field(default_factory=list)
    idle_npus: List[int] = field(default_factory=list)


def _metric_values(cell: str, names: Sequence[str], line_no: int, line: str) -> Dict[str, object]:
    """Match the whitespace tokens of a metric cell to the header's column names."""
    toks = _tokens(cell)
    if len(toks) != len(names):
        raise NpuSmiParseError(
            f"expected {len(names)} values ({', '.join(names)}) but found {len(toks)}", line_no, line)
    out: Dict[str, object] = {}
    for name, tok in zip(names, toks):
        target = _COLUMNS.get(name.lower())
        if target is None:
            # A column this parser does not know yet: it counts for the cell's shape, and is
            # never misplaced into a known field.
            out["extra:" + name] = "/".join(tok)
            continue
        if isinstance(target, tuple):
            if len(tok) != 2:
                raise NpuSmiParseError(f"{name} should be a 'used / total' pair, got {tok[0]!r}", line_no, line)
            out[target[0]] = _num(tok[0], int, name, line_no, line)
            out[target[1]] = _num(tok[1], int, name, line_no, line)
        else:
            if len(tok) != 1:
                raise NpuSmiParseError(f"{name} should be a single value, got {'/'.join(tok)!r}", line_no, line)
            out[target] = _num(tok[0], float, name, line_no, line)
    return out


def parse_info(text: str) -> NpuObservation:
    """Parse `npu-smi info` output of any known generation into an NpuObservation.

    Raises NpuSmiUnavailable for npu-smi failure texts and NpuSmiParseError for anything else
    that is not a known table (naming the first line it could not read).
    """
    if len(text) > MAX_OUTPUT_CHARS:
        raise NpuSmiParseError(f"output is {len(text)} characters, more than any real table "
                               f"(limit {MAX_OUTPUT_CHARS})")
    failure = detect_failure(text)
    if failure is not None:
        raise NpuSmiUnavailable(failure)
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise NpuSmiParseError("empty output")
    res = _Parsed()
    header: Optional[_Header] = None
    proc_header: Optional[_ProcHeader] = None
    pending_header_top: Optional[Tuple[int, List[str]]] = None
    # Device rows come in pairs: row 1 (NPU, name, health, power...), row 2 (chip, bus id, ...).
    row1: Optional[Tuple[int, str, List[str]]] = None
    rows_since_sep = 0
    section = "start"  # start -> devices -> processes
    last_line_no = 0
    #: The last row not yet closed by a separator (a cut table ends inside a block).
    open_row: Optional[Tuple[int, str]] = None

    for idx, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        last_line_no = idx
        if line.startswith("+"):
            if not _SEPARATOR.fullmatch(line):  # a separator cut short is a cut table
                raise NpuSmiParseError("not a table separator", idx, raw)
            if row1 is not None:
                raise NpuSmiParseError("device row without its second row (chip, bus id)", row1[0], lines[row1[0] - 1])
            rows_since_sep = 0
            open_row = None
            continue
        if not line.startswith("|"):
            raise NpuSmiParseError("not part of an npu-smi table", idx, raw)
        open_row = (idx, raw)
        cells = _cells(line)
        first = cells[0]
        first_words = first.split()

        # Title row: `npu-smi 25.2.0   Version: 25.2.0`
        if len(cells) == 1 and _VERSION.search(first) and "npu-smi" in first.lower():
            res.version = _VERSION.search(first).group(1)  # type: ignore[union-attr]
            continue

        # Device header, first row: `NPU  Name | Health | Power(W) Temp(C) Hugepages-Usage(page)`
        if first_words[:2] == ["NPU", "Name"] and len(cells) == 3:
            pending_header_top = (idx, cells[2].split())
            continue
        # Device header, second row: `Chip [Device|Phy-ID] | Bus-Id | AICore(%) Memory-Usage(MB) ...`
        if pending_header_top is not None and first_words[:1] == ["Chip"] and len(cells) == 3:
            if len(first_words) > 2 or cells[1].lower() != "bus-id":
                raise NpuSmiParseError("unknown device header", idx, raw)
            header = _Header(has_device_id=len(first_words) == 2, top=pending_header_top[1],
                             bottom=cells[2].split())
            pending_header_top = None
            section = "devices"
            continue
        if pending_header_top is not None:
            raise NpuSmiParseError("device header is not followed by its second row", idx, raw)

        # Process header: `NPU  Chip | Process id | Process name | Process memory(MB) [| Process id in container]`
        if first_words == ["NPU", "Chip"] and len(cells) >= 4 and cells[1].lower().startswith("process"):
            names = [c.lower() for c in cells]
            try:
                proc_header = _ProcHeader(len(cells), names.index("process id"),
                                          names.index("process name"), names.index("process memory(mb)"))
            except ValueError:
                raise NpuSmiParseError("unknown process table header", idx, raw) from None
            section = "processes"
            continue

        if section == "devices":
            assert header is not None
            if len(cells) != 3:
                raise NpuSmiParseError(f"device row should have 3 cells, found {len(cells)}", idx, raw)
            rows_since_sep += 1
            if row1 is None:
                if rows_since_sep != 1:
                    raise NpuSmiParseError("device row without a separator before it", idx, raw)
                row1 = (idx, raw, cells)
                continue
            res.chips.append(_chip(header, row1, (idx, raw, cells)))
            row1 = None
            continue

        if section == "processes":
            assert proc_header is not None
            if len(cells) == 1:
                m = _NO_PROCS.match(cells[0])
                if not m:
                    raise NpuSmiParseError("unknown process table row", idx, raw)
                res.idle_npus.append(_int(m.group(1), "NPU", idx, raw))
                continue
            if len(cells) != proc_header.ncols:
                raise NpuSmiParseError(
                    f"process row should have {proc_header.ncols} cells, found {len(cells)}", idx, raw)
            ids = cells[0].split()
            if len(ids) != 2:
                raise NpuSmiParseError("process row should start with 'NPU Chip'", idx, raw)
            mem = _num(cells[proc_header.memory], int, "Process memory(MB)", idx, raw)
            res.processes.append(NpuProcess(
                npu=_int(ids[0], "NPU", idx, raw), chip=_int(ids[1], "Chip", idx, raw),
                pid=_int(cells[proc_header.pid], "Process id", idx, raw),
                name=cells[proc_header.name],
                memory_mb=mem if mem is not None else 0,
            ))
            continue

        raise NpuSmiParseError("table row before any known header", idx, raw)

    if row1 is not None:
        raise NpuSmiParseError("device row without its second row (chip, bus id)", row1[0], row1[1])
    if pending_header_top is not None:
        raise NpuSmiParseError("device header is not followed by its second row", pending_header_top[0],
                               lines[pending_header_top[0] - 1])
    if header is None:
        raise NpuSmiParseError("no device table header ('NPU Name | Health | ...') found",
                               last_line_no or None, lines[last_line_no - 1] if last_line_no else None)
    if not res.chips:
        # A header without a single device is not "zero NPUs": npu-smi could not list them.
        raise NpuSmiUnavailable("npu-smi printed a device table without any device")
    _check_complete(res, open_row, proc_header is not None, last_line_no, lines)
    return NpuObservation(version=res.version, chips=tuple(res.chips), processes=tuple(res.processes),
                          processes_known=proc_header is not None)


def _major(version: Optional[str]) -> Optional[int]:
    m = re.match(r"\d{1,4}", version or "")
    return int(m.group(0)) if m else None


def _check_complete(res: _Parsed, open_row: Optional[Tuple[int, str]], has_procs: bool, last_line_no: int,
                    lines: List[str]) -> None:
    """Refuse a table that was cut: a lost card must come from npu-smi, never from a short read."""
    if open_row is not None:
        raise NpuSmiParseError("the table is cut: its last row is not closed by a separator line",
                               open_row[0], open_row[1])
    major = _major(res.version)
    last = lines[last_line_no - 1] if last_line_no else None
    devices_only = all(c.name.upper().startswith(NO_PROCESS_TABLE_CHIPS) for c in res.chips)
    if not has_procs and major is not None and major >= PROCESS_TABLE_SINCE and not devices_only:
        # A table cut right after a card's closing separator looks complete: only the process
        # table that this version prints after the devices proves that every card was read.
        raise NpuSmiParseError(f"the table is cut: npu-smi {res.version} prints a process table after the "
                               "devices and there is none", last_line_no or None, last)
    if has_procs and not res.processes and not res.idle_npus:
        raise NpuSmiParseError("the table is cut: the process table has no rows", last_line_no or None, last)
    if res.idle_npus:
        # This layout names every NPU without processes, so each NPU must appear somewhere.
        seen = set(res.idle_npus) | {p.npu for p in res.processes}
        lost = sorted({c.npu for c in res.chips} - seen)
        if lost:
            raise NpuSmiParseError(f"the table is cut: NPU {lost[0]} is neither in the process table nor "
                                   "listed without processes", last_line_no or None, last)


def _chip(header: _Header, row1: Tuple[int, str, List[str]], row2: Tuple[int, str, List[str]]) -> NpuChip:
    n1, raw1, c1 = row1
    n2, raw2, c2 = row2
    top = c1[0].split(None, 1)
    if not top:
        raise NpuSmiParseError("device row has no NPU id", n1, raw1)
    npu = _int(top[0], "NPU", n1, raw1)
    name = top[1].strip() if len(top) > 1 else ""
    ids = c2[0].split()
    want = 2 if header.has_device_id else 1
    if len(ids) != want:
        raise NpuSmiParseError(f"expected {want} id(s) (Chip{' and Device' if want == 2 else ''}), found {len(ids)}", n2, raw2)
    chip = _int(ids[0], "Chip", n2, raw2)
    device_id = _int(ids[1], "Device/Phy-ID", n2, raw2) if want == 2 else None
    health = c1[1]
    if not health or " " in health:
        raise NpuSmiParseError(f"health should be one word, got {health!r}", n1, raw1)
    bus = c2[1]
    if " " in bus:
        raise NpuSmiParseError(f"Bus-Id should be one word, got {bus!r}", n2, raw2)
    values = _metric_values(c1[2], header.top, n1, raw1)
    values.update(_metric_values(c2[2], header.bottom, n2, raw2))
    return NpuChip(
        npu=npu, chip=chip, device_id=device_id, name=name, health=health,
        power_w=values.get("power_w"),  # type: ignore[arg-type]
        temp_c=values.get("temp_c"),  # type: ignore[arg-type]
        aicore_util_pct=values.get("aicore_util_pct"),  # type: ignore[arg-type]
        memory_used_mb=values.get("memory_used_mb"),  # type: ignore[arg-type]
        memory_total_mb=values.get("memory_total_mb"),  # type: ignore[arg-type]
        hbm_used_mb=values.get("hbm_used_mb"),  # type: ignore[arg-type]
        hbm_total_mb=values.get("hbm_total_mb"),  # type: ignore[arg-type]
        bus_id=None if bus.upper() in _NULLS else bus,
    )


# --- `npu-smi info -t health -i N [-c C]` ----------------------------------------------------

@dataclass(frozen=True)
class HealthInfo:
    """Health of one chip: the status word, its hex error codes, and the explanation lines."""

    status: str
    codes: Tuple[str, ...]
    information: Tuple[str, ...]


def parse_kv(text: str) -> List[Tuple[str, str]]:
    """`Key   : value` lines of any `npu-smi info -t <type>` output, in order (keys may repeat
    and may be empty for continuation lines). Raises NpuSmiParseError on any other line."""
    failure = detect_failure(text)
    if failure is not None:
        raise NpuSmiUnavailable(failure)
    out: List[Tuple[str, str]] = []
    for idx, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")  # not a regex: linear on any line
        if not sep:
            raise NpuSmiParseError("expected 'key : value'", idx, raw)
        out.append((key.strip(), value.strip()))
    if not out:
        raise NpuSmiParseError("empty output")
    return out


def parse_health(text: str) -> HealthInfo:
    """Parse `npu-smi info -t health` of one chip.

    `Error Code` holds space-separated hex codes or `NA`; lines with an empty key continue the
    `Error Information`.
    """
    pairs = parse_kv(text)
    status: Optional[str] = None
    codes: List[str] = []
    info: List[str] = []
    last_key = ""
    for key, value in pairs:
        k = key.lower()
        if k == "health status":
            status = value
        elif k == "error code":
            if value.upper() not in _NULLS:
                for code in value.split():
                    if not re.fullmatch(r"(?:0x)?[0-9A-Fa-f]+", code):
                        raise NpuSmiParseError(f"error code is not hexadecimal: {code!r}")
                    codes.append(code.upper().replace("0X", ""))
        elif k == "error information" or (k == "" and last_key == "error information"):
            if value.upper() not in _NULLS:
                info.append(value)
            key = "Error Information"
        last_key = key.lower()
    if status is None:
        raise NpuSmiParseError("no 'Health Status' line in health output")
    return HealthInfo(status=status, codes=tuple(codes), information=tuple(info))


# --- the `npu-smi info -m` chip mapping ------------------------------------------------------

#: Header of `npu-smi info -m`: four columns, the last (Chip Name) may contain spaces.
_MAP_HEADER = re.compile(r"^NPU ID\s+Chip ID\s+Chip Logic ID\s+Chip Name$", re.IGNORECASE)
_MAP_ROW = re.compile(r"^(\d{1,9})\s+(\d{1,9})\s+(\d{1,9}|-)\s+(\S.*)$")


@dataclass(frozen=True)
class ChipMapEntry:
    """One chip of `npu-smi info -m` (keyed by its logic id): the card (NPU ID), the chip inside it."""

    npu: int
    chip: int
    name: str


def parse_chip_map(text: str) -> Dict[int, ChipMapEntry]:
    """Parse `npu-smi info -m`: chip logic id -> (NPU ID, Chip ID, name).

    Why: CANN plogs, the driver's kernel log and torch_npu name a device by its chip logic id
    (`device_id=3`), npu-smi and our metrics by NPU ID and chip; on many servers they differ
    (an Atlas 300 card is NPU 6 with logic ids 0-3). `Mcu` rows (logic id `-`) are not devices
    and are skipped. Anything but the header and rows is an error naming the line.
    """
    failure = detect_failure(text)
    if failure is not None:
        raise NpuSmiUnavailable(failure)
    out: Dict[int, ChipMapEntry] = {}
    header = False
    for idx, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if not header:
            if not _MAP_HEADER.match(line):
                raise NpuSmiParseError("expected the 'NPU ID  Chip ID  Chip Logic ID  Chip Name' header", idx, raw)
            header = True
            continue
        m = _MAP_ROW.match(line)
        if not m:
            raise NpuSmiParseError("expected 'NPU-ID CHIP-ID LOGIC-ID NAME'", idx, raw)
        if m.group(3) == "-":
            continue
        logic = int(m.group(3))
        if logic in out:
            raise NpuSmiParseError(f"chip logic id {logic} listed twice", idx, raw)
        out[logic] = ChipMapEntry(npu=int(m.group(1)), chip=int(m.group(2)), name=m.group(4).strip())
    if not header:
        raise NpuSmiParseError("empty output")
    return out
