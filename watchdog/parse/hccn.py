"""Parsers of `hccn_tool` query output (910B / A3 syntax: `hccn_tool -i <dev> -<cmd> -g`): pure, no I/O.

Each parser takes the text one query printed and returns a frozen record, or raises
`HccnParseError` naming what it expected: output that is not what the tool prints must never read
as a healthy link. The line shapes follow the tool's source and the public captures in
`tests/fixtures/hccn_tool/` (see its SOURCES.md); every regular expression is anchored and free of
nested repetition, so a hostile line costs linear time.

Only read-only queries are parsed here. The probe never runs `-link -s`, `-cfg recovery`,
`-optical -t`, `-scdr -t` or any `-s` option: they change the device.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


class HccnParseError(ValueError):
    """The text is not what the query prints (the message says what was expected)."""


# --- -link -g ----------------------------------------------------------------------------------

_LINK = re.compile(r"^\s*link status\s*:\s*(UP|DOWN)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_link(text: str) -> bool:
    """`link status: UP|DOWN` -> True when up."""
    m = _LINK.search(text)
    if m is None:
        raise HccnParseError("no 'link status: UP|DOWN' line")
    return m.group(1).upper() == "UP"


# --- -link_stat -g -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LinkChange:
    #: Epoch seconds (the tool prints local time, asctime format).
    time: float
    up: bool


@dataclass(frozen=True)
class LinkStat:
    up_count: int
    #: None on older drivers, which print no `link down count` line.
    down_count: Optional[int]
    #: The change records, newest first (the tool keeps at most 10).
    changes: Tuple[LinkChange, ...]
    #: The tool's own clock at the query (epoch seconds), None when unreadable.
    tool_time: Optional[float] = None

    @property
    def newest_down(self) -> Optional[bool]:
        """Whether the newest record is a LINK DOWN (the link is down now); None without records."""
        return (not self.changes[0].up) if self.changes else None


_PREFIX = r"^\[(?:devid|device) \d{1,4}\]"
_STAT_KEY = re.compile(_PREFIX + r"(current time|link up count|link down count|link change records)\s*:\s*(.*?)\s*$")
_STAT_REC = re.compile(_PREFIX + r"\s+(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\s+LINK[ _](UP|DOWN)\s*$")
_ASCTIME = "%a %b %d %H:%M:%S %Y"


def _asctime(text: str) -> Optional[float]:
    try:
        return time.mktime(time.strptime(" ".join(text.split()), _ASCTIME))
    except (ValueError, OverflowError):
        return None


def parse_link_stat(text: str) -> LinkStat:
    """The link's up/down counters and change records (`[devid N]` or older `[device N]` lines)."""
    fields: Dict[str, str] = {}
    changes: List[LinkChange] = []
    for line in text.splitlines():
        m = _STAT_KEY.match(line)
        if m is not None:
            fields[m.group(1)] = m.group(2)
            continue
        m = _STAT_REC.match(line)
        if m is not None:
            at = _asctime(m.group(1))
            if at is not None:
                changes.append(LinkChange(at, m.group(2) == "UP"))
    if "link up count" not in fields:
        raise HccnParseError("no '[devid N]link up count' line")
    try:
        up = int(fields["link up count"])
        down = int(fields["link down count"]) if "link down count" in fields else None
    except ValueError:
        raise HccnParseError("link up/down count is not a number") from None
    tool_time = _asctime(fields["current time"]) if "current time" in fields else None
    return LinkStat(up, down, tuple(changes), tool_time)


# --- -net_health -g ----------------------------------------------------------------------------

#: Every value the tool prints (its status table, 0..9); anything else is a parse error.
NET_HEALTH = ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault", "Init",
              "Thread error", "Detect ip set", "Unknown")
_NET = re.compile(r"^\s*net health status\s*:\s*(.+?)\s*$", re.MULTILINE)
#: Values that mean the NIC cannot reach its detection address (Init: the check is starting).
NET_HEALTH_OK = ("Success", "Init")


def parse_net_health(text: str) -> str:
    m = _NET.search(text)
    if m is None:
        raise HccnParseError("no 'net health status:' line")
    value = m.group(1)
    for known in NET_HEALTH:
        if value.lower().startswith(known.lower()):  # one capture spells "Socket failed"
            return known
    raise HccnParseError(f"unknown net health status {value[:40]!r}")


# --- -optical -g -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Optical:
    #: False: the tool says no module is present (or prints `temperature : NA`).
    present: bool
    temp_c: Optional[float]
    #: Per lane (0..3, `NA` lanes left out): milliwatts.
    tx_mw: Tuple[Tuple[int, float], ...]
    rx_mw: Tuple[Tuple[int, float], ...]
    #: The module's own alarm thresholds (mW), when it reports them.
    rx_low_mw: Optional[float] = None
    tx_low_mw: Optional[float] = None
    #: Lowest media/host SNR over the lanes (dB), None when not supported.
    snr_db: Optional[float] = None
    #: Loss-of-signal / loss-of-lock bitmasks (one bit per lane); 0 = clear, None = NA.
    rx_los: Optional[int] = None
    rx_lol: Optional[int] = None


