"""`npu-watchdog status`: ask the running daemon (its /api/status) what each probe saw."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, Optional

from watchdog.commands import add_config_arg, config_or_defaults
from watchdog.core.findings import JOB_LABEL, LEGACY_JOB_LABEL


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("status", help="show the running daemon's probes and findings")
    add_config_arg(p)
    p.add_argument("--url", help="daemon base URL (default: from the config's http.listen)")
    p.add_argument("--json", action="store_true", help="print the raw status JSON")
    p.set_defaults(func=main)


def _ago(ts: Optional[float], now: float) -> str:
    if not ts:
        return "never"
    d = now - ts
    return f"{d:.0f}s ago" if d >= 0 else f"in {-d:.0f}s"


def main(args: argparse.Namespace) -> int:
    url = args.url
    if not url:
        config = config_or_defaults(args.config)
        if config is None:
            return 2
        host = config.http.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        url = f"http://{host}:{config.http.port}"
    import urllib.error  # not at module level: every `npu-watchdog --help` would pay for it
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api/status", timeout=5) as resp:
            data: Dict[str, Any] = json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"npu-watchdog: cannot reach the daemon at {url}: {reason}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    now = time.time()
    job = data.get(JOB_LABEL, data.get(LEGACY_JOB_LABEL, ""))  # an older daemon says `job`
    print(f"npu-watchdog {data['version']} pid {data['pid']} host {data['host']} job {job}")
    for p in data["probes"]:
        state = "up  " if p["up"] else "DOWN"
        what = p["last_result"] if p["up"] else p["last_error"]
        print(f"  {state} {p['name']:<22} last {_ago(p['last_run'], now):<10} next {_ago(p['next_run'], now):<8} {what or ''}")
    for row in data.get("pace", ()):
        print("  " + _pace_line(row))
    print(f"findings in force: {len(data['findings'])}")
    for f in data["findings"]:
        print(f"  [{f['severity']}] {f['rule']}: {f['summary']}")
    return 0


def _pace_line(row: Dict[str, Any]) -> str:
    """`job llama: 1.02 s/step (baseline 1.00 s), goodput 97.1 %, stalled 2m10s`."""
    parts = [f"job {row.get(JOB_LABEL, '')}:"]
    if row.get("step_seconds") is not None:
        base = row.get("baseline_step_seconds")
        parts.append(f"{row['step_seconds']:.3g} s/step" + (f" (baseline {base:.3g} s)" if base else " (no baseline yet)"))
    if row.get("goodput_ratio") is not None:
        parts.append(f"goodput {row['goodput_ratio'] * 100:.1f} %")
    lost = {k: v for k, v in (row.get("seconds") or {}).items() if k != "train" and v >= 1}
    if lost:
        parts.append(", ".join(f"{k} {int(v)}s" for k, v in sorted(lost.items())))
    return " ".join(parts[:2]) + (", " + ", ".join(parts[2:]) if len(parts) > 2 else "")
