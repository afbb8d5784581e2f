"""The `kernel` probe: follows /dev/kmsg and judges each record with the kernel rules.

Modelled on node-problem-detector's kernel monitor. The record's sequence number is the read
position: it is saved (with the boot id) in the state folder after each round that read records,
so a restart of the daemon neither replays a record nor skips one, and after a reboot the new
boot's records are read from its first one. At the very first start the records already in the
ring buffer (the boot's messages) are judged once; those older than `hold` are counted but raise
nothing. Records the kernel overwrote before they were read (EPIPE, or a sequence gap) are
counted, never fatal. The device is opened non-blocking; the scheduler's follower thread waits on
it, so a record is read within a fraction of a second of its write.

A record naming a process that is (or was, within `hold`) a discovered rank carries that rank's
job, rank and NPU; the detector (watchdog.detectors.kernel) turns it into that rank's finding.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import time
from dataclasses import replace
from typing import Any, Dict, Iterable, List, Optional, Tuple

from watchdog.host import clock
from watchdog.service import statefiles
from watchdog.config.sections.common import ProbeSection
from watchdog.config.sections.kernel import KernelProbeConfig
from watchdog.logrules.kernel import KernelRule, kernel_ruleset, task_of
from watchdog.parse.kmsg import KmsgFormatError, KmsgRecord, parse_record
from watchdog.logrules.device import device_of
from watchdog.logrules.matcher import Matcher
from watchdog.observations import KernelEvent, KernelObservation
from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError
from watchdog.privacy.redact import Redactor, config_secrets
from watchdog.host.procstat import boot_time, read_boot_id, read_stat

log = logging.getLogger(__name__)

STATE_FILE = "kernel-kmsg.json"
STATE_VERSION = 1
READ_SIZE = 16384
#: Matches kept for the detector at most (the newest), whatever the hold.
MAX_RECENT = 512
#: Characters of a record's message kept in an event.
MAX_TEXT = 1000

# job, rank, npu, last seen, started at, the command names it was seen with (newest last)
RankLabels = Tuple[str, int, Optional[int], float, Optional[float], Tuple[str, ...]]
#: Command names remembered per rank (a rank may rename itself: `pt_main_thread`, setproctitle).
MAX_COMMS = 8


class KernelProbe(Probe):
    name = "kernel"
    #: /dev/kmsg is a ring that overwrites what was not read: a flood of records no rule matches
    #: would wrap it between rounds spaced 2 s apart, taking a segfault record with it.
    spaces_quiet_rounds = False

    def __init__(self, cfg: KernelProbeConfig, state_dir: str, feed: Any = None, secrets: Iterable[str] = ()):
        self.cfg = cfg
        #: A record's text reaches findings, alerts and `status`: the config's secrets are taken
        #: out of it as out of log lines (a driver or a user's `logger` line may quote a URL).
        self.redactor = Redactor(secrets)
        self.interval = cfg.interval
        self.timeout = cfg.timeout
        self.state_path = os.path.join(state_dir, STATE_FILE)
        self.feed = feed
        self._set_rules(cfg)
        self.fd: Optional[int] = None
        self.boot_id = read_boot_id()
        self.last_seq: Optional[int] = None
        self.recent: List[KernelEvent] = []
        self.records_total = self.lost_total = self.malformed_total = 0
        self.matches_total: Dict[str, int] = {k.rule.id: 0 for k in self.rules}
        self.state_error: Optional[str] = None
        self._ranks: Dict[int, RankLabels] = {}
        #: os.read; a test hands in a stand-in for what it cannot make the kernel do on a shared
        #: machine (overwrite unread records: EPIPE).
        self._read = os.read
        self._restore()

    def _set_rules(self, cfg: KernelProbeConfig) -> None:
        self.rules: Tuple[KernelRule, ...] = kernel_ruleset(cfg.disable, [r.as_rule_data() for r in cfg.rules])
        self._by_id = {k.rule.id: k for k in self.rules}
        self.matcher = Matcher([k.rule for k in self.rules], engine="re")

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, KernelProbe) or new.cfg.device != self.cfg.device:
            return False
        self.cfg, self.interval, self.timeout = new.cfg, new.interval, new.timeout
        self.redactor = new.redactor
        self._set_rules(new.cfg)
        for k in self.rules:
            self.matches_total.setdefault(k.rule.id, 0)
        return True

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    # -- saved read position -------------------------------------------------------------------
    def _restore(self) -> None:
        """The read position and recent matches of the same boot; another boot starts afresh."""
        data = statefiles.read_json(self.state_path, STATE_VERSION)
        if not data or data.get("boot_id") != self.boot_id or not self.boot_id:
            return
        seq = data.get("seq")
        if isinstance(seq, int) and seq >= 0:
            self.last_seq = seq
        now = clock.now()
        for row in data.get("recent") or ():
            try:
                ev = KernelEvent(**row)
            except TypeError:
                continue
            if isinstance(ev.time, (int, float)) and now - ev.time <= self.cfg.hold:
                self.recent.append(ev)
        self.recent = self.recent[-MAX_RECENT:]

    def _save(self) -> None:
        doc = {"version": STATE_VERSION,
               "data": {"boot_id": self.boot_id, "seq": self.last_seq,
                        "recent": [ev.__dict__ for ev in self.recent]}}
        self.state_error = statefiles.save_probe_state(self.state_path, doc, "kernel", "the read position",
                                                       self.state_error)

    # -- change events (the scheduler's follower thread) ------------------------------------------
    def wait_change(self, timeout: float) -> bool:
        """True when /dev/kmsg holds a record not read yet (blocks up to `timeout`)."""
        fd = self.fd
        if fd is None:
            time.sleep(timeout)
            return False
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(timeout * 1000))
        except (OSError, ValueError):
            time.sleep(timeout)
            return False

    # -- the round -------------------------------------------------------------------------------
    def _open(self) -> int:
        if self.fd is None:
            try:
                self.fd = os.open(self.cfg.device, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                raise ProbeError(f"cannot read the kernel log {self.cfg.device}: {exc.strerror or exc}"
                                 " (needs root or CAP_SYSLOG)") from None
        return self.fd

    def _records(self, fd: int) -> List[KmsgRecord]:
        """Records not judged yet, up to the round's budget."""
        out: List[KmsgRecord] = []
        for _ in range(self.cfg.max_records_per_round):
            try:
                raw = self._read(fd, READ_SIZE)
            except BlockingIOError:
                break
            except BrokenPipeError:
                self.lost_total += 1  # overwritten since the last read; the next read goes on
                continue
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # a record larger than the buffer: skip it
                    self.malformed_total += 1
                    continue
                self.close()
                raise ProbeError(f"reading {self.cfg.device} failed: {exc.strerror or exc}") from None
            if not raw:
                break
            try:
                rec = parse_record(raw)
            except KmsgFormatError as exc:
                self.malformed_total += 1
                log.debug("kernel probe: %s", exc)
                continue
            if self.last_seq is not None:
                if rec.seq <= self.last_seq:
                    continue  # read before a restart
                if rec.seq > self.last_seq + 1:
                    self.lost_total += rec.seq - self.last_seq - 1
            self.last_seq = rec.seq
            out.append(rec)
        return out

    def collect(self) -> Collected:
        fd = self._open()
        now = clock.now()
        records = self._records(fd)
        self._learn_ranks(now)
        try:
            boot = boot_time()
        except (OSError, RuntimeError):
            boot = now - time.monotonic()
        events: List[KernelEvent] = []
        for rec in records:
            self.records_total += 1
            for rule in self.matcher.match_text(rec.message):
                self.matches_total[rule.id] = self.matches_total.get(rule.id, 0) + 1
                events.append(self._event(rec, self._by_id[rule.id], boot))
        fresh = [ev for ev in events if now - ev.time <= self.cfg.hold]
        self.recent = [ev for ev in self.recent + fresh if now - ev.time <= self.cfg.hold][-MAX_RECENT:]
        if records:
            self._save()
        obs = KernelObservation(
            events=tuple(fresh), recent=tuple(self.recent), records_total=self.records_total,
            matches_total=dict(self.matches_total), lost_total=self.lost_total,
            malformed_total=self.malformed_total, last_seq=self.last_seq, state_error=self.state_error)
        summary = f"{len(records)} records, {len(fresh)} matches, {len(self.recent)} recent"
        return Collected(obs, summary, quiet=not fresh)

    def _event(self, rec: KmsgRecord, k: KernelRule, boot: float) -> KernelEvent:
        text = rec.message[:MAX_TEXT]
        pid, comm = task_of(k, text)
        ev = KernelEvent(seq=rec.seq, time=boot + rec.usec / 1e6, rule=k.rule.id, category=k.rule.category,
                         severity=k.rule.severity, title=k.rule.title, text=self.redactor.text(text),
                         hint=k.rule.hint, pid=pid, device=device_of(text), comm=comm)
        labels = self._ranks.get(pid) if pid is not None else None
        if labels is None and pid is not None:
            # A rank discovered since this probe last looked (it may have died at once): the
            # feed's latest scan still lists it, with its NPU.
            self._learn_ranks(clock.now())
            labels = self._ranks.get(pid)
        # An earlier process with the same pid (`about`), or another user's process named so
        # that its record shows the rank's pid or that runs under a rank's pid's name (`names`).
        if labels is not None and ev.about(labels[4]) and ev.names(labels[5] + _live_comm(pid, labels[4])):
            ev = replace(ev, job=labels[0], rank=labels[1], npu=labels[2])
        return ev

    def _learn_ranks(self, now: float) -> None:
        """Remember the discovered ranks' pids for `hold`: a rank's kernel record is often read
        just after the rank died, when a new scan no longer lists it."""
        found = self.feed.latest() if self.feed is not None else None
        if found is not None:
            for job in found.jobs:
                for r in job.ranks:
                    old = self._ranks.get(r.pid)
                    comms: Tuple[str, ...] = old[5] if old is not None and old[4] == r.started_at else ()
                    if r.comm and r.comm not in comms:
                        comms = (comms + (r.comm,))[-MAX_COMMS:]
                    self._ranks[r.pid] = (job.name, r.rank, r.npu, now, r.started_at, comms)
        for pid in [p for p, lab in self._ranks.items() if now - lab[3] > self.cfg.hold]:
            del self._ranks[pid]


def _live_comm(pid: Optional[int], started_at: Optional[float]) -> Tuple[str, ...]:
    """The command name the process at `pid` has now, if it is the rank that started at
    `started_at` (a zombie still shows it): a rank renamed since the last scan is still named."""
    if pid is None or started_at is None:
        return ()
    try:
        st = read_stat(pid)
    except (OSError, ValueError):
        return ()
    return (st.comm,) if abs(st.create_time - started_at) <= 0.05 else ()


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 45
#: Its config: `probes.kernel` (discovery does not feed it: the kernel log is the node's).
SECTION: ProbeSection[KernelProbeConfig] = ProbeSection("kernel", KernelProbeConfig,
                       doc="The kernel log (/dev/kmsg): OOM kills, segfaults, hung tasks, ECC, PCIe AER, NPU driver errors.")


def build(ctx: ProbeContext) -> List[Probe]:
    cfg = ctx.config.probes.kernel
    if not cfg.enabled:
        return []
    feed = ctx.discovery_feed() if ctx.config.discovery.enabled else None
    return [KernelProbe(cfg, ctx.state_dir, feed, config_secrets(ctx.config))]
