"""Liveness detectors: is the training job alive, per rank, and still making progress?

Pure over the StateView: the latest process and heartbeat observations plus their time-bounded
history. Every threshold is a duration measured against observation times, so changing a probe
interval never changes when a finding fires.

Two principles keep the pager quiet at the wrong moments:
- A rank that declares `phase: done` has no liveness findings until it writes another phase
  (the job restarted); when every heartbeat says done, the processes exiting is not a crash.
  For a discovered job, whether ranks leaving is a failure or a clean end is decided by one pure
  function over the evidence their exit left (`judge_end`; the table is in docs/discovery.md).
- The stale threshold follows the declared phase (a long checkpoint is not a hang), and may be
  learned from the job's own pace instead of guessed.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from watchdog.config.schema import Config
from watchdog.config.sections.heartbeat import HeartbeatProbeConfig
from watchdog.config.types import format_duration
from watchdog.detectors.cause import explain
from watchdog.detectors.kernel import kernel_events_for_pids
from watchdog.detectors.jobs import per_job
from watchdog.detectors.logs import first_line
from watchdog.detectors.pace import goodput_words
from watchdog.core.findings import Finding
from watchdog.core.losscale import ScaleTrend, collapsed
from watchdog.core.rulecatalog import JOB_LABELS, Inhibits, Rule, detail, probe_wait
from watchdog.observations import (EndEvidence, HeartbeatObservation, HeartbeatReading, JobState, ProcessInfo,
                                   ProcessObservation)
from watchdog.core.state import StateView
from watchdog.probes.logs import LOGS
from watchdog.parse.exits import parse_exit
from watchdog.summaries import summary_of
from watchdog.parse.steps import find_step
from watchdog.words import words
from watchdog.probes.heartbeat import SECTION as HEARTBEAT_CONFIG
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG
from watchdog.probes.process import SECTION as PROCESS_CONFIG

STALE_HINT = ("The rank has not written its heartbeat within the threshold for its phase. Check the rank's "
              "log tail and `py-spy dump --pid <pid>`; if every rank is quiet, suspect a hung collective "
              "(HCCL) or shared storage.")
NO_PROGRESS_HINT = ("The heartbeat file is still being written but the step does not advance: the loop is "
                    "alive but stuck (data loader, retry loop, collective). Dump the stacks with py-spy.")
NAN_HINT = ("Training diverged. On NPU a NaN run can log loss 0.0 with grad_norm nan. Stop and resume from "
            "the last good checkpoint with a lower learning rate or bf16; check the data around this step.")

# psutil status strings (see psutil.STATUS_*).
_STOPPED = ("stopped", "tracing-stop")


def _rank_label(r: HeartbeatReading) -> str:
    return str(r.rank) if r.rank is not None else r.path


def _fmt(seconds: float) -> str:
    return format_duration(max(0.0, seconds))


def _not_finite(v: Optional[float]) -> bool:
    return v is not None and not math.isfinite(v)


def _done_ranks(view: StateView) -> Tuple[Set[str], bool]:
    """Ranks whose latest heartbeat says `done`, and whether every started heartbeat says so."""
    sample = view.latest("heartbeat")
    if sample is None:
        return set(), False
    obs: HeartbeatObservation = sample.value
    started = [r for r in obs.readings if r.beat_time is not None]
    done = {_rank_label(r) for r in started if r.phase == "done"}
    return done, bool(started) and len(done) == len(started)


def train_threshold(r: HeartbeatReading, cfg: HeartbeatProbeConfig, now: float) -> Tuple[float, bool]:
    """The `train` stale threshold for this rank: learned after warm-up when enabled, else configured."""
    learn = cfg.learn
    if (learn.enabled and r.train_since is not None and r.max_step_gap is not None
            and r.step_gaps >= learn.min_gaps and now - r.train_since >= learn.warmup):
        return min(learn.max, max(learn.min, r.max_step_gap * learn.factor)), True
    return float(cfg.stale_after.train), False


def stale_threshold(r: HeartbeatReading, cfg: HeartbeatProbeConfig, now: float) -> Tuple[float, bool]:
    if r.phase in (None, "train") and r.format == "json":
        return train_threshold(r, cfg, now)
    return cfg.stale_after.for_phase(r.phase), False


def job_leniency(readings: List[HeartbeatReading], cfg: HeartbeatProbeConfig,
                 now: float) -> Tuple[Optional[str], float]:
    """The job's most lenient phase and its stale threshold, over every rank not done: the one
    job-level phase notion the liveness rules share with the stall rule (`series.job_phase`)."""
    best_phase: Optional[str] = None
    best = 0.0
    for r in readings:
        t, _ = stale_threshold(r, cfg, now)
        if t > best:
            best_phase, best = r.phase, t
    return best_phase, best


# -- a job's ranks leaving: failure or clean end -------------------------------------------

#: Outcomes of `judge_end`.
FAILURE, LEAVING, FINISHED = "failure", "leaving", "finished"
#: Failure rows that are warnings, not critical pages: no sign of a crash, no sign of a clean end.
WARNING_ROWS = ("stopped", "status_unknown")
STATUS_UNKNOWN = "ended, exit status unknown: no evidence of a clean finish"


@dataclass(frozen=True)
class EndVerdict:
    #: FAILURE (page as before: rank_missing / job_gone), LEAVING (ranks are going, no sign
    #: either way yet: no page) or FINISHED (a clean end: info `job_finished` at most).
    outcome: str
    #: The row of the decision table (docs/discovery.md) that decided.
    row: str
    reason: str

    @property
    def failure(self) -> bool:
        return self.outcome == FAILURE


#: A launcher's words on receiving a stop request itself (torch elastic's agent: `Received 15 death
#: signal, shutting down workers`, `SignalException: Process 1234 got signal: 15`): a failure line
#: to the log rules, but when it is the end's gravest line the job was stopped (SIGHUP, SIGINT or
#: SIGTERM: a scheduler's cancel, a preemption), not crashed: the `stopped` row, a warning.
_STOP_ECHO = re.compile(r"Received (?:1|2|15|Signals\.SIG(?:HUP|INT|TERM)) death signal, shutting down workers"
                        r"|SignalException: Process \d+ got signal: (?:1|2|15)\b")


def stop_echo(ev: EndEvidence) -> str:
    """The failure line when it is only the launcher reporting its own stop request ("" if not)."""
    return ev.failure_line if ev.failure_line and _STOP_ECHO.search(ev.failure_line) else ""


def judge_end(ev: EndEvidence, running: int, now: float, window: float) -> EndVerdict:
    """Pure: is the departure of a job's ranks a failure or a clean end? The first matching row
    of the decision table wins; failure signs come first, so no end line can hide a crash. A
    rank that leaves alone is only called missing once `window` passed with its peers still
    running, since the ranks of a job that ends leave within moments of each other."""
    if ev.kernel_kill:
        return EndVerdict(FAILURE, "kernel_kill", f"the kernel killed one of its processes: {ev.kernel_kill}")
    echo = stop_echo(ev)
    if ev.failure_line and not echo:
        return EndVerdict(FAILURE, "failure_line", f"failure line in the ranks' last lines: {ev.failure_line}")
    if ev.first_exit:
        return EndVerdict(FAILURE, "exit_status", f"the first to go: {ev.first_exit} (the kernel's process events)")
    first, last = ev.first_left_at, ev.last_left_at
    if running:
        if first is not None and now - first > window:
            return EndVerdict(FAILURE, "left_alone", f"a rank left {format_duration(now - first)} ago while "
                                                     f"{running} still run")
        return EndVerdict(LEAVING, "leaving", "ranks are leaving; their peers have not yet")
    if first is not None and last is not None and last - first > window:
        return EndVerdict(FAILURE, "left_apart", f"the ranks left {format_duration(last - first)} apart, "
                                                 f"not together (window {format_duration(window)})")
    if ev.heartbeats and ev.done >= ev.heartbeats:
        return EndVerdict(FINISHED, "heartbeats_done", f"every heartbeat said done ({ev.done} of {ev.ranks} ranks)")
    if ev.end_line:
        return EndVerdict(FINISHED, "end_line", f"end-of-training line: {ev.end_line}")
    if ev.first_stop or echo:
        # Asked to stop, with nothing saying the job was done: a cancel or a preemption. Not a
        # crash (a warning, not a page to the critical channels), but not a clean end either.
        return EndVerdict(FAILURE, "stopped", f"the first to go: {ev.first_stop or _echo_words(echo)}: "
                                              "cancelled or preempted?")
    if not ev.exit_source:
        # No exit status can be known (the kernel's process events need root and CAP_NET_ADMIN),
        # and nothing said the job was done: a rank's silent `exit 1` torn down by a quiet launcher
        # looks exactly like a finish. A clean end needs positive evidence, so this is not one; a
        # warning, since most such ends are finishes of jobs that print no end line.
        return EndVerdict(FAILURE, "status_unknown", f"{STATUS_UNKNOWN}: all {ev.ranks} ranks left together, "
                                                     "no end line, no heartbeat `done`, no launcher success line, "
                                                     "and no exit status (the kernel's process events need root)")
    return EndVerdict(FINISHED, "left_together", f"all {ev.ranks} ranks left together with no failure line")


def _echo_words(echo: str, language: str = "en") -> str:
    """The launcher's stop report as the first to go, in `language`'s words around the launcher's own
    line: `the launcher (Received 15 death signal ...)`, `启动器（Received 15 death signal ...）`; ""
    when there is no such report."""
    return words(language).t("launcher_said", line=echo.split(": ", 1)[-1][:200]) if echo else ""


def _job_end(obs: ProcessObservation, running: int, view: StateView, config: Config
             ) -> Tuple[Optional[JobState], Optional[EndVerdict]]:
    """The discovered job of this pass and the verdict on its departed ranks (None: none left,
    or ranks selected by explicit settings, which keep the heartbeat-only rule)."""
    end = obs.jobs[0].end if len(obs.jobs) == 1 else None
    if not obs.discovered or end is None:
        return None, None
    job = obs.jobs[0]
    return job, judge_end(_with_kernel_kill(end, obs, view), running, view.now,
                          float(config.discovery.end_window))


def _with_kernel_kill(ev: EndEvidence, obs: ProcessObservation, view: StateView) -> EndEvidence:
    """The evidence plus the kernel's word: an OOM kill or a crash (segfault, trap) of one of the
    job's processes makes an end a failure, however quietly the ranks left."""
    if ev.kernel_kill:
        return ev
    pids = {p.pid for p in tuple(obs.gone) + tuple(obs.processes)}
    if obs.jobs and obs.jobs[0].launcher_pid:
        pids.add(obs.jobs[0].launcher_pid)
    deaths = [e for e in kernel_events_for_pids(view, pids) if e.category in ("oom", "crash")]
    return replace(ev, kernel_kill=deaths[-1].text) if deaths else ev


