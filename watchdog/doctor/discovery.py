"""Doctor's view of discovery: which jobs the daemon would watch on this node right now."""

from __future__ import annotations

from typing import Any, Optional

from watchdog.doctor.model import FAIL, PASS, SKIPPED, WARN, CheckResult
from watchdog.host.procevents import ProcExits
from watchdog.discovery.feed import scan_options
from watchdog.discovery.scan import discover
from watchdog.discovery.status import summary_lines


def check_discovery(config: Any, npu_obs: Optional[Any]) -> CheckResult:
    feeds = config.feeds
    if not config.discovery.enabled:
        return CheckResult("daemon", "discovery", SKIPPED, "discovery is off (probes use their explicit settings)",
                           details={"feeds": feeds})
    npu_by_pid = {p.pid: p.npu for p in npu_obs.processes} if npu_obs is not None else {}
    try:
        found = discover(scan_options(config), npu_by_pid)
    except Exception as exc:
        return CheckResult("daemon", "discovery", FAIL, f"discovery cannot scan the process table: {exc}",
                           "the daemon needs to read /proc (run it as root or as the job's user)")
    jobs = found.to_json()["jobs"]
    lines = summary_lines({"enabled": True, "jobs": jobs})
    reason = "; ".join(lines) + f" ({found.processes_scanned} processes scanned in {found.duration_seconds * 1000:.0f} ms)"
    advice = ""
    if found.unreadable:
        advice = (f"{found.unreadable} processes' environments were unreadable (other users'): run the daemon "
                  "as root to discover jobs of every user")
    return CheckResult("daemon", "discovery", PASS, reason, advice, details={"jobs": jobs, "feeds": feeds})


def check_exit_statuses(config: Any) -> CheckResult:
    """Where the daemon learns how a rank or launcher ended: the kernel's process events (root),
    or only /proc and the launchers' lines (a quiet launcher's job then ends as `status_unknown`:
    a warning that no exit status says whether it finished or crashed)."""
    if not config.discovery.enabled:
        return CheckResult("daemon", "exit statuses", SKIPPED, "discovery is off (no job ends are judged)")
    events = ProcExits.start()
    try:
        if events.unavailable is None and events.unfiltered is not None:
            return CheckResult("daemon", "exit statuses", WARN,
                               "exit statuses come from the kernel's process events, but the kernel-side filter "
                               f"could not be installed ({events.unfiltered}): every fork and exit on the host "
                               "wakes the daemon", "check that socket filters (CONFIG_BPF) are allowed here")
        if events.unavailable is None:
            return CheckResult("daemon", "exit statuses", PASS,
                               "exit statuses of every rank and launcher come from the kernel's process events")
        return CheckResult("daemon", "exit statuses", WARN, events.unavailable,
                           "run the daemon as root (CAP_NET_ADMIN) so that a rank exiting non-zero without a "
                           "word, under a launcher that reports nothing, is paged as a failure, and a job whose "
                           "ranks all exit 0 ends cleanly (without it, such an end is a warning: exit status "
                           "unknown)")
    finally:
        events.close()
