"""`npu-watchdog scan FILE...`: triage a dead job's logs offline with the daemon's rules.

The same rule set, matcher and extractor as the `logs` probe, fed the files from their first byte
in the same slices, so a line is reported exactly where the daemon would raise a finding (with
thresholds counted on the lines' own timestamps). Prints a timeline, root causes before their
cascades, or JSON with `--json`. Exit 0: nothing found; 1: something found; 2: usage/file error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from watchdog.logrules import SHIPPED_PACKS

if TYPE_CHECKING:
    from watchdog.logrules.extract import Extractor

SLICE = 8 << 20
#: Slices whose bulk stage may run ahead of the one being consumed, and the threads running it.
AHEAD = 2
WORKERS = 2
#: Events of one rule listed in the timeline; later ones are counted (see `Kept`).
KEEP_PER_RULE = 200
#: Lines of one rule shown in a section of the timeline; the rest of them are one line saying how
#: many and up to where (a NaN on every iteration is one root cause, not a hundred).
SHOW_PER_RULE = 3
CATEGORY_ORDER = ("oom", "device", "crash", "nan", "hccl", "traceback", "custom")
HEADINGS = {"oom": "first OOM", "device": "first device fault", "crash": "first native crash",
            "nan": "first NaN/overflow",
            "hccl": "first HCCL error", "traceback": "first traceback", "custom": "first custom match"}


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("scan", help="apply the log rules to log files offline (timeline or --json)",
                       description="Scan training/plog log files with the shipped (and configured) log rules.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--rules", default=",".join(SHIPPED_PACKS),
                   help=f"comma-separated rule packs (default: {','.join(SHIPPED_PACKS)})")
    p.add_argument("--json", action="store_true", help="print events as JSON")
    p.add_argument("--report", action="store_true",
                   help="FILEs (or folders of *.log) are annotated samples (`  ##> EXPECT` per line): "
                        "print precision/recall per category instead of events (and, for one folder whose "
                        "SOURCES.md lists blocks `file.log:START-END`, the failure reports caught)")
    p.add_argument("--count", action="store_true",
                   help="print only the number of lines on which any rule matches, before thresholds "
                        "(what `grep -c` with the same patterns prints)")
    p.add_argument("-c", "--config", default=None,
                   help="also apply the user rules and `disable` list of this config's probes.logs")
    p.add_argument("--engine", choices=("auto", "re2", "re"), default="auto", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _err(msg: str) -> int:
    print(f"npu-watchdog scan: {msg}", file=sys.stderr)
    return 2


def scan_file(path: str, extractor: "Extractor", sink: Optional[Callable[[Dict[str, Any]], None]] = None
              ) -> List[Dict[str, Any]]:
    """Events of one file, in line order (raises OSError): returned as a list, or handed one by
    one to `sink` (then the list stays empty: memory does not grow with the matches).

    Slices are read in order; each slice's bulk stage (`Extractor.prepare`: one RE2 pass over its
    bytes, which releases the GIL) runs in a worker thread up to AHEAD slices in advance while the
    main thread consumes the previous ones in order (line numbers, rules, thresholds). On a
    machine with a free core the read, the newline counting and the matching overlap; on a busy
    one it costs what a serial scan costs. The result is the same either way. The file is read up
    to the size it had when the scan began (a file still growing does not keep the scan going).
    """
    out: List[Dict[str, Any]] = []
    take = sink or out.append
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    from watchdog.logrules.extract import StreamState

    st = StreamState(line_no=0)
    pending: "deque[Any]" = deque()

    def emit(raws: Sequence[Any]) -> None:
        for ev in _events(path, raws):
            take(ev)

    with open(path, "rb") as fh, ThreadPoolExecutor(max_workers=WORKERS) as pool:
        fd, offset = fh.fileno(), 0
        size = os.fstat(fd).st_size
        while offset < size:
            # Each slice ends after its last complete line; the partial line is read again with
            # the next slice (no copy of the slice, no concatenation).
            data = os.pread(fd, min(SLICE, size - offset), offset)
            if not data:
                break  # truncated meanwhile
            nl = data.rfind(b"\n")
            cut = nl + 1 if nl >= 0 and len(data) == SLICE else len(data)
            pending.append(pool.submit(extractor.prepare, data, cut))
            offset += cut
            while len(pending) > AHEAD:
                emit(extractor.consume(st, pending.popleft().result(), None))
        while pending:
            emit(extractor.consume(st, pending.popleft().result(), None))
        if st.tb is not None:  # a traceback cut off by the end of the file
            closing: list = []
            extractor._close_tb(st, closing, None)
            emit(closing)
    return out


class Kept:
    """What the timeline shows, bounded: every category's first event and at most KEEP_PER_RULE
    events of each rule (the rest counted), so a log with a NaN on every line costs memory per
    rule, not per line."""

    def __init__(self) -> None:
        self.events: List[Dict[str, Any]] = []
        self.per_rule: Dict[str, int] = {}
        self.first: Dict[str, Dict[str, Any]] = {}
        self.total = 0

    def add(self, ev: Dict[str, Any]) -> None:
        self.total += 1
        n = self.per_rule.get(ev["rule"], 0)
        self.per_rule[ev["rule"]] = n + 1
        if n < KEEP_PER_RULE:
            self.events.append(ev)
        cur = self.first.get(ev["category"])
        if cur is None or _order_key(ev) < _order_key(cur):
            self.first[ev["category"]] = ev


def _events(path: str, raws: Sequence[Any]) -> List[Dict[str, Any]]:
    return [{"file": path, "line": r.line_no, "rule": r.rule.id, "category": r.rule.category,
             "severity": r.rule.severity, "role": r.rule.role, "text": r.text, "_time": r.line_time}
            for r in raws]


def run(args: argparse.Namespace) -> int:
    packs = [p.strip() for p in args.rules.split(",") if p.strip()]
    unknown = [p for p in packs if p not in SHIPPED_PACKS]
    if unknown:
        return _err(f"--rules: unknown pack(s) {', '.join(unknown)} (known: {', '.join(SHIPPED_PACKS)})")
    from watchdog.logrules.model import RuleError, build_ruleset

    user_rules: List[Dict[str, Any]] = []
    disable: List[str] = []
    if args.config:
        from watchdog.config import ConfigError, load_config
        try:
            cfg = load_config(args.config)
        except ConfigError as exc:
            return _err(exc.render())
        user_rules = [r.as_rule_data() for r in cfg.probes.logs.rules]
        disable = list(cfg.probes.logs.disable)
    try:
        rules = build_ruleset(packs, disable, user_rules)
    except RuleError as exc:
        return _err(str(exc))
    if args.report:
        return _report(args.files, rules, args.engine)
    from watchdog.logrules.extract import Extractor
    from watchdog.logrules.matcher import Matcher

    extractor = Extractor(Matcher(rules, engine=args.engine))
    for path in args.files:
        if not os.path.exists(path):
            return _err(f"{path}: no such file")
        if not os.path.isfile(path):
            return _err(f"{path}: not a regular file (a folder, FIFO or device): save the log to a file first")
    if args.json:
        return _json(args.files, extractor)
    kept = Kept()
    sink = (lambda ev: None) if args.count else kept.add
    for path in args.files:
        try:
            scan_file(path, extractor, sink)
        except OSError as exc:
            return _err(f"{path}: {exc.strerror or exc}")
    if args.count:
        print(extractor.matched_lines)
        return 1 if extractor.matched_lines else 0
    print(render_timeline(kept.events, kept.first, kept.total, kept.per_rule))
    return 1 if kept.total else 0


def _json(paths: Sequence[str], extractor: "Extractor") -> int:
    """Events streamed as they are found (`{"events": [...], "first": {...}}`), so memory does
    not grow with them; `first` is each category's earliest event."""
    first: Dict[str, Dict[str, Any]] = {}
    clean = lambda e: {k: v for k, v in e.items() if not k.startswith("_")}  # noqa: E731
    out, n = sys.stdout, 0

    def sink(ev: Dict[str, Any]) -> None:
        nonlocal n
        out.write(("[" if n == 0 else ", ") + json.dumps(clean(ev), ensure_ascii=False))
        n += 1
        cur = first.get(ev["category"])
        if cur is None or _order_key(ev) < _order_key(cur):
            first[ev["category"]] = ev

    out.write('{"events": ')
    for path in paths:
        try:
            scan_file(path, extractor, sink)
        except OSError as exc:
            out.write("[]" if n == 0 else "]")
            out.write("}\n")
            return _err(f"{path}: {exc.strerror or exc}")
    out.write("[]" if n == 0 else "]")
    out.write(', "first": ' + json.dumps({k: clean(v) for k, v in first.items()}, ensure_ascii=False) + "}\n")
    return 1 if n else 0