def _job_finished(base: Dict[str, str], job: JobState, verdict: EndVerdict, now_sample: float,
                  goodput: Tuple[str, Dict[str, object]] = ("", {})) -> Finding:
    ev = job.end or EndEvidence()
    return Finding(
        rule="job_finished", severity="info",
        summary=f"training job ended cleanly ({ev.ranks} ranks): {verdict.reason}{goodput[0]}",
        labels=dict(base), since=ev.last_left_at or job.ended_at or now_sample, value=verdict.row,
        hint="Nothing to do: the ranks left with no failure sign. If the job was not meant to end, "
             "check who stopped it (scheduler, operator) before restarting it.",
        details={"verdict": asdict(verdict), "evidence": asdict(ev), **goodput[1]}, snapshot=False,
    )


# -- process findings ----------------------------------------------------------------------

_STOPPED_HINT = ("The job's first process ended on a stop request (SIGTERM, SIGINT or SIGHUP) and nothing said "
                 "the job was done (no end line, no heartbeat `done`): a cancel or a preemption. Check the "
                 "scheduler's record of the job and who stopped it; restart from the last checkpoint if it "
                 "was not meant to end.")


_STATUS_UNKNOWN_HINT = ("Every rank left together and nothing said the job was done (no end line, no heartbeat "
                        "`done`, no launcher success line), and this daemon cannot read exit statuses (the kernel's "
                        "process events need root; `npu-watchdog doctor` says so): a silent crash and a finish look "
                        "the same. Check the launcher's exit code in the scheduler's record and the ranks' last log "
                        "lines; run the daemon as root, or have the job print an end line or write heartbeat `done`.")