_OPT = re.compile(r"^([A-Za-z][A-Za-z ]{0,30}?[A-Za-z0-9])\s*:\s*(.*?)\s*$")
_NUM = re.compile(r"^(-?\d{1,9}(?:\.\d{1,9})?)(?:\s*(?:mW|mV|mA|C|dB|nm))?$")


def _num(value: str) -> Optional[float]:
    m = _NUM.match(value)
    return float(m.group(1)) if m else None


def _mask(value: str) -> Optional[int]:
    try:
        return int(value, 16)
    except ValueError:
        return None


def mw_to_dbm(mw: float) -> float:
    """Optical power in dBm (10*log10(mW)); -40 dBm stands for no light at all."""
    return 10.0 * math.log10(mw) if mw > 0.0001 else -40.0


def parse_optical(text: str) -> Optical:
    if "optical info" not in text:
        raise HccnParseError("no 'optical info:' header")
    kv: Dict[str, str] = {}
    for line in text.splitlines():
        m = _OPT.match(line.strip())
        if m is not None:
            kv[m.group(1).strip().lower()] = m.group(2)
    lanes = lambda prefix: tuple((i, v) for i in range(8)  # noqa: E731
                                 for v in [_num(kv.get(f"{prefix}{i}", "NA"))] if v is not None)
    snr = [v for k, raw in kv.items() if "snr lane" in k for v in [_num(raw)] if v is not None]
    temp_raw = kv.get("temperature", "")
    present = kv.get("present", "present").strip().lower() == "present" and temp_raw.upper() != "NA"
    return Optical(
        present=present, temp_c=_num(temp_raw), tx_mw=lanes("tx power"), rx_mw=lanes("rx power"),
        rx_low_mw=_num(kv.get("rxpower low thres", "")), tx_low_mw=_num(kv.get("txpower low thres", "")),
        snr_db=min(snr) if snr else None, rx_los=_mask(kv.get("rx los flag", "")),
        rx_lol=_mask(kv.get("rx lol flag", "")))


# --- -stat -g ----------------------------------------------------------------------------------

_STAT_LINE = re.compile(r"^\s*([a-z][a-z0-9_]{0,63})\s*:\s*(\d{1,20})\s*$")


def parse_stat(text: str) -> Dict[str, int]:
    """`packet statistics:` then cumulative `name:value` counters (910B prints no space, 950 one)."""
    if "packet statistics" not in text:
        raise HccnParseError("no 'packet statistics:' header")
    out: Dict[str, int] = {}
    for line in text.splitlines():
        m = _STAT_LINE.match(line)
        if m is not None:
            out[m.group(1)] = int(m.group(2))
    if not out:
        raise HccnParseError("no 'name:value' counter under 'packet statistics:'")
    return out


#: The counters of `-stat` that mean lost, corrupted or retried traffic (the rest count volume).
ERROR_COUNTERS = ("mac_rx_bad_pkt_num", "mac_tx_bad_pkt_num", "mac_rx_fcs_err_pkt_num", "roce_rx_err_pkt_num",
                  "roce_tx_err_pkt_num", "roce_out_of_order_num", "roce_verification_err_num",
                  "roce_qp_status_err_num", "roce_new_pkt_rty_num", "crc_error_sum")
#: PFC pause frames sent and received (congestion back-pressure, not errors).
PFC_COUNTERS = ("mac_tx_pfc_pkt_num", "mac_rx_pfc_pkt_num")


# --- -fec -g -----------------------------------------------------------------------------------

_FEC = re.compile(r"^\s*fec mode\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_fec(text: str) -> str:
    """`fec mode: rs FEC mode | no FEC mode | auto FEC mode` -> `rs`, `no` or `auto`."""
    m = _FEC.search(text)
    if m is None:
        raise HccnParseError("no 'fec mode:' line")
    return m.group(1).split()[0].lower()


# --- -lldp -g ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LldpNeighbour:
    #: The switch port this NIC is cabled to (`Ifname:` under Port ID TLV), "" when absent.
    port: str
    #: First line of the switch's System Name or Description TLV.
    system: str


def parse_lldp(text: str) -> LldpNeighbour:
    """The neighbour's port and system from the TLV dump (headers at column 0, values indented)."""
    section = ""
    values: Dict[str, str] = {}
    for line in text.splitlines():
        if line.endswith("TLV") and not line[:1].isspace():
            section = line[:-3].strip().lower()
            continue
        value = line.strip()
        if section and value and section not in values:
            values[section] = value
    if not values:
        raise HccnParseError("no LLDP TLV in the output")
    port = values.get("port id", "")
    port = port.split(":", 1)[1].strip() if port.lower().startswith(("ifname", "local")) and ":" in port else port
    system = values.get("system name") or values.get("system description", "")
    return LldpNeighbour(port=port[:64], system=system[:80])
