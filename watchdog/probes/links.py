"""The `links` probe: the RoCE network port of every NPU, read with `hccn_tool`.

Why: HCCL learns of a dead or flapping link only when a collective times out (minutes, or 30
minutes at CANN's defaults); the port itself knows at once. The vendor's own scheduler escalates
a link down after 20 s and counts flaps; this probe gives the detectors the same facts.

Cost is bounded: one `hccn_tool` run per chip per round, each under a hard timeout (its process
group killed), run one after the other so a struggling driver is never asked two questions at a
time, and the round stops asking when its budget is spent (the rest wait for the next round).
Most rounds ask `-link -g` (the link state); every other round of a chip whose link is up may
instead ask the most overdue detail query instead (`-link_stat`, `-optical`, `-net_health`,
`-stat` every `detail_interval`, `-fec`, `-lldp` ten times more rarely). While a link is down or
unknown every round asks for its state, so a down is confirmed by a second read one round later.

Only read-only queries run (`-g`): never `-link -s`, `-cfg recovery`, `-optical -t`, `-scdr -t`,
nor anything that sets. A node without `hccn_tool` (no RoCE ports, a container without the driver
tools) is not a failure: the observation says `absent` and nothing fires.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from pydantic import Field

from watchdog.core.state import RecordKey
from watchdog.host import clock
from watchdog.config.sections.common import ProbeSchedule, ProbeSection
from watchdog.config.types import Duration
from watchdog.host.subproc import run_command
from watchdog.parse import hccn
from watchdog.parse.hccn import HccnParseError, LinkStat, LldpNeighbour, Optical
from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError

log = logging.getLogger(__name__)

#: Where the Ascend driver installs the tool (looked at when the configured name is not on PATH).
DRIVER_TOOLS = "/usr/local/Ascend/driver/tools"
#: Device nodes of the NPUs this node (or container) can use: /dev/davinci<N>.
DEVICE_NODE = re.compile(r"^davinci(\d{1,4})$")
#: Down events kept per port (the tool itself keeps 10).
MAX_DOWNS = 64


class LinksProbeConfig(ProbeSchedule):
    """Off unless enabled (on in the shipped example config): reads the NPUs' RoCE ports with
    hccn_tool. Without hccn_tool on the node it watches nothing and says so once (`doctor`,
    /api/status)."""

    #: Read the NPUs' network ports with hccn_tool (nothing is watched where it is absent).
    enabled: bool = False
    #: Time between two rounds; each round runs one hccn_tool query per NPU.
    interval: Duration = Field(default="5s")
    #: The hccn_tool program (name on PATH or absolute path); also looked for in the driver's
    #: tools folder (/usr/local/Ascend/driver/tools).
    hccn_tool: str = "hccn_tool"
    #: The NPU device ids to read (`hccn_tool -i <id>`); null: every /dev/davinci<N> of the node.
    devices: Optional[List[int]] = None
    #: Hard timeout of one hccn_tool run; its process group is killed on expiry.
    command_timeout: Duration = Field(default="3s", gt=0)
    #: How often each detail query (-link_stat, -optical, -net_health, -stat) is asked per NPU;
    #: -fec and -lldp ten times more rarely.
    detail_interval: Duration = Field(default="30s", gt=0)
    #: A link that went down this many times within `flap_window` raises `link_flapping`.
    flap_count: int = Field(default=3, ge=1, le=10)
    #: The window `flap_count` is counted in.
    flap_window: Duration = Field(default="10m", gt=0)
    #: Optics: a lane received below this power (dBm) raises `optics_degraded` (Huawei's link
    #: diagnosis alarms below -10 dBm); so does a lane below the module's own low threshold.
    rx_power_min_dbm: float = -10.0
    #: Optics: a lane transmitting below this power (dBm) (the diagnosis alarms below -9.6).
    tx_power_min_dbm: float = -9.6
    #: Optics: the lowest lane SNR (dB) below which the module degrades (the diagnosis: 18 dB).
    snr_min_db: float = 18.0


# --- the record ------------------------------------------------------------------------------

@dataclass(frozen=True)
class PortReading:
    """One NPU's network port as the probe last saw it (each part from its latest query)."""

    device: int
    #: The latest link state read (-link, or -link_stat's newest record); None: not read yet.
    link_up: Optional[bool] = None
    #: Consecutive reads that found the link down (2 and more: confirmed).
    down_reads: int = 0
    #: When the link went down (its change record, else the first read that saw it down).
    down_since: Optional[float] = None
    #: The tool's counters of ups and downs since the driver started (-link_stat).
    up_count: Optional[int] = None
    down_count: Optional[int] = None
    #: Times of the down events known (change records and own reads), oldest first.
    downs: Tuple[float, ...] = ()
    net_health: Optional[str] = None
    optical: Optional[Optical] = None
    #: Cumulative error and PFC counters of -stat (name, value), sorted by name.
    counters: Tuple[Tuple[str, int], ...] = ()
    fec: Optional[str] = None
    lldp: Optional[LldpNeighbour] = None
    #: Last failure per query kind that failed in its latest run: (kind, message).
    errors: Tuple[Tuple[str, str], ...] = ()
    #: Failed queries per kind since the daemon started: (kind, count).
    failures: Tuple[Tuple[str, int], ...] = ()

    @property
    def port(self) -> str:
        """The NPU's network interface as the tool names it (`Iface:eth<N>`)."""
        return f"eth{self.device}"