def _job_gone(base: Dict[str, str], obs: ProcessObservation, gone_since: Optional[float], now_sample: float,
              verdict: Optional[EndVerdict] = None, goodput: Tuple[str, Dict[str, object]] = ("", {})) -> Finding:
    since = gone_since if gone_since is not None else now_sample
    last = list(obs.gone) + list(obs.processes)
    end = obs.jobs[0].end if obs.jobs else None
    judged = {} if verdict is None or end is None else {"verdict": asdict(verdict), "evidence": asdict(end)}
    row = verdict.row if verdict is not None and end is not None else ""
    summary = f"all training processes are gone ({len(last)} ranks last seen)"
    # The same facts in Chinese (the Chinese message is written from the rule's template).
    zh = words("zh")
    said_zh = ""
    report = parse_exit(end.failure_line) if row == "failure_line" and end is not None else None
    if row == "exit_status" and end is not None:
        summary += f": {end.first_exit} first"
        said_zh += f"：{end.first_exit_zh} {zh.t('first_to_go')}"
    if row == "stopped" and end is not None:
        echo = stop_echo(end)
        summary += f": {end.first_stop or _echo_words(echo)} first: cancelled or preempted?"
        said_zh += f"：{end.first_stop_zh or _echo_words(echo, 'zh')} {zh.t('first_to_go')}，{zh.t('stopped_question')}"
    if row == "status_unknown":
        summary += f": {STATUS_UNKNOWN}"
        said_zh += f"：{zh.t('status_unknown')}"
    if end is not None and end.shape_line and row not in ("failure_line", "kernel_kill", ""):
        # No exact wording saw the cause; a line in a failure's shape did: name it, as a lead.
        shape = end.shape_line.split(": ", 1)[-1]
        summary += f"; {words('en').t('last_error_shape')}: {shape}"
        said_zh += f"；{zh.t('last_error_shape')}：{shape}"
    if report is not None:
        # The launcher's report names the first to go and how: "rank 6 killed (signal 9)".
        summary += f": {report.words()}"
        said_zh += f"：{report.words('zh')}"
        judged["exit_report"] = {"launcher": report.launcher, "rank": report.rank, "pid": report.pid,
                                 "code": report.status.code, "signal": report.status.signal,
                                 "en": report.words(), "zh": report.words("zh")}
    elif row in ("failure_line", "kernel_kill") and end is not None and end.first_exit:
        # The failure line names no rank or status (`train.py FAILED`, msrun's `kill all other
        # workers`): the kernel's process events still know who went first and how.
        summary += f": {end.first_exit} first"
        said_zh += f"：{end.first_exit_zh} {zh.t('first_to_go')}"
    return Finding(
        rule="job_gone", severity="warning" if row in WARNING_ROWS else "critical",
        summary=summary + goodput[0],
        labels=dict(base), since=since, value=str(len(last)),
        hint=_STOPPED_HINT if row == "stopped" else _STATUS_UNKNOWN_HINT if row == "status_unknown" else
        "The job crashed or was killed. Read the last lines of the rank logs and `dmesg` (OOM killer, "
        "driver errors) before restarting from the last checkpoint.",
        details={"ranks": [{"rank": g.rank, "pid": g.pid, "state": g.state,
                            "cmdline": " ".join(g.cmdline)[:500]} for g in last], **judged, **goodput[1],
                 "said": {"zh": said_zh + _said(goodput, "zh")}},
    )