def _report(paths: Sequence[str], rules: Sequence[Any], engine: str) -> int:
    """Score the rules over annotated samples; exit 1 when any silent line raised an alarm."""
    from pathlib import Path

    from watchdog.logrules import corpus
    files: List[Path] = []
    ranges: List[Tuple[str, int, int]] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(sorted(path.glob("*.log")))
            # Blocks are named by file name alone: scored for one folder at a time.
            ranges = _ranges_beside(path) if len(paths) == 1 else []
        elif path.is_file():
            files.append(path)
        else:
            return _err(f"{p}: no such file or folder")
    try:
        rep = corpus.score(corpus.load(files), rules, "re2" if engine == "re2" else "re")
    except (corpus.AnnotationError, OSError, UnicodeDecodeError) as exc:
        return _err(str(exc))
    print(corpus.render(rep, CATEGORY_ORDER, ranges))
    return 1 if rep.false_alarms else 0


def _ranges_beside(folder: Any) -> List[Tuple[str, int, int]]:
    """The failure reports a folder's SOURCES.md lists (`file.log:START-END`), if it has one."""
    from watchdog.logrules import corpus
    try:
        return corpus.report_ranges((folder / "SOURCES.md").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []


def _order_key(e: Dict[str, Any]) -> tuple:
    """Time order where lines carry timestamps, else file order; roots before cascades on ties."""
    t = e["_time"]
    return (t if t is not None else float("inf"), e["role"] != "root")


def _ordered(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return sorted(events, key=_order_key)


def _section(group: List[Dict[str, Any]], unkept: Dict[str, int]) -> List[str]:
    """One section's lines: each rule's first SHOW_PER_RULE events in order, then one line per
    rule for the rest (those held here and those not kept at all)."""
    shown: Dict[str, int] = {}
    rest: Dict[str, List[Dict[str, Any]]] = {}
    out = []
    for e in group:
        if shown.get(e["rule"], 0) < SHOW_PER_RULE:
            shown[e["rule"]] = shown.get(e["rule"], 0) + 1
            out.append(f"  {e['file']}:{e['line']}  {e['severity']:<8} {e['rule']}: {e['text']}")
        else:
            rest.setdefault(e["rule"], []).append(e)
    for rule in sorted(set(rest) | {r for r in unkept if r in shown}):
        held = rest.get(rule, [])
        n = len(held) + unkept.get(rule, 0)
        where = f", the last listed at {held[-1]['file']}:{held[-1]['line']}" if held else ""
        out.append(f"  ... {n} more {rule} line{'s' if n != 1 else ''}{where}")
    return out


def render_timeline(events: List[Dict[str, Any]], first: Dict[str, Dict[str, Any]], total: Optional[int] = None,
                    per_rule: Optional[Dict[str, int]] = None) -> str:
    """The summary, then root causes and cascades; `total`/`per_rule` count events not listed."""
    total = len(events) if total is None else total
    if not events:
        return "no failure signatures found"
    lines: List[str] = ["Summary:"]
    for cat in CATEGORY_ORDER:
        if cat in first:
            e = first[cat]
            lines.append(f"  {HEADINGS[cat]:<20} {e['file']}:{e['line']}  [{e['rule']}] {e['text']}")
    tbs = [e for e in events if e["category"] == "traceback"]
    if tbs:
        e = tbs[-1]
        lines.append(f"  {'last traceback':<20} {e['file']}:{e['line']}  {e['text']}")
    ordered = _ordered(events)
    roots = [e for e in ordered if e["role"] == "root"]
    cascades = [e for e in ordered if e["role"] == "cascade"]
    unkept = {r: n - KEEP_PER_RULE for r, n in (per_rule or {}).items() if n > KEEP_PER_RULE}
    for title, group in (("Root causes", roots), ("Cascades (symptoms of the above, if any)", cascades)):
        if group:
            lines.append("")
            lines.append(f"{title}:")
            lines.extend(_section(group, unkept))
    lines.append("")
    if total == len(events):
        lines.append(f"{len(events)} events ({len(roots)} root, {len(cascades)} cascade)")
    else:
        lines.append(f"{total} events ({len(events)} listed: {len(roots)} root, {len(cascades)} cascade)")
    return "\n".join(lines)
