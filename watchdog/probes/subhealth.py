"""The `subhealth` probe: what a card shows before it fails, read chip by chip with npu-smi.

Why: a card rarely dies at once. Correctable (single-bit) ECC errors climb, the driver retires
memory pages, the AI Core clock drops below its rating (power or heat capping), a health code
comes and goes. The vendor's scheduler escalates a code seen again within a day; this probe keeps
what is needed to do the same: the ECC counters with their history over `ecc_window`, the clock,
and every health code each chip reported, with the times it appeared.

Cost is bounded: one npu-smi detail query per chip per round, in turn `-t health`, `-t ecc`,
`-t common`, each under the npu probe's hard timeout. The `npu-smi info` table (health, HBM,
temperature, power of every card) stays the npu probe's; this probe never runs inside its round.
It follows the npu probe's switch: without npu-smi on the node it reads nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from pydantic import Field

from watchdog.core.state import RecordKey
from watchdog.host import clock
from watchdog.config.sections.common import ProbeSchedule, ProbeSection
from watchdog.config.types import Duration
from watchdog.npusmi.parse import HealthInfo
from watchdog.npusmi.run import NpuSmiRunError, query_chip_map, query_health, resolve
from watchdog.npusmi.subhealth import CommonReading, EccCounts, query_common, query_ecc
from watchdog.probes.base import Collected, Probe, ProbeContext

log = logging.getLogger(__name__)

KINDS = ("health", "ecc", "common")
#: Appearances of one code kept per chip (the newest).
MAX_APPEARANCES = 32
#: Seconds between two reads of the chip list (cards change rarely; a lost card is the npu probe's).
CHIP_LIST_REFRESH = 300.0
#: ECC readings kept per chip (the newest), whatever the window.
MAX_ECC = 256


class SubhealthProbeConfig(ProbeSchedule):
    """Off unless enabled (on in the shipped example config); runs where the npu probe runs:
    per-chip health codes, ECC counters and AI Core clock."""

    #: Ask npu-smi about each chip's health codes, ECC counters and AI Core clock.
    enabled: bool = False
    #: Time between two rounds; each round runs one npu-smi detail query per chip (health, ECC
    #: and clock in turn, so each is read every 3 intervals). Sub-health moves over hours (ECC
    #: within `ecc_window`, codes within `code_repeat_window`); a card's outright alarm is the
    #: npu probe's, every 10 s. 60 s keeps the npu-smi runs at 8 a minute on an 8-chip node.
    interval: Duration = Field(default="60s")
    #: Single-bit (corrected) ECC errors that must appear within `ecc_window` to raise
    #: `npu_ecc_single_bit_rising`.
    ecc_single_bit_rise: int = Field(default=10, ge=1, le=1_000_000)
    #: The window ECC errors are counted in (the oldest reading within it is the base).
    ecc_window: Duration = Field(default="1h", gt=0)
    #: A health code that appears this many times within `code_repeat_window` escalates to
    #: critical with "isolate now" (the device plugin's default: 5 in 24 h; 3 warns earlier).
    code_repeat_count: int = Field(default=3, ge=2, le=1000)
    #: The window a health code's appearances are counted in.
    code_repeat_window: Duration = Field(default="24h", gt=0)
    #: AI Core clock below this share of its rating while busy, for `throttle_for`, raises
    #: `npu_aicore_throttled` (an idle chip clocks down by design: it is never judged).
    throttle_ratio: float = Field(default=0.9, gt=0, le=1)
    #: How long the clock must stay low while busy.
    throttle_for: Duration = Field(default="1m", ge=0)
    #: AI Core use (%) from which a chip counts as busy.
    throttle_busy_pct: float = Field(default=10.0, ge=0, le=100)


@dataclass(frozen=True)
class ChipSubhealth:
    """One chip's sub-health readings (each from its latest query)."""

    npu: int
    chip: int
    health: Optional[str] = None
    #: Codes of the latest `-t health` read.
    codes: Tuple[str, ...] = ()
    information: Tuple[str, ...] = ()
    #: Each code seen since the daemon started: (code, times it appeared, newest last). A code
    #: appears when a read shows it that the previous read of the chip did not.
    appearances: Tuple[Tuple[str, Tuple[float, ...]], ...] = ()
    #: The latest ECC counters and those of the oldest read within `ecc_window`: (time, counts).
    ecc: Optional[EccCounts] = None
    ecc_base: Optional[Tuple[float, EccCounts]] = None
    common: Optional[CommonReading] = None
    #: Since when the AI Core clock has been below `throttle_ratio` of its rating while busy, and
    #: the latest read that still showed it (a hold is judged between two reads, never from one).
    throttled_since: Optional[float] = None
    throttled_last: Optional[float] = None
    errors: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SubhealthObservation:
    chips: Tuple[ChipSubhealth, ...] = ()
    #: npu-smi is not on this node: nothing read.
    absent: bool = False
    #: Why nothing was read this round (npu-smi failing: the npu probe reports it).
    error: Optional[str] = None


#: The key detectors and metrics read this probe's records by (`view.latest(SUBHEALTH)`).
SUBHEALTH: RecordKey[SubhealthObservation] = RecordKey("subhealth")


@dataclass
class _Chip:
    npu: int
    chip: int
    turn: int = 0
    health: Optional[HealthInfo] = None
    appearances: Dict[str, List[float]] = field(default_factory=dict)
    ecc: List[Tuple[float, EccCounts]] = field(default_factory=list)
    common: Optional[CommonReading] = None
    throttled_since: Optional[float] = None
    throttled_last: Optional[float] = None
    errors: Dict[str, str] = field(default_factory=dict)


