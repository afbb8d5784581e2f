"""Cause of death: why a rank (or a whole job) is gone or stalled, when anything knows.

Pure over the StateView, used by the liveness rules (`rank_missing`, `job_gone`) and the fused
`stall` rule to say WHY in their message and snapshot. The answer comes from the first source
that knows, most specific first:

1. the kernel: an OOM kill, segfault or trap of one of the pids (watchdog.detectors.kernel);
2. a failure line of that rank the log rules matched (the logs probe's active matches);
3. the launcher's report of the worker's exit (watchdog.parse.exits: torchrun's `exitcode: -9
   ... (pid: N)` and `Signal 9 (SIGKILL) received by PID N`, mpirun's `... with PID N ...
   exited on signal 9`, ...), in its one wording: `killed (signal 9)`;
4. else the rank's last lines that look like errors (error level, `Error:`, a traceback's tail).

Log text is cut (lines and characters) and redacted with the snapshots' redactor before it goes
into a finding; the channels escape it for their markup like any other finding text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from watchdog.detectors.kernel import kernel_events_for_pids
from watchdog.logrules.lastlines import ERRORISH
from watchdog.parse.exits import parse_exit
from watchdog.core.state import StateView
from watchdog.core.findings import JOB_LABEL
from watchdog.observations import PROCESS
from watchdog.probes.logs import LOGS
from watchdog.privacy.redact import Redactor, config_secrets

#: Lines of evidence, and characters per line, a cause carries at most.
MAX_LINES = 8
MAX_CHARS = 300
#: Log categories that explain a death (a NaN line does not kill a rank by itself, but is named).
_FATAL_ORDER = ("oom", "crash", "device", "hccl", "traceback", "nan", "custom")

_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\)")


@dataclass(frozen=True)
class Cause:
    """Why a rank is gone: a one-line reason and the lines that show it."""

    #: "kernel", "log", "launcher" or "last_lines".
    kind: str
    reason: str
    lines: Tuple[str, ...] = ()
    #: Where it was read (the kernel log, a log file's path).
    source: str = ""
    #: The reason in Chinese, where it is said in the project's own words (a launcher's report).
    zh: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "lines": list(self.lines), "source": self.source,
                "zh": self.zh}


def _redactor(view: StateView, config: Any) -> Any:
    return view.once(("cause_redactor", id(config)), lambda: Redactor(config_secrets(config)))


def _clean(view: StateView, config: Any, lines: Iterable[str]) -> Tuple[str, ...]:
    red = _redactor(view, config)
    out = []
    for line in list(lines)[-MAX_LINES:]:
        line = line.replace("\x00", "").rstrip()
        if len(line) > MAX_CHARS:
            line = line[:MAX_CHARS - 1] + "…"
        out.append(red.text(line))
    return tuple(out)


def _from_kernel(view: StateView, config: Any, pids: Sequence[int]) -> Optional[Cause]:
    events = [e for e in kernel_events_for_pids(view, pids) if e.category in ("oom", "crash")]
    if not events:
        events = list(kernel_events_for_pids(view, pids))
    if not events:
        return None
    ev = events[-1]
    return Cause("kernel", f"{ev.title} (kernel log): {ev.text[:200]}",
                 _clean(view, config, [e.text for e in events]), "kernel log")


def _from_log_rules(view: StateView, config: Any, rank: Optional[str], job: Optional[str],
                    generic: bool = False) -> Optional[Cause]:
    """The rank's gravest log match of an exact rule; with `generic`, of a generic vocabulary
    rule instead (asked last: a rank's last error lines say more than one line in a failure's
    shape, and include it)."""
    sample = view.latest(LOGS)
    active = sample.value.active if sample is not None else ()
    mine = [a for a in active if rank is not None and a.rank == rank and (job is None or a.job in (None, job))
            and a.generic == generic]
    if not mine:
        return None
    order = {c: i for i, c in enumerate(_FATAL_ORDER)}
    best = min(mine, key=lambda a: (a.role != "root", order.get(a.category, len(order)), -a.last_at))
    return Cause("log", f"{best.title} (its log): {best.summary[:200]}",
                 _clean(view, config, best.evidence), best.path)


def _last_lines(view: StateView) -> Tuple[Any, ...]:
    sample = view.latest(LOGS)
    return sample.value.last_lines if sample is not None else ()


def _from_launcher(view: StateView, config: Any, pids: Sequence[int], job: Optional[str]) -> Optional[Cause]:
    """The launcher's report of one of `pids`, read by the one parser of exit reports
    (watchdog.parse.exits), in its one wording: `killed (signal 9)`, never a guess at why."""
    wanted = set(pids)
    for ll in _last_lines(view):
        if job is not None and ll.job not in (None, job):
            continue
        for line in reversed(ll.lines + ll.errors):  # a report pushed out of the last lines is among the errors
            report = parse_exit(line)
            if report is None or report.pid not in wanted:
                continue
            return Cause("launcher", f"the launcher reports pid {report.pid} {report.status.words()}",
                         _clean(view, config, [line]), ll.path,
                         zh=f"启动器报告进程 {report.pid} {report.status.words('zh')}")
    return None


def errorish_tail(lines: Sequence[str]) -> List[str]:
    """The lines that look like errors among a file's last lines: from the last traceback to the
    end when there is one, else the error-looking lines (newest last)."""
    for i in range(len(lines) - 1, -1, -1):
        if _TRACEBACK.search(lines[i]):
            return list(lines[i:])
    return [x for x in lines if ERRORISH.search(x)]


def _from_last_lines(view: StateView, config: Any, rank: Optional[str], job: Optional[str]) -> Optional[Cause]:
    own = [ll for ll in _last_lines(view) if rank is not None and ll.rank == rank and ll.job in (None, job)
           or (job is not None and rank is None and ll.job == job)]
    best: Optional[Tuple[float, Any, List[str]]] = None
    for ll in own:
        errs = errorish_tail(ll.lines) or list(ll.errors)  # pushed out of the last lines by other writers
        if errs and (best is None or ll.at > best[0]):
            best = (ll.at, ll, errs)
    if best is None:
        return None
    _, ll, errs = best
    lines = _clean(view, config, errs)
    return Cause("last_lines", f"its last error lines: {lines[-1][:200]}", lines, ll.path)


Member = Tuple[int, Optional[Any]]  # pid, rank


def cause_of_death(view: StateView, config: Any, members: Iterable[Member],
                   job: Optional[str] = None) -> Optional[Cause]:
    """Why the processes `members` ((pid, rank) of one rank, or of every rank of a job) are gone,
    or None when nothing says. Each source is asked about every member before the next, less
    specific source is: a kernel kill of any rank explains a job's death before last lines do."""
    ms = [(p, None if r is None else str(r)) for p, r in members if isinstance(p, int)]
    pids = tuple(p for p, _ in ms)
    finders: List[Callable[[], Optional[Cause]]] = [lambda: _from_kernel(view, config, pids)]
    finders += [partial(_from_log_rules, view, config, r, job) for _, r in ms]
    finders.append(lambda: _from_launcher(view, config, pids, job))
    finders += [partial(_from_last_lines, view, config, r, job) for _, r in ms]
    if job is not None:
        finders.append(lambda: _from_last_lines(view, config, None, job))
    finders += [partial(_from_log_rules, view, config, r, job, True) for _, r in ms]
    for find in finders:
        got = find()
        if got is not None:
            return got
    return None


