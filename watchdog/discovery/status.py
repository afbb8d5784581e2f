"""What discovery shows in `/api/status`, on the landing page and in `doctor`."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


def discovery_status(config: Any, feed: Any) -> Dict[str, Any]:
    """{"enabled", "feeds", "jobs" (the `discover --json` schema), "scanned_at", ...}."""
    found = feed.latest() if feed is not None else None
    return {
        "enabled": bool(config.discovery.enabled),
        "feeds": config.feeds,
        "jobs": found.to_json()["jobs"] if found is not None else [],
        "scanned_at": found.at if found is not None else None,
        "scan_duration_seconds": found.duration_seconds if found is not None else None,
        "processes_scanned": found.processes_scanned if found is not None else None,
    }


def summary_lines(status: Optional[Dict[str, Any]]) -> List[str]:
    """One line per job, e.g. `llama-20261130-101500: 8 ranks (pids 101-108), NPUs 0-7, 8 logs`."""
    if not status or not status.get("enabled"):
        return ["discovery is off"]
    jobs = status.get("jobs") or []
    if not jobs:
        return ["no training job discovered on this node"]
    out = []
    for j in jobs:
        ranks = j["ranks"]
        npus = sorted({r["npu"] for r in ranks if r["npu"] is not None})
        logs = sum(len(r["logs"]) for r in ranks)
        launcher = f", launcher pid {j['launcher']['pid']}" if j.get("launcher") else ""
        pids = ", ".join(f"{r['rank']}:{r['pid']}" for r in ranks)
        out.append(f"{j['name']}: {len(ranks)} ranks (rank:pid {pids}){launcher}, "
                   f"NPUs {', '.join(map(str, npus)) or 'unknown'}, {logs} log files")
    return out