class SubhealthProbe(Probe):
    name = "subhealth"

    def __init__(self, cfg: SubhealthProbeConfig, npu_smi: str, command_timeout: float):
        self.cfg = cfg
        self.npu_smi = npu_smi
        self.command_timeout = command_timeout
        self.interval = float(cfg.interval)
        self.timeout = cfg.timeout or (3 * command_timeout + 5)
        self.chips: Dict[Tuple[int, int], _Chip] = {}
        self._keys: Optional[List[Tuple[int, int]]] = None
        self._keys_at = 0.0

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, SubhealthProbe):
            return False
        self.cfg, self.npu_smi, self.command_timeout = new.cfg, new.npu_smi, new.command_timeout
        self.interval, self.timeout = new.interval, new.timeout
        return True

    def collect(self) -> Collected:
        if resolve(self.npu_smi) is None:
            return Collected(SubhealthObservation(absent=True), f"{self.npu_smi} not found", quiet=True)
        try:
            keys = self._chip_list()
        except NpuSmiRunError as exc:
            # npu-smi itself failing is the npu probe's finding (npu_smi_hung / _failing): one
            # fault, one page. This round reads nothing and says why.
            return Collected(SubhealthObservation(error=str(exc)), f"no chip list: {exc}", quiet=True)
        started = time.monotonic()
        for key in keys:
            if time.monotonic() - started > self.timeout - self.command_timeout - 2:
                break
            if not self._ask(self.chips.setdefault(key, _Chip(*key))):
                break  # a hung npu-smi: the other chips wait for the next round
        for gone in [k for k in self.chips if k not in keys]:
            del self.chips[gone]
        obs = SubhealthObservation(chips=tuple(self._record(self.chips[k]) for k in keys if k in self.chips))
        flagged = sum(1 for c in obs.chips if c.codes)
        return Collected(obs, f"{len(obs.chips)} chips, {flagged} with health codes")

    def _chip_list(self) -> List[Tuple[int, int]]:
        """Which chips to ask (raises NpuSmiRunError): npu-smi's chip mapping (`info -m`, a short list, not the table
        the npu probe reads), read at the first round and every `CHIP_LIST_REFRESH` seconds
        after; `stats=None` keeps the npu probe's call statistics its own."""
        now = time.monotonic()
        if self._keys is None or now - self._keys_at >= CHIP_LIST_REFRESH:
            entries = query_chip_map(self.npu_smi, self.command_timeout, stats=None)
            self._keys = sorted({(e.npu, e.chip) for e in entries.values()})
            self._keys_at = now
        return self._keys

    def _ask(self, c: _Chip) -> bool:
        """One query of chip `c`; False when npu-smi hung (the round stops asking)."""
        kind = KINDS[c.turn % len(KINDS)]
        c.turn += 1
        now = clock.now()
        try:
            if kind == "health":
                self._health(c, query_health(self.npu_smi, c.npu, c.chip, self.command_timeout, stats=None), now)
            elif kind == "ecc":
                c.ecc.append((now, query_ecc(self.npu_smi, c.npu, self.command_timeout, stats=None)))
                horizon = now - float(self.cfg.ecc_window)
                while len(c.ecc) > 1 and (c.ecc[1][0] <= horizon or len(c.ecc) > MAX_ECC):
                    c.ecc.pop(0)
            else:
                c.common = query_common(self.npu_smi, c.npu, self.command_timeout, stats=None)
                self._throttle(c, now)
        except NpuSmiRunError as exc:
            if c.errors.get(kind) != str(exc):
                log.warning("subhealth probe: npu %s chip %s -t %s: %s", c.npu, c.chip, kind, exc)
            c.errors[kind] = str(exc)
            return exc.reason != "timeout"
        c.errors.pop(kind, None)
        return True

    def _health(self, c: _Chip, h: HealthInfo, now: float) -> None:
        before = set(c.health.codes) if c.health is not None else set()
        for code in h.codes:
            if code not in before:
                times = c.appearances.setdefault(code, [])
                times.append(now)
                del times[:-MAX_APPEARANCES]
        c.health = h

    def _throttle(self, c: _Chip, now: float) -> None:
        r = c.common
        busy = r is not None and r.aicore_util_pct is not None and r.aicore_util_pct >= self.cfg.throttle_busy_pct
        slow = (r is not None and r.aicore_freq_mhz and r.aicore_cur_freq_mhz is not None
                and r.aicore_cur_freq_mhz < self.cfg.throttle_ratio * r.aicore_freq_mhz)
        if busy and slow:
            c.throttled_since = c.throttled_since or now
            c.throttled_last = now
        else:
            c.throttled_since = c.throttled_last = None

    @staticmethod
    def _record(c: _Chip) -> ChipSubhealth:
        return ChipSubhealth(
            npu=c.npu, chip=c.chip, health=c.health.status if c.health else None,
            codes=c.health.codes if c.health else (), information=c.health.information if c.health else (),
            appearances=tuple(sorted((k, tuple(v)) for k, v in c.appearances.items())),
            ecc=c.ecc[-1][1] if c.ecc else None, ecc_base=c.ecc[0] if c.ecc else None, common=c.common,
            throttled_since=c.throttled_since, throttled_last=c.throttled_last, errors=tuple(sorted(c.errors.items())))


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 55
#: Its config: `probes.subhealth` (the node's cards: discovery does not feed it).
SECTION: ProbeSection[SubhealthProbeConfig] = ProbeSection("subhealth", SubhealthProbeConfig)


def build(ctx: ProbeContext) -> List[Probe]:
    cfg = ctx.config.probes.subhealth
    npu = ctx.config.probes.npu
    if not cfg.enabled or not (npu.enabled or ctx.config.fed_by_discovery("npu")):
        return []
    return [SubhealthProbe(cfg, npu.npu_smi, float(npu.command_timeout))]

