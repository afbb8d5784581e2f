"""The npu probe: one `npu-smi info` per round, `-t health` only for chips that are not OK.

Why this shape: `npu-smi info` already carries everything the detectors and metrics need for all
cards in one call (a few hundred ms on a busy node), so per-device queries would only multiply the
load on a driver that may be struggling. Health error codes are the exception: they say *why* a
chip is in Warning/Alarm, so they are asked for those chips only, and at most every
`health_interval` per chip.

The probe remembers every chip it has seen: a chip that disappears (掉卡) is reported in
`NpuObservation.missing` with its last reading, so detectors and metrics can say which one went,
instead of the chip silently dropping out of the table. The memory outlives a restart of the
daemon within the same boot (`npu-chips.json` in the state folder, stamped with the boot id): a
daemon restarted while a card is gone must still report it gone, not resolve its alert because
the new process never saw the card. Another boot starts afresh (`trends.expected_chips` covers a
card that is gone at boot).

It also keeps the `npu-smi info -m` mapping (chip logic id -> NPU ID, chip), read at start, when
the set of chips changes and every `CHIP_MAP_REFRESH` seconds: plogs and the driver's kernel log
name devices by logic id, and a device fault found in a log must name the NPU the metrics name.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, replace
from typing import Any, Dict, List, Optional, Tuple

from watchdog.config.sections.common import ProbeSection
from watchdog.config.sections.npu import NpuProbeConfig
from watchdog.host.procstat import read_boot_id
from watchdog.npusmi.run import NpuSmiRunError, query_chip_map, query_health, query_info, resolve
from watchdog.observations import NpuChip, NpuObservation
from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError
from watchdog.core.state import FailureReason
from watchdog.service import statefiles

log = logging.getLogger(__name__)

Key = Tuple[int, int]
#: The mapping only changes when cards change (a card lost or replaced): re-read it rarely.
CHIP_MAP_REFRESH = 600.0
#: After a failed `npu-smi info -m`, wait this long before asking again (the table comes first).
CHIP_MAP_RETRY = 60.0
#: The chips seen in this boot, kept across restarts of the daemon (see the module docstring).
STATE_FILE = "npu-chips.json"
STATE_VERSION = 1
#: Chips remembered at most (a node has 8 or 16; a damaged file must not make the probe slow),
#: and the size of the file beyond which it is set aside unread (256 chips take about 80 KB).
MAX_CHIPS = 256
MAX_FILE_BYTES = 1024 * 1024


class NpuProbe(Probe):
    name = "npu"

    def __init__(self, cfg: NpuProbeConfig, feed: Any = None, follow_node: bool = False,
                 state_dir: Optional[str] = None):
        self._apply(cfg)
        #: Discovery (when on) learns each rank's NPU from npu-smi's process table.
        self.feed = feed
        #: Fed by discovery (no explicit settings): npu-smi may come later (see collect).
        self.follow_node = follow_node and feed is not None
        #: Last reading of every chip seen since the daemon started.
        self.seen: Dict[Key, NpuChip] = {}
        #: Health codes per chip: (monotonic time of the query, codes).
        self.health: Dict[Key, Tuple[float, List[str]]] = {}
        self._health_errors: Dict[Key, str] = {}
        self.chip_map: Dict[int, Key] = {}
        self._map_keys: Optional[frozenset] = None
        self._map_at: Optional[float] = None
        self._map_error: Optional[str] = None
        #: Where the seen chips are kept across restarts (None: not kept).
        self.state_path = os.path.join(state_dir, STATE_FILE) if state_dir else None
        #: What the file holds now: (seen keys, missing keys); None until it was read.
        self._saved: Optional[Tuple[frozenset, frozenset]] = None
        self.boot_id = ""
        #: Why the last save failed (shown in the round's summary: `npu-watchdog status`).
        self.state_error: Optional[str] = None

    def _apply(self, cfg: NpuProbeConfig) -> None:
        self.cfg = cfg
        self.interval = cfg.interval
        # Room for the info call, some health queries (bounded by the budget below) and kills.
        self.timeout = cfg.timeout or (3 * cfg.command_timeout + 5)

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, NpuProbe):
            return False
        self._apply(new.cfg)
        self.follow_node = new.follow_node and self.feed is not None
        return True

    def collect(self) -> Collected:
        cfg = self.cfg
        started = time.monotonic()
        if self.follow_node and resolve(cfg.npu_smi) is None and not self._job_running():
            # Fed by discovery: npu-smi is looked for every round (a driver mounted after boot
            # is picked up by the next round); without it and without a job there is nothing
            # to watch. With a job, query_info below fails as `missing` (npu_smi_missing).
            return Collected(NpuObservation(None, (), (), absent=True),
                             f"{cfg.npu_smi} not found; no training job on this node")
        try:
            obs = query_info(cfg.npu_smi, cfg.command_timeout)
        except NpuSmiRunError as exc:
            raise ProbeError(str(exc), FailureReason(exc.reason)) from None
        if self._saved is None:
            self._restore()
        current = {(c.npu, c.chip): c for c in obs.chips}
        missing = tuple(chip for key, chip in sorted(self.seen.items()) if key not in current)
        self.seen.update(current)
        self._save(frozenset(self.seen), frozenset((c.npu, c.chip) for c in missing))
        codes = self._health_codes(obs, started)
        self._refresh_chip_map(set(current), started)
        obs = replace(obs, missing=missing, health_codes=codes, chip_map=dict(self.chip_map))
        if self.feed is not None and obs.processes_known:
            self.feed.set_npu_processes({p.pid: p.npu for p in obs.processes})
        summary = self._summary(obs)
        if self.state_error:
            summary += f"; the chips seen are not kept across a restart ({self.state_error})"
        return Collected(obs, summary)

    # -- the seen chips across restarts ------------------------------------------------------------
    def _restore(self) -> None:
        """The chips seen earlier in this boot (their last readings); another boot's are dropped."""
        self._saved = (frozenset(), frozenset())
        if self.state_path is None:
            return
        self.boot_id = read_boot_id()
        data = statefiles.read_json(self.state_path, STATE_VERSION, max_bytes=MAX_FILE_BYTES)
        if not data or not self.boot_id or data.get("boot_id") != self.boot_id:
            return
        rows = data.get("chips")
        for row in rows[:MAX_CHIPS] if isinstance(rows, list) else ():
            try:
                chip = NpuChip(**row)
            except TypeError:
                continue
            if type(chip.npu) is int and type(chip.chip) is int:  # noqa: E721 (a bool is no chip number)
                self.seen.setdefault((chip.npu, chip.chip), chip)
        if self.seen:
            log.info("npu probe: %d chip(s) seen earlier in this boot (%s)", len(self.seen), self.state_path)

    def _save(self, seen: frozenset, missing: frozenset) -> None:
        """Write the seen chips when the set seen or the set missing changed (rarely: a card lost,
        back or new). A missing chip's reading kept is the one of the last write: what it read when
        the set of chips last changed, not necessarily just before it went."""
        if self.state_path is None or (seen, missing) == self._saved:
            return
        doc = {"version": STATE_VERSION,
               "data": {"boot_id": self.boot_id, "chips": [asdict(c) for _, c in sorted(self.seen.items())]}}
        self.state_error = statefiles.save_probe_state(self.state_path, doc, "npu", "the chips seen",
                                                       self.state_error)
        if self.state_error is None:
            self._saved = (seen, missing)

    def _job_running(self) -> bool:
        found = self.feed.latest()
        return found is not None and bool(found.jobs)

    def _refresh_chip_map(self, keys: set, started: float) -> None:
        """Re-read `npu-smi info -m` when due; a failure keeps the last good mapping."""
        now = time.monotonic()
        due = (self._map_at is None or frozenset(keys) != self._map_keys
               or now - self._map_at >= (CHIP_MAP_RETRY if self._map_error else CHIP_MAP_REFRESH))
        if not due or now - started > self.cfg.command_timeout:
            return
        self._map_at = now
        self._map_keys = frozenset(keys)
        try:
            entries = query_chip_map(self.cfg.npu_smi, self.cfg.command_timeout)
        except NpuSmiRunError as exc:
            if self._map_error != str(exc):
                log.warning("chip mapping (npu-smi info -m): %s; keeping the last mapping", exc)
            self._map_error = str(exc)
            return
        self._map_error = None
        self.chip_map = {logic: (e.npu, e.chip) for logic, e in entries.items()}

    def _health_codes(self, obs: NpuObservation, started: float) -> Dict[Key, List[str]]:
        cfg = self.cfg
        bad = [c for c in obs.chips if c.health.upper() != "OK"]
        bad_keys = {(c.npu, c.chip) for c in bad}
        for key in list(self.health):
            if key not in bad_keys:  # healthy again (or gone): ask afresh next time
                del self.health[key]
        asked = 0
        for c in bad:
            key = (c.npu, c.chip)
            cached = self.health.get(key)
            now = time.monotonic()
            if cached is not None and now - cached[0] < cfg.health_interval:
                continue
            # Never let detail queries push the round past its budget: the table matters more.
            if asked >= cfg.max_health_queries or now - started > cfg.command_timeout:
                break
            asked += 1
            try:
                h = query_health(cfg.npu_smi, c.npu, c.chip, cfg.command_timeout)
            except NpuSmiRunError as exc:
                if self._health_errors.get(key) != str(exc):
                    log.warning("health details of npu %s chip %s: %s", c.npu, c.chip, exc)
                self._health_errors[key] = str(exc)
                self.health[key] = (now, [])
                continue
            self._health_errors.pop(key, None)
            self.health[key] = (now, list(h.codes))
        return {k: v[1] for k, v in self.health.items() if v[1]}

    @staticmethod
    def _summary(obs: NpuObservation) -> str:
        ok = sum(1 for c in obs.chips if c.health.upper() == "OK")
        procs = f"{len(obs.processes)} processes" if obs.processes_known else "processes unknown"
        text = f"{len(obs.chips)} chips ({ok} OK), {procs}"
        if obs.version:
            text += f", npu-smi {obs.version}"
        if obs.missing:
            text += ", MISSING: " + ", ".join(f"npu {c.npu} chip {c.chip}" for c in obs.missing)
        return text


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 30
#: Its config: `probes.npu`; discovery feeds it.
SECTION: ProbeSection[NpuProbeConfig] = ProbeSection("npu", NpuProbeConfig, feed=4)


def build(ctx: ProbeContext) -> List[Probe]:
    cfg: Optional[NpuProbeConfig] = ctx.config.probes.npu
    if cfg is None or not cfg.enabled:
        return []
    return [NpuProbe(cfg, ctx.discovery_feed() if ctx.config.discovery.enabled else None,
                     follow_node=ctx.config.fed_by_discovery("npu"), state_dir=ctx.state_dir)]