def with_cause(summary: str, cause: Optional[Cause]) -> str:
    """A finding's summary with the cause appended (one line)."""
    return summary if cause is None else f"{summary}: {cause.reason}"


#: The rules whose message says why (the vanished or stalled ranks' cause of death).
EXPLAINED = ("rank_missing", "job_gone", "stall")


def _members(finding: Any, view: StateView) -> List[Member]:
    sample = view.latest(PROCESS)
    if finding.rule == "rank_missing":
        pid = finding.labels.get("pid", "")
        return [(int(pid), finding.labels.get("rank"))] if pid.isdigit() else []
    procs = sample.value.gone + sample.value.processes if sample is not None else ()
    return [(p.pid, p.rank) for p in procs]


def explain(view: StateView, config: Any, finding: Any) -> Any:
    """`finding` (rank_missing, job_gone or stall) with its cause of death in the summary, the
    details (`cause`, which the snapshot's manifest carries) and the evidence lines; unchanged
    when nothing knows why."""
    from dataclasses import replace

    if finding.rule not in EXPLAINED:
        return finding
    sample = view.latest(PROCESS)
    discovered = sample is not None and sample.value.discovered
    job = finding.labels.get(JOB_LABEL) if discovered else None
    cause = cause_of_death(view, config, _members(finding, view), job)
    if cause is None:
        return finding
    return replace(finding, summary=with_cause(finding.summary, cause),
                   details={**finding.details, "cause": cause.to_dict()},
                   evidence=tuple(finding.evidence) + cause.lines)