def _said(goodput: Tuple[str, Dict[str, object]], language: str) -> str:
    """The goodput sentence of `goodput_words` in `language` ("" when there is none)."""
    said = goodput[1].get("said")
    return str(said.get(language, "")) if isinstance(said, dict) else ""


def _missing_ranks(view: StateView, config: Config, obs: ProcessObservation, alive: List[ProcessInfo],
                   done: Set[str], leaving: bool = False) -> List[Finding]:
    """Ranks gone while peers run (unless `leaving`: they may be the first of a job ending), and
    ranks that never appeared."""
    base = config.base_labels
    out: List[Finding] = []
    alive_ranks = {p.rank for p in alive}
    ends = [j.end for j in obs.jobs if j.end is not None]
    exits = {pid: how for e in ends for pid, how in e.exits}  # how each departed pid ended, when the kernel said
    for g in obs.gone:
        if str(g.rank) in done or g.rank in alive_ranks or leaving:
            continue
        how = f" ({exits[g.pid]})" if g.pid in exits else ""
        out.append(Finding(
            rule="rank_missing", severity="critical",
            summary=f"rank {g.rank} (pid {g.pid}) exited{how} while {len(alive)} ranks still run",
            labels={**base, "rank": str(g.rank), "pid": str(g.pid)},
            hint="One rank died; the others will block in their next collective. Check that rank's log and "
                 "`dmesg`; restart the job from the last checkpoint.",
            details={"cmdline": " ".join(g.cmdline)[:500], "alive": len(alive), "expected": obs.expected},
        ))
    if obs.expected and len(alive) < obs.expected and view.now - view.started_at >= PROCESS_CONFIG.of(config).start_grace:
        seen = alive_ranks | {g.rank for g in obs.gone}
        unexplained = obs.expected - len(alive) - len([g for g in obs.gone if g.rank not in alive_ranks])
        if unexplained > 0:
            if all(r is not None and r < obs.expected for r in seen):
                missing = [str(r) for r in range(obs.expected) if r not in seen][:unexplained]
            else:
                missing = ["unknown"]
            for r in missing:
                if r in done:
                    continue
                out.append(Finding(
                    rule="rank_missing", severity="critical",
                    summary=f"rank {r} never appeared: {len(alive)} of {obs.expected} ranks run",
                    labels={**base, "rank": r},
                    hint="Fewer ranks than expected started. Check the launcher's output and the `expected` setting.",
                    details={"alive": len(alive), "expected": obs.expected},
                ))
    return out