@dataclass(frozen=True)
class LinkObservation:
    """A links round: one reading per NPU port, or `absent` when the node has no hccn_tool."""

    ports: Tuple[PortReading, ...] = ()
    #: No hccn_tool on this node: nothing is watched (not a failure).
    absent: bool = False
    #: The program run (absolute path), None when absent.
    tool: Optional[str] = None
    runs_total: int = 0


#: The key detectors and metrics read this probe's records by (`view.latest(LINKS)`).
LINKS: RecordKey[LinkObservation] = RecordKey("links")


def port_labels(p: PortReading, chip_map: Dict[int, Tuple[int, int]]) -> Dict[str, str]:
    """npu, chip and port of a port: the device id as npu-smi's chip mapping names it."""
    npu, chip = chip_map.get(p.device, (p.device, 0))
    return {"npu": str(npu), "chip": str(chip), "port": p.port}


# --- the probe -------------------------------------------------------------------------------

DETAILS = ("link_stat", "optical", "net_health", "stat", "fec", "lldp")
_RARE = ("fec", "lldp")
_PARSERS: Dict[str, Callable[[str], Any]] = {
    "link": hccn.parse_link, "link_stat": hccn.parse_link_stat, "optical": hccn.parse_optical,
    "net_health": hccn.parse_net_health, "stat": hccn.parse_stat, "fec": hccn.parse_fec, "lldp": hccn.parse_lldp,
}


def resolve_tool(program: str) -> Optional[str]:
    """Absolute path of hccn_tool, or None: the configured path, a name on PATH, else the name in
    the driver's tools folder."""
    if os.sep in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    found = shutil.which(program)
    if found is None:
        candidate = os.path.join(DRIVER_TOOLS, program)
        found = candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    return found


def node_devices(dev_dir: str = "/dev") -> List[int]:
    """The NPU ids whose device nodes this node has (/dev/davinci<N>), sorted."""
    out = []
    for path in glob.glob(os.path.join(dev_dir, "davinci*")):
        m = DEVICE_NODE.match(os.path.basename(path))
        if m is not None:
            out.append(int(m.group(1)))
    return sorted(out)


