"""`npu-watchdog silence add|list|remove` and `npu-watchdog test-alert`.

Silences are rows in the alerting database of the state directory; the running daemon notices a
change within a second while an alert fires (SQLite's data_version), so no reload is needed. `test-alert` renders a clearly marked message and sends it
through each channel's real code path (rendering, signing, HTTP, verdict), synchronously.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import List, Optional

from watchdog.commands import add_config_arg, config_or_defaults, load_config_or_report, log_for


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("silence", help="mute alerts matching labels for a while (add, list, remove)")
    ssub = p.add_subparsers(dest="silence_cmd", metavar="ACTION")
    a = ssub.add_parser("add", help="add a silence")
    add_config_arg(a)
    a.add_argument("--state-dir", help="override paths.state_dir")
    a.add_argument("--match", "-m", action="append", required=True, metavar="LABEL=VALUE",
                   help="label matcher (repeatable; all must match): rule=stall, training_job=X, rank!=0, npu=~0|1")
    a.add_argument("--for", dest="duration", default="2h", help="how long (default 2h), e.g. 30m, 2h, 1d")
    a.add_argument("--comment", default="", help="why (shown in `silence list`)")
    a.add_argument("--author", default=None, help="who (default: the current user)")
    a.set_defaults(func=silence_add)
    ls = ssub.add_parser("list", help="list silences")
    add_config_arg(ls)
    ls.add_argument("--state-dir", help="override paths.state_dir")
    ls.add_argument("--all", action="store_true", help="include expired silences")
    ls.add_argument("--json", action="store_true", help="print a JSON array (times as RFC 3339 UTC and epoch)")
    ls.set_defaults(func=silence_list)
    rm = ssub.add_parser("remove", help="remove a silence (alerts it muted are sent at once)")
    add_config_arg(rm)
    rm.add_argument("--state-dir", help="override paths.state_dir")
    rm.add_argument("id", help="silence id (or a unique prefix)")
    rm.set_defaults(func=silence_remove)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])

    t = sub.add_parser("test-alert", help="send a test message to the configured channels and show the answers")
    add_config_arg(t)
    t.add_argument("--channel", action="append", help="only this channel (repeatable; default: all)")
    t.add_argument("--severity", choices=("info", "warning", "critical"), default="warning")
    t.add_argument("--json", action="store_true", help="print one JSON object per channel in an array")
    t.set_defaults(func=test_alert)


def _state_dir(args: argparse.Namespace) -> Optional[str]:
    if getattr(args, "state_dir", None):
        return args.state_dir
    config = config_or_defaults(args.config)
    return config.paths.state_dir if config is not None else None


def _store(args: argparse.Namespace):
    import sqlite3

    from watchdog.alerting.deliver.store import AlertStore

    state_dir = _state_dir(args)
    if state_dir is None:
        return None
    try:
        return AlertStore(state_dir)
    except OSError as exc:
        print(f"npu-watchdog: cannot open the alert state in {state_dir}: {exc.strerror or exc}", file=sys.stderr)
        return None
    except sqlite3.DatabaseError as exc:
        # The daemon sets a damaged file aside at its next start; commands never move it.
        print(f"npu-watchdog: the alert state in {state_dir} is damaged ({exc}); restart the daemon "
              "to set it aside and start fresh", file=sys.stderr)
        return None


def silence_add(args: argparse.Namespace) -> int:
    from watchdog.config.sections.alerting import parse_matcher
    from watchdog.config.types import format_duration, parse_duration

    try:
        matchers = [str(parse_matcher(m)) for m in args.match]
        seconds = parse_duration(args.duration)
    except ValueError as exc:
        print(f"npu-watchdog silence add: {exc}", file=sys.stderr)
        return 2
    if seconds <= 0:
        print("npu-watchdog silence add: --for must be positive", file=sys.stderr)
        return 2
    store = _store(args)
    if store is None:
        return 2
    now = time.time()
    import getpass  # lazily: keeps `npu-watchdog --help` fast

    author = args.author or getpass.getuser()
    s = store.add_silence(matchers, now, now + seconds, author, args.comment)
    store.close()
    print(f"silence {s.id} added: {' '.join(matchers)} for {format_duration(seconds)} "
          f"(until {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(s.ends_at))})")
    return 0


def silence_list(args: argparse.Namespace) -> int:
    import os

    state_dir = _state_dir(args)
    if state_dir is None:
        return 2
    if not os.path.isdir(state_dir):  # listing never creates the daemon's state folder
        print(f"npu-watchdog: no alert state in {state_dir}: no daemon has run with this state folder "
              "(is the daemon running? -c FILE names its config, --state-dir its folder)", file=sys.stderr)
        if getattr(args, "json", False):
            print("[]")  # no state folder, no silence: a script reading the list gets an empty one
        return 1
    store = _store(args)
    if store is None:
        return 2
    now = time.time()
    rows = [s for s in store.silences() if args.all or s.ends_at > now]
    store.close()
    if getattr(args, "json", False):
        print(json.dumps([silence_json(s, now) for s in rows], indent=1, ensure_ascii=False))
        return 0
    if not rows:
        print("no silences")
        return 0
    print(f"{'ID':<12}  {'STATE':<8}  {'ENDS (UTC)':<19}  {'BY':<10}  MATCHERS / COMMENT")
    for s in rows:
        state = _state(s, now)
        ends = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s.ends_at))
        print(f"{s.id:<12}  {state:<8}  {ends:<19}  {s.created_by[:10]:<10}  {' '.join(s.matchers)}"
              + (f"  # {s.comment}" if s.comment else ""))
    return 0


def _state(s, now: float) -> str:
    return "active" if s.active(now) else ("expired" if s.ends_at <= now else "pending")


def _rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def silence_json(s, now: float) -> dict:
    """One silence for scripts: stable keys, times both as RFC 3339 (UTC) and epoch seconds."""
    return {"id": s.id, "state": _state(s, now), "matchers": list(s.matchers),
            "starts_at": _rfc3339(s.starts_at), "ends_at": _rfc3339(s.ends_at),
            "starts_at_epoch": s.starts_at, "ends_at_epoch": s.ends_at,
            "created_by": s.created_by, "comment": s.comment}


def silence_remove(args: argparse.Namespace) -> int:
    store = _store(args)
    if store is None:
        return 2
    ok = store.remove_silence(args.id)
    store.close()
    if not ok:
        print(f"npu-watchdog silence remove: no single silence with id {args.id!r}", file=sys.stderr)
        return 1
    print(f"silence {args.id} removed")
    return 0


def test_body(config, severity: str) -> dict:
    """A message that looks like a real alert and says clearly that it is a test."""
    now = time.time()
    labels = dict(config.base_labels)
    import hashlib

    ikey = "test-" + hashlib.sha256(f"{now}".encode()).hexdigest()[:14]
    return {
        "kind": "test", "status": "firing", "ikey": ikey, "created": now, "group": dict(labels),
        "alerts": [{
            "fp": "test", "rule": "test_alert", "severity": severity, "status": "firing",
            "summary": "TEST message from npu-watchdog: this channel works. No action needed.",
            "labels": labels, "hint": "Sent by `npu-watchdog test-alert`.", "value": None,
            "since": now, "starts_at": now, "ends_at": None, "evidence": [], "snapshot": None, "dashboard": None,
        }],
    }


def test_alert(args: argparse.Namespace) -> int:
    from watchdog.alerting.deliver.channels import build_channels
    from watchdog.core.findings import SEVERITY_RANK

    config = load_config_or_report(args.config)
    if config is None:
        return 2
    log_for(config, "warning", "text")  # a library's warning quoting the URL is redacted
    from watchdog.config.placeholders import secret_text, why_placeholder

    # A placeholder URL is not tried: its answer ("will retry") would hide what is wrong.
    placeholder = {c.name: why for c in config.alerting.channels
                   for why in [why_placeholder(secret_text(c.url) or "")] if why}
    channels = build_channels(config.alerting)
    if not channels:
        print("no channels configured (alerting.channels)", file=sys.stderr)
        return 1
    wanted: List[str] = args.channel or list(channels)
    unknown = [n for n in wanted if n not in channels]
    if unknown:
        print(f"unknown channel(s): {', '.join(unknown)} (configured: {', '.join(channels)})", file=sys.stderr)
        return 2
    body = test_body(config, args.severity)
    failed = 0
    results = []
    for name in wanted:
        ch = channels[name]
        if not args.channel and SEVERITY_RANK[args.severity] < SEVERITY_RANK[ch.cfg.min_severity]:
            results.append({"channel": name, "type": ch.type, "result": "skipped",
                            "detail": f"{args.severity} is below its min_severity {ch.cfg.min_severity}"})
            if not args.json:
                print(f"{name} ({ch.type}): skipped, {results[-1]['detail']}")
            continue
        if name in placeholder:
            failed += 1
            detail = f"not sent: the URL is a placeholder ({placeholder[name]}); set the real URL"
            results.append({"channel": name, "type": ch.type, "result": "failed", "http_status": None,
                            "retryable": False, "detail": detail})
            if not args.json:
                print(f"{name} ({ch.type}): {detail}")
            continue
        v = ch.deliver(body)
        failed += 0 if v.ok else 1
        # v.detail is scrubbed of the channel's secrets by deliver()
        results.append({"channel": name, "type": ch.type, "result": "delivered" if v.ok else "failed",
                        "http_status": v.status, "retryable": None if v.ok else v.retryable, "detail": v.detail})
        if not args.json:
            print(f"{name} ({ch.type}): {v.line()}")
    if args.json:
        print(json.dumps(results, indent=1, ensure_ascii=False))
    return 1 if failed else 0