def _process_findings(view: StateView, config: Config, done: Set[str], all_done: bool) -> List[Finding]:
    pcfg = PROCESS_CONFIG.of(config)
    sample = view.latest("process")
    if not pcfg.enabled or sample is None:
        return []
    base = config.base_labels
    obs: ProcessObservation = sample.value
    out: List[Finding] = []
    if obs.clean_end or (obs.discovered and not obs.jobs):
        return out  # a clean end (end-of-training line), or no discovered job (none yet, or forgotten)
    if obs.first_seen_at is None:
        waited = view.now - view.started_at
        if waited >= pcfg.start_grace and not obs.discovered:
            out.append(Finding(
                rule="process_not_started", severity="warning",
                summary=f"no training process found {_fmt(waited)} after the watchdog started",
                labels=dict(base), value=_fmt(waited), since=view.started_at,
                hint="Is the job scheduled on this node? Check the selectors (pid_file, cmdline, name, user, "
                     "parent) with `npu-watchdog probe`.",
                details={"source": "process", "expected": obs.expected},
            ))
        return out

    alive = [p for p in obs.processes if p.state != "zombie"]
    summary = summary_of(view, "process", config)
    job, verdict = _job_end(obs, len(alive), view, config)
    if not alive and job is not None and verdict is not None:
        ev = job.end or EndEvidence()
        goodput = goodput_words(view, config, ev.last_left_at or job.ended_at or sample.time, not verdict.failure)
        if verdict.failure:
            out.append(_job_gone(base, obs, summary.gone.since, sample.time, verdict, goodput))
        else:
            return [_job_finished(base, job, verdict, sample.time, goodput)]
    elif not alive and not all_done:
        out.append(_job_gone(base, obs, summary.gone.since, sample.time))
    elif alive:
        leaving = verdict is not None and not verdict.failure
        out.extend(_missing_ranks(view, config, obs, alive, done, leaving))
    out = [explain(view, config, f) for f in out]  # why the ranks are gone, when anything knows

    rules = (("zombie", "rank_zombie", "critical", pcfg.zombie_after,
              "The rank exited but its parent (the launcher) has not reaped it; the job is broken. "
              "Check the launcher and the rank's last log lines."),
             ("disk-sleep", "rank_disk_sleep", "warning", pcfg.disk_sleep_after,
              "The rank is stuck in uninterruptible sleep (D), usually inside a driver call or on a hung "
              "filesystem. Check `cat /proc/<pid>/stack`, dmesg and the NPU driver."),
             ("stopped", "rank_stopped", "critical", pcfg.stopped_after,
              "The rank is stopped (SIGSTOP or a debugger): every other rank will block on it. "
              "Resume it with `kill -CONT <pid>` if that was not intended."))
    for p in obs.processes:
        if str(p.rank) in done:
            continue
        state = "stopped" if p.state in _STOPPED else p.state
        for wanted, rule, severity, after, hint in rules:
            if state != wanted:
                continue
            since = summary.state_since(p)
            held = view.now - since
            if held < after:
                continue
            out.append(Finding(
                rule=rule, severity=severity,
                summary=f"rank {p.rank} (pid {p.pid}) has been {wanted} for {_fmt(held)}",
                labels={**base, "rank": str(p.rank), "pid": str(p.pid)},
                hint=hint, value=_fmt(held), since=since,
                details={"state": p.state, "cmdline": " ".join(p.cmdline)[:500], "threshold": after},
            ))
    return out


# -- heartbeat findings --------------------------------------------------------------------

def _pid_of(view: StateView, r: HeartbeatReading) -> Optional[int]:
    if r.pid is not None:
        return r.pid
    sample = view.latest("process")
    if sample is None or r.rank is None:
        return None
    for p in sample.value.processes:
        if p.rank == r.rank:
            return p.pid
    return None


def _loss_scale_collapse(view: StateView, config: Config, r: HeartbeatReading) -> Optional[Dict[str, Any]]:
    cfg = HEARTBEAT_CONFIG.of(config)
    track = summary_of(view, "heartbeat", config).rank(r)
    if r.loss_scale is None or track is None:
        return None
    ls = cfg.loss_scale
    peak = track.loss_scale_peak(view.now - ls.window)
    trend = ScaleTrend(fall=2.0 ** ls.drops, below=ls.below, floor=ls.min, window=ls.window)
    if collapsed(trend, r.loss_scale, peak):
        return {"loss_scale": r.loss_scale, "window_peak": peak, "window": ls.window}
    return None


def _throughput_drop(view: StateView, config: Config, r: HeartbeatReading) -> Optional[Dict[str, object]]:
    tc = HEARTBEAT_CONFIG.of(config).throughput
    track = summary_of(view, "heartbeat", config).rank(r)
    if r.throughput is None or r.phase not in (None, "train") or track is None:
        return None
    base = track.throughput_baseline(view.now, tc.window, tc.sustained, tc.min_baseline)
    if base is None:
        return None
    median = base["median"]
    if median <= 0 or not base["recent_max"] < tc.ratio * median:
        return None
    return {"throughput": r.throughput, "median": median, "ratio": r.throughput / median,
            "unit": r.throughput_unit}



def _nan_log_match(view: StateView, config: Config, r: HeartbeatReading, streak_at: float):
    """The NaN log match of this rank that belongs to the current run of NaN heartbeats (its
    lines still came after the run began), else None. A heartbeat is written at most every so
    often and read every probe round, so it may skip the first NaN step; the log line names it."""
    sample = view.latest(LOGS)
    slack = 3 * max(float(HEARTBEAT_CONFIG.of(config).interval), float(LOGS_CONFIG.of(config).interval)) + 5.0
    best = None
    for a in sample.value.active if sample is not None else ():
        if a.category != "nan" or a.rank is None or r.rank is None or str(a.rank) != str(r.rank):
            continue
        if a.last_at < streak_at - slack:
            continue  # an earlier divergence, before a restart from a checkpoint
        if best is None or a.first_at < best.first_at:
            best = a
    return best


