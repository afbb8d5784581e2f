"""Rendering, recording and comparing doctor reports."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Tuple

from watchdog import __version__
from watchdog.doctor.model import FAIL, PASS, SKIPPED, WARN, Report
from watchdog.service.statefiles import atomic_file

RECORD_NAME = "environment.json"
RECORD_FORMAT = 1
_MARK = {PASS: "PASS", WARN: "WARN", FAIL: "FAIL", SKIPPED: "SKIP"}


def to_dict(report: Report) -> Dict[str, Any]:
    return {
        "format": RECORD_FORMAT,
        "tool": f"npu-watchdog {__version__}",
        "host": report.host,
        "timestamp": report.timestamp,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(report.timestamp)),
        "summary": report.counts(),
        "versions": report.versions,
        "cards": report.cards,
        "environment_source": report.environment_source,
        "environment": report.environment,
        "checks": [c.to_dict() for c in report.checks],
    }


def render_json(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, ensure_ascii=False, sort_keys=False)


def render_table(report: Report) -> str:
    """One line per check: status, id, reason; advice indented below non-passing ones."""
    rows = [(_MARK[c.status], c.id, c.reason, c.advice) for c in report.checks]
    width = max([len(r[1]) for r in rows] + [5])
    lines = [f"npu-watchdog doctor on {report.host}  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(report.timestamp))}",
             ""]
    group = None
    for c, (mark, cid, reason, advice) in zip(report.checks, rows):
        if c.group != group:
            if group is not None:
                lines.append("")
            group = c.group
        lines.append(f"  {mark:<4}  {cid:<{width}}  {reason}")
        if advice and c.status in (WARN, FAIL, SKIPPED):
            lines.append(f"  {'':<4}  {'':<{width}}  -> {advice}")
    counts = report.counts()
    lines.append("")
    lines.append(f"{counts[PASS]} pass, {counts[WARN]} warn, {counts[FAIL]} fail, {counts[SKIPPED]} skipped")
    return "\n".join(lines) + "\n"


def write_record(report: Report, directory: str) -> str:
    """Write `environment.json` into `directory` (created 0700 if missing); the file is 0600 and
    replaced atomically, so a record next to a checkpoint is never half-written."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, RECORD_NAME)
    with atomic_file(path, tmp=f"{path}.tmp.{os.getpid()}") as fh:
        fh.write((render_json(report) + "\n").encode("utf-8"))
    return path


class RecordError(Exception):
    """A record file that cannot be read or is not a doctor record."""


def load_record(path: str) -> Dict[str, Any]:
    if os.path.isdir(path):
        path = os.path.join(path, RECORD_NAME)
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    except OSError as exc:
        raise RecordError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise RecordError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or "checks" not in data or "versions" not in data:
        raise RecordError(f"{path}: not an npu-watchdog doctor record")
    return data


def _card_key(card: Dict[str, Any]) -> str:
    return f"NPU {card.get('npu')} chip {card.get('chip')}"


def compare_records(a: Dict[str, Any], b: Dict[str, Any]) -> List[Tuple[str, str, Any, Any]]:
    """(section, key, before, after) for everything that differs between two records."""
    diffs: List[Tuple[str, str, Any, Any]] = []
    if a.get("host") != b.get("host"):
        diffs.append(("node", "host", a.get("host"), b.get("host")))

    def mapping(section: str, before: Dict[str, Any], after: Dict[str, Any]) -> None:
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                diffs.append((section, key, before.get(key), after.get(key)))

    mapping("versions", a.get("versions") or {}, b.get("versions") or {})
    mapping("environment", a.get("environment") or {}, b.get("environment") or {})
    ca = {_card_key(c): c for c in a.get("cards") or []}
    cb = {_card_key(c): c for c in b.get("cards") or []}
    for key in sorted(set(ca) | set(cb)):
        x, y = ca.get(key), cb.get(key)
        if x is None or y is None:
            diffs.append(("cards", key, "present" if x else "absent", "present" if y else "absent"))
            continue
        for field in ("name", "health", "bus_id", "hbm_total_mb", "memory_total_mb"):
            if x.get(field) != y.get(field):
                diffs.append(("cards", f"{key} {field}", x.get(field), y.get(field)))
    sa = {c["id"]: c for c in a.get("checks") or [] if isinstance(c, dict) and "id" in c}
    sb = {c["id"]: c for c in b.get("checks") or [] if isinstance(c, dict) and "id" in c}
    for cid in sorted(set(sa) | set(sb)):
        x, y = sa.get(cid), sb.get(cid)
        xs, ys = (x or {}).get("status", "absent"), (y or {}).get("status", "absent")
        if xs != ys:
            diffs.append(("checks", cid, xs, ys))
    return diffs


def render_compare(a_name: str, a: Dict[str, Any], b_name: str, b: Dict[str, Any]) -> str:
    diffs = compare_records(a, b)
    head = [f"A: {a_name}  ({a.get('host')}, {a.get('time', a.get('timestamp'))})",
            f"B: {b_name}  ({b.get('host')}, {b.get('time', b.get('timestamp'))})", ""]
    if not diffs:
        return "\n".join(head + ["no differences in versions, cards, key environment or check results"]) + "\n"
    width = max(len(f"{s}.{k}") for s, k, _x, _y in diffs)
    lines = [f"  {s + '.' + k:<{width}}  {_show(x)}  ->  {_show(y)}" for s, k, x, y in diffs]
    return "\n".join(head + lines + ["", f"{len(diffs)} difference(s)"]) + "\n"


def _show(v: Any) -> str:
    return "(unset)" if v is None else str(v)