@dataclass
class _Port:
    """The probe's running state of one port (mutable; the record is a frozen copy)."""

    device: int
    last_kind: Optional[str] = None
    read_at: Dict[str, float] = field(default_factory=dict)
    link_up: Optional[bool] = None
    down_reads: int = 0
    down_since: Optional[float] = None
    stat: Optional[LinkStat] = None
    downs: List[float] = field(default_factory=list)
    net_health: Optional[str] = None
    optical: Optional[Optical] = None
    counters: Dict[str, int] = field(default_factory=dict)
    fec: Optional[str] = None
    lldp: Optional[LldpNeighbour] = None
    errors: Dict[str, str] = field(default_factory=dict)
    failures: Dict[str, int] = field(default_factory=dict)


class LinksProbe(Probe):
    name = "links"

    def __init__(self, cfg: LinksProbeConfig):
        self._apply(cfg)
        self.ports: Dict[int, _Port] = {}
        self.runs_total = 0
        self._absent_logged = False

    def _apply(self, cfg: LinksProbeConfig) -> None:
        self.cfg = cfg
        self.interval = float(cfg.interval)
        # Room for one run per chip of a full node (they stop at the budget) and the kills.
        self.timeout = cfg.timeout or (4 * float(cfg.command_timeout) + 5)

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, LinksProbe):
            return False
        self._apply(new.cfg)
        return True

    def collect(self) -> Collected:
        cfg = self.cfg
        tool = resolve_tool(cfg.hccn_tool)
        if tool is None:
            if not self._absent_logged:
                log.info("links probe: %s not found (PATH, %s): NPU network ports are not watched",
                         cfg.hccn_tool, DRIVER_TOOLS)
                self._absent_logged = True
            return Collected(LinkObservation(absent=True), f"{cfg.hccn_tool} not found: NPU links not watched",
                             quiet=True, idle=True)
        self._absent_logged = False
        devices = list(cfg.devices) if cfg.devices is not None else node_devices()
        budget = self.timeout - float(cfg.command_timeout) - 2
        started = time.monotonic()
        ran = failed = 0
        for dev in devices:
            if time.monotonic() - started > budget:
                break  # the rest are asked first next round (their last kind is older)
            port = self.ports.setdefault(dev, _Port(dev))
            ran += 1
            failed += not self._ask(tool, port, self._next_kind(port, clock.now()))
        for gone in [d for d in self.ports if d not in devices]:
            del self.ports[gone]
        if ran and failed == ran:
            raise ProbeError(f"every hccn_tool query of this round failed, e.g. "
                             f"{next(iter(self._latest_errors()), 'no detail')}")
        obs = LinkObservation(ports=tuple(self._record(self.ports[d]) for d in devices if d in self.ports),
                              tool=tool, runs_total=self.runs_total)
        return Collected(obs, self._summary(obs))

    def _next_kind(self, port: _Port, now: float) -> str:
        """`link` unless the last query of this port was `link`, its link is up and a detail
        query is due: then the most overdue detail."""
        if port.last_kind != "link" or port.link_up is not True:
            return "link"
        every = float(self.cfg.detail_interval)
        due = [(now - port.read_at.get(k, 0.0) - (every * 10 if k in _RARE else every), k) for k in DETAILS]
        lateness, kind = max(due, key=lambda d: (d[0], -DETAILS.index(d[1])))
        return kind if lateness >= 0 else "link"

    def _ask(self, tool: str, port: _Port, kind: str) -> bool:
        """Run one query of `port` and fold its answer; False when it failed (kept and logged)."""
        port.last_kind = kind
        argv = [tool, "-i", str(port.device), f"-{kind}", "-g"]
        out = run_command(argv, timeout=float(self.cfg.command_timeout), max_output=256 * 1024)
        self.runs_total += 1
        error = None
        if out.start_error is not None:
            error = f"cannot start hccn_tool: {out.start_error}"
        elif out.timed_out:
            error = f"`hccn_tool -i {port.device} -{kind} -g` gave no answer within {float(self.cfg.command_timeout):g}s (killed)"
        elif out.returncode != 0:
            first = (out.stderr or out.stdout).strip().splitlines()[:1]
            error = f"`hccn_tool -i {port.device} -{kind} -g` exit code {out.returncode}: {(first or [''])[0][:160]}"
        else:
            try:
                self._fold(port, kind, _PARSERS[kind](out.stdout), clock.now())
            except HccnParseError as exc:
                error = f"`hccn_tool -i {port.device} -{kind} -g` output unreadable: {exc}"
        if error is None:
            port.errors.pop(kind, None)
            port.read_at[kind] = clock.now()
            return True
        if port.errors.get(kind) != error:
            log.warning("links probe: %s", error)
        port.errors[kind] = error
        port.failures[kind] = port.failures.get(kind, 0) + 1
        port.read_at[kind] = clock.now()  # a failing detail waits its turn, not every round
        if kind == "link":
            port.link_up, port.down_reads = None, 0
        return False

    def _fold(self, port: _Port, kind: str, value: Any, now: float) -> None:
        if kind == "link":
            self._link_state(port, bool(value), now, None)
        elif kind == "link_stat":
            self._link_stat(port, value, now)
        elif kind == "optical":
            port.optical = value
        elif kind == "net_health":
            port.net_health = value
        elif kind == "stat":
            port.counters = {k: v for k, v in value.items() if k in hccn.ERROR_COUNTERS + hccn.PFC_COUNTERS}
        elif kind == "fec":
            port.fec = value
        elif kind == "lldp":
            port.lldp = value

    def _link_state(self, port: _Port, up: bool, now: float, down_at: Optional[float]) -> None:
        if up:
            port.link_up, port.down_reads, port.down_since = True, 0, None
            return
        if port.link_up is True:
            self._add_down(port, down_at if down_at is not None else now)
        if port.down_reads == 0:
            port.down_since = down_at if down_at is not None else now
        port.link_up = False
        port.down_reads += 1

    def _link_stat(self, port: _Port, stat: LinkStat, now: float) -> None:
        """The change records give the down events this probe's reads missed (a flap between
        two reads); the newest record says the link's state now."""
        port.stat = stat
        # The tool prints local times and may run on another clock: shift its records onto ours.
        skew = now - stat.tool_time if stat.tool_time is not None else 0.0
        for change in stat.changes:
            if not change.up:
                self._add_down(port, change.time + skew)
        newest = stat.changes[0] if stat.changes else None
        if newest is not None:
            self._link_state(port, newest.up, now, None if newest.up else newest.time + skew)

    @staticmethod
    def _add_down(port: _Port, at: float) -> None:
        """One down event, once: an event seen by a read and again in the records is the same
        one when they are within two seconds (the records have one-second resolution)."""
        if any(abs(at - t) <= 2.0 for t in port.downs):
            return
        port.downs.append(at)
        port.downs.sort()
        del port.downs[:-MAX_DOWNS]

    @staticmethod
    def _record(p: _Port) -> PortReading:
        return PortReading(
            device=p.device, link_up=p.link_up, down_reads=p.down_reads, down_since=p.down_since,
            up_count=p.stat.up_count if p.stat else None, down_count=p.stat.down_count if p.stat else None,
            downs=tuple(p.downs), net_health=p.net_health, optical=p.optical,
            counters=tuple(sorted(p.counters.items())), fec=p.fec, lldp=p.lldp,
            errors=tuple(sorted(p.errors.items())), failures=tuple(sorted(p.failures.items())))

    def _latest_errors(self) -> Iterator[str]:
        for p in self.ports.values():
            yield from p.errors.values()

    @staticmethod
    def _summary(obs: LinkObservation) -> str:
        down = [p.port for p in obs.ports if p.link_up is False]
        text = f"{len(obs.ports)} NPU ports, {sum(1 for p in obs.ports if p.link_up)} up"
        return text + (f", DOWN: {', '.join(down)}" if down else "")


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 50
#: Its config: `probes.links` (the node's ports: discovery does not feed it).
SECTION: ProbeSection[LinksProbeConfig] = ProbeSection("links", LinksProbeConfig)


def build(ctx: ProbeContext) -> List[Probe]:
    cfg = ctx.config.probes.links
    return [LinksProbe(cfg)] if cfg.enabled else []