def _nan_finding(view: StateView, config: Config, r: HeartbeatReading, label: str,
                 labels: Dict[str, str], common: Mapping[str, object]) -> Finding:
    """`loss_nan` naming where the divergence began (the first NaN step seen, or the first NaN
    log line of that rank when it names an earlier iteration) and since when, not the newest step:
    on-call rolls back to before it."""
    which = [n for n, v in (("loss", r.loss), ("grad_norm", r.grad_norm)) if _not_finite(v)]
    track = summary_of(view, "heartbeat", config).rank(r)
    streak_at, first_step = track.nan_first if track is not None and track.nan_first else (r.beat_time, r.step)
    word, lines = "step", None
    match = _nan_log_match(view, config, r, streak_at or view.now)
    if match is not None:
        logged = find_step([first_line(match)])
        if logged is not None and (first_step is None or logged[1] <= first_step):
            word, first_step = logged
        streak_at = min(x for x in (streak_at, match.first_at) if x is not None)
        lines = match.count
    where = f" from {word} {first_step}" if first_step is not None else ""
    newest = f"; newest step {r.step}" if r.step is not None and r.step != first_step else ""
    return Finding(
        rule="loss_nan", severity="critical",
        summary=f"rank {label} {' and '.join(which)} not finite{where} (loss={r.loss}, grad_norm={r.grad_norm}{newest})",
        labels=labels, value=", ".join(which), since=streak_at, hint=NAN_HINT,
        details={**common, "loss": str(r.loss), "grad_norm": str(r.grad_norm), "first_step": first_step,
                 "first_at": streak_at, **({"count": lines} if lines is not None else {})},
    )

def _unreadable(r: HeartbeatReading, labels: Dict[str, str], common: Dict[str, Any],
                cfg: HeartbeatProbeConfig, now: float) -> List[Finding]:
    """`heartbeat_unreadable` once the file has failed to read for `unreadable_after`."""
    if not r.error or r.error_since is None or now - r.error_since < cfg.unreadable_after:
        return []
    return [Finding(
        rule="heartbeat_unreadable", severity="warning",
        summary=f"heartbeat of rank {labels['rank']} unreadable for {_fmt(now - r.error_since)}: {r.error}",
        labels=labels, value=r.error, since=r.error_since,
        hint="The file keeps being empty, half-written or not JSON. Write it atomically (temp file + rename), "
             "e.g. with contrib/heartbeat/heartbeat.py.",
        details={**common, "read_errors_total": r.read_errors_total},
    )]


def _heartbeat_findings(view: StateView, config: Config, done: Set[str]) -> List[Finding]:
    cfg = HEARTBEAT_CONFIG.of(config)
    sample = view.latest("heartbeat")
    if not cfg.enabled or sample is None:
        return []
    base = config.base_labels
    obs: HeartbeatObservation = sample.value
    out: List[Finding] = []
    now = view.now

    started = [r for r in obs.readings if r.beat_time is not None]
    # A file never read well (a FIFO, binary or plain text from the start) has no beat to age:
    # without this it was never reported, and a hung rank behind it never paged.
    for r in obs.readings:
        if r.beat_time is None and _rank_label(r) not in done:
            out.extend(_unreadable(r, {**base, "rank": _rank_label(r)}, {"path": r.path, "pid": r.pid}, cfg, now))
    if not started:
        waited = now - view.started_at
        if not PROCESS_CONFIG.of(config).enabled and waited >= cfg.start_grace:
            out.append(Finding(
                rule="process_not_started", severity="warning",
                summary=f"no heartbeat file appeared {_fmt(waited)} after the watchdog started",
                labels=dict(base), value=_fmt(waited), since=view.started_at,
                hint="Is the job running on this node, and do `probes.heartbeat.paths` match its files?",
                details={"source": "heartbeat", "paths": list(cfg.paths)},
            ))
        return out

    fresh: List[Tuple[str, HeartbeatReading, float]] = []
    job_phase, job_threshold = job_leniency([r for r in started if _rank_label(r) not in done], cfg, now)
    for r in started:
        label = _rank_label(r)
        if label in done:
            continue
        labels = {**base, "rank": label}
        pid = _pid_of(view, r)
        common = {"path": r.path, "pid": pid, "phase": r.phase, "step": r.step}
        out.extend(_unreadable(r, labels, common, cfg, now))
        ahead = max((r.beat_time or 0) - sample.time, (r.mtime or 0) - sample.time)
        if ahead > cfg.clock_skew_tolerance:
            out.append(Finding(
                rule="heartbeat_clock_skew", severity="warning",
                summary=f"heartbeat of rank {label} is {_fmt(ahead)} in the future: clocks disagree",
                labels=labels, value=_fmt(ahead),
                hint="Check NTP/chrony on this node (and the storage server if the file is on NFS). "
                     "Heartbeat age cannot be judged while clocks are skewed.",
                details={**common, "ahead_seconds": ahead},
            ))
            continue
        own, learned = stale_threshold(r, cfg, now)
        # Phase leniency is one job-level notion: rank 0 writing a checkpoint covers its peers
        # waiting for it in a barrier while they still report `train`.
        threshold = max(own, job_threshold)
        age = now - (r.beat_time or now)
        detail = {**common, "age_seconds": age, "threshold_seconds": threshold, "learned": learned,
                  "job_phase": job_phase, "file_exists": r.exists}
        if age > threshold:
            gone = "" if r.exists else " (file deleted)"
            out.append(Finding(
                rule="heartbeat_stale", severity="critical",
                summary=f"rank {label} heartbeat is {_fmt(age)} old in phase {job_phase or r.phase or 'unknown'} "
                        f"(threshold {_fmt(threshold)}{', learned' if learned else ''}){gone}",
                labels=labels, value=_fmt(age), since=r.beat_time, hint=STALE_HINT, details=detail,
            ))
        else:
            fresh.append((label, r, age))
            if r.step is not None and r.phase in (None, "train") and r.step_changed_at is not None:
                limit = cfg.no_progress_after if cfg.no_progress_after is not None else threshold
                if job_phase not in (None, "train"):
                    limit = max(limit, job_threshold)  # peers wait in a barrier for the lenient phase
                stuck = now - r.step_changed_at
                if stuck > limit:
                    out.append(Finding(
                        rule="heartbeat_no_progress", severity="critical",
                        summary=f"rank {label} is stuck at step {r.step} for {_fmt(stuck)} while its heartbeat "
                                f"keeps being written",
                        labels=labels, value=_fmt(stuck), since=r.step_changed_at, hint=NO_PROGRESS_HINT,
                        details={**detail, "stuck_seconds": stuck, "limit_seconds": limit},
                    ))
        if _not_finite(r.loss) or _not_finite(r.grad_norm):
            out.append(_nan_finding(view, config, r, label, labels, common))
        collapse = _loss_scale_collapse(view, config, r)
        if collapse:
            out.append(Finding(
                rule="loss_scale_collapse", severity="warning",
                summary=f"rank {label} loss scale collapsed to {r.loss_scale:g} "
                        + (f"(from {collapse['window_peak']:g} within {_fmt(cfg.loss_scale.window)})"
                           if collapse["window_peak"] and collapse["window_peak"] > r.loss_scale
                           else f"(at or below {cfg.loss_scale.min:g})"),
                labels=labels, value=f"{r.loss_scale:g}",
                hint="Gradients overflow at every step: the updates are being skipped or are meaningless. "
                     "Look for a bad batch, a too-high learning rate, or switch to bf16.",
                details={**common, **collapse},
            ))
        drop = _throughput_drop(view, config, r)
        if drop:
            out.append(Finding(
                rule="throughput_drop", severity="warning",
                summary=f"rank {label} throughput {r.throughput:g} is {drop['ratio']:.0%} of its recent median "
                        f"{drop['median']:g}",
                labels=labels, value=f"{drop['ratio']:.2f}",
                hint="Training slowed down. Check NPU temperature/throttling, the data loader and storage, "
                     "and other jobs on the node.",
                details={**common, **drop},
            ))

    out.extend(_stragglers(view, config, fresh))
    return out


def _median_without(ordered: List[float], x: float) -> float:
    """Median of `ordered` (sorted) without one occurrence of `x`: O(log n) instead of building
    the list of the other ranks' ages for every rank (ranks^2 per pass)."""
    skip = bisect_left(ordered, x)
    m = len(ordered) - 1

    def at(k: int) -> float:
        return ordered[k] if k < skip else ordered[k + 1]

    return (at((m - 1) // 2) + at(m // 2)) / 2


def _stragglers(view: StateView, config: Config, fresh: List[Tuple[str, HeartbeatReading, float]]) -> List[Finding]:
    cfg = HEARTBEAT_CONFIG.of(config).straggler
    train = [(lb, r, age) for lb, r, age in fresh if r.phase in (None, "train")]
    if len(train) < 2:
        return []
    base = config.base_labels
    out = []
    steps = [r.step for _, r, _ in train if r.step is not None]
    top = max(steps) if steps else None
    ages = sorted(a for _, _, a in train)
    for lb, r, age in train:
        median_age = _median_without(ages, age)
        behind = (top - r.step) if (top is not None and r.step is not None) else 0
        if behind >= cfg.steps or age - median_age >= cfg.age:
            reason = (f"{behind} steps behind the leading rank" if behind >= cfg.steps
                      else f"heartbeat {_fmt(age - median_age)} older than the other ranks'")
            out.append(Finding(
                rule="rank_straggler", severity="warning",
                summary=f"rank {lb} is a straggler: {reason}",
                labels={**base, "rank": lb},
                hint="One rank is slower than the rest and holds everyone back. Check its NPU (temperature, "
                     "health), its host CPU/memory pressure, and its data shard.",
                value=str(behind) if behind >= cfg.steps else _fmt(age - median_age),
                details={"step": r.step, "leading_step": top, "steps_behind": behind, "age_seconds": age,
                         "median_age_of_others": median_age, "pid": _pid_of(view, r), "path": r.path},
            ))
    return out


def _detect_job(view: StateView, config: Config) -> List[Finding]:
    done, all_done = _done_ranks(view)
    process = _process_findings(view, config, done, all_done)
    if any(f.rule == "job_finished" for f in process):
        return process  # the heartbeats of a job that ended cleanly stopped on purpose
    return process + _heartbeat_findings(view, config, done)

#: A kernel record (an OOM kill, a segfault) names why a rank is gone: its message says so at once.
TRIGGERS = ("process", "heartbeat", "kernel")


def _process_warmup(c: Config, f: dict) -> float:
    """A rank that died before a restart is only seen again as "fewer ranks than expected", which
    the rule calls after `start_grace`: that long, a restored alert is held."""
    return float(PROCESS_CONFIG.of(c).start_grace) + probe_wait(c, "process")


_HB = lambda c, f: probe_wait(c, "heartbeat")  # noqa: E731
_RANK_SYMPTOMS = Inhibits(("heartbeat_stale", "heartbeat_no_progress", "rank_straggler", "throughput_drop"),
                          JOB_LABELS + ("rank",))
#: A dead, zombie or stopped rank leaves its peers waiting in a collective: their stall, HCCL
#: timeouts, tracebacks and idle devices are its symptoms.
_JOB_SYMPTOMS = Inhibits(("stall", "log_hccl", "log_traceback", "npu_idle", "npu_low_util", "npu_busy_hang",
                          "heartbeat_stale", "heartbeat_no_progress", "throughput_drop", "rank_straggler"))

#: The kernel's record of a rank's death (an OOM kill, a segfault) is the same event as the rank
#: or the job being gone: the first to fire pages, the other is folded into it.
_KERNEL_DEATH = ("kernel_oom", "kernel_crash")

RULES = (
    Rule("process_not_started", "warning",
         inhibits=(_JOB_SYMPTOMS,),
         warmup=lambda c, f: max(float(PROCESS_CONFIG.of(c).start_grace), float(HEARTBEAT_CONFIG.of(c).start_grace)),
         title="Training process not started"),
    Rule("job_gone", "critical", severities=("critical", "warning"),
         inhibits=(_JOB_SYMPTOMS, Inhibits(("rank_missing", "rank_zombie"))), warmup=_process_warmup,
         same_event=_KERNEL_DEATH, ends=True, title="Training job gone"),
    Rule("job_finished", "info",
         inhibits=(_JOB_SYMPTOMS, Inhibits(("rank_missing", "rank_zombie"))), title="Training job finished cleanly"),
    Rule("rank_missing", "critical",
         inhibits=(_RANK_SYMPTOMS, _JOB_SYMPTOMS), warmup=_process_warmup, same_event=_KERNEL_DEATH + ("rank_zombie",),
         ends=True,
         title="Rank process gone"),
    # A zombie reaped is the same death: rank_zombie paged it; the rank_missing that follows the
    # reaping is folded into it, not paged again (nor is the zombie's alert said resolved while
    # its rank is missing). Needs the zombie's alert still firing then: resolve_delay > 0.
    Rule("rank_zombie", "critical",
         inhibits=(_RANK_SYMPTOMS, _JOB_SYMPTOMS), same_event=("rank_missing",),
         warmup=lambda c, f: float(PROCESS_CONFIG.of(c).zombie_after) + probe_wait(c, "process"), title="Rank process is a zombie"),
    Rule("rank_stopped", "critical",
         inhibits=(_RANK_SYMPTOMS, _JOB_SYMPTOMS),
         warmup=lambda c, f: float(PROCESS_CONFIG.of(c).stopped_after) + probe_wait(c, "process"), title="Rank process stopped"),
    Rule("rank_disk_sleep", "warning",
         inhibits=(_RANK_SYMPTOMS,),
         warmup=lambda c, f: float(PROCESS_CONFIG.of(c).disk_sleep_after) + probe_wait(c, "process"), title="Rank stuck in disk wait"),
    Rule("heartbeat_stale", "critical",
         warmup=lambda c, f: detail(f, "threshold_seconds", float(HEARTBEAT_CONFIG.of(c).stale_after.train)) + _HB(c, f), title="Heartbeat stale"),
    Rule("heartbeat_no_progress", "critical",
         warmup=lambda c, f: detail(f, "limit_seconds", float(HEARTBEAT_CONFIG.of(c).stale_after.train)) + _HB(c, f), title="No training progress"),
    Rule("heartbeat_unreadable", "warning",
         warmup=lambda c, f: float(HEARTBEAT_CONFIG.of(c).unreadable_after) + _HB(c, f), title="Heartbeat file unreadable"),
    Rule("heartbeat_clock_skew", "warning",
         default_for=300.0, warmup=_HB, title="Heartbeat clock skew"),
    Rule("loss_nan", "critical",
         same_event=("log_nan",), inhibits=(Inhibits(("loss_scale_collapse", "throughput_drop")),), warmup=_HB, title="NaN loss"),
    Rule("loss_scale_collapse", "warning",
         warmup=lambda c, f: float(HEARTBEAT_CONFIG.of(c).loss_scale.window), title="Loss scale collapsed"),
    Rule("throughput_drop", "warning",
         default_for=300.0, warmup=lambda c, f: float(HEARTBEAT_CONFIG.of(c).throughput.min_baseline) + _HB(c, f), title="Throughput dropped"),
    Rule("rank_straggler", "warning",
         default_for=300.0, warmup=lambda c, f: float(HEARTBEAT_CONFIG.of(c).straggler.age) + _HB(c, f), title="Straggling rank"),
)


#: Discovered jobs each get their own pass (and job label); see detectors/jobs.py.
detect = per_job(_detect_job)
