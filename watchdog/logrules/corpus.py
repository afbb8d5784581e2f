"""Annotated sample logs: what each line must raise, and precision/recall of the rules over them.

Why it exists: rules are only as good as the real lines they were checked against. A sample file
carries, at the end of every line, the expected result (`  ##> EXPECT`), so one corpus serves the
test suite (exact agreement, both engines) and `npu-watchdog scan --report` (a per-category
table for the docs). EXPECT is a comma-separated list of:

- `rule_id`   this line must raise that rule (after thresholds; a traceback on its first line);
- `-`         nothing may fire here (a continuation line of a block, or ordinary output);
- `~rule_id`  a near miss of that rule: it looks like its failure but must stay silent;
- `?category` a real failure line of that category which no shipped rule reports (a known miss,
  counted against recall, never expected to fire).

Pure: parsing and scoring take text and events, no files are opened here except by `load`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from watchdog.core.verdict import DOMAINS, verdict_of_rule
from watchdog.logrules.extract import Extractor, RawEvent, StreamState
from watchdog.logrules.matcher import Matcher
from watchdog.logrules.model import Rule

MARK = re.compile(r"  ##> (\S+)$")
#: Categories a `?` annotation may name besides the rule categories: failures of no shipped kind.
OTHER = "other"


class AnnotationError(ValueError):
    """A sample line without a valid `  ##> EXPECT` marker (names file and line)."""


@dataclass(frozen=True)
class Expectation:
    rules: frozenset = frozenset()
    near: frozenset = frozenset()
    missed: frozenset = frozenset()


@dataclass
class Sample:
    name: str
    data: bytes
    expect: Dict[int, Expectation]


def parse_annotated(text: str, name: str = "<sample>") -> Sample:
    """Split annotated text into the bytes the rules see and the expectation per line number."""
    lines: List[str] = []
    expect: Dict[int, Expectation] = {}
    for no, line in enumerate(text.splitlines(), 1):
        m = MARK.search(line)
        if not m:
            raise AnnotationError(f"{name}:{no}: every sample line needs a '  ##> rule|-|~rule|?category' marker")
        lines.append(line[:m.start()])
        rules, near, missed = set(), set(), set()
        for tok in m.group(1).split(","):
            if tok == "-":
                continue
            if tok.startswith("~"):
                near.add(tok[1:])
            elif tok.startswith("?"):
                missed.add(tok[1:])
            elif tok:
                rules.add(tok)
        expect[no] = Expectation(frozenset(rules), frozenset(near), frozenset(missed))
    return Sample(name, ("\n".join(lines) + "\n").encode("utf-8"), expect)


def load(paths: Iterable[Path]) -> List[Sample]:
    return [parse_annotated(Path(p).read_text(encoding="utf-8"), Path(p).name) for p in paths]


def run(sample: Sample, rules: Sequence[Rule], engine: str = "re", chunk_lines: int = 0) -> Dict[int, Set[str]]:
    """Rule ids raised per line number, feeding the whole file or slices of `chunk_lines`."""
    ex = Extractor(Matcher(rules, engine=engine))
    st = StreamState()
    blocks = [sample.data]
    if chunk_lines:
        parts = sample.data.splitlines(keepends=True)
        blocks = [b"".join(parts[i:i + chunk_lines]) for i in range(0, len(parts), chunk_lines)]
    got: Dict[int, Set[str]] = {}
    for block in blocks:
        for ev in ex.feed(st, block, None):
            got.setdefault(ev.line_no or 0, set()).add(ev.rule.id)
    closing: List[RawEvent] = []
    if st.tb is not None:  # a traceback cut off by the end of the sample, as `scan` closes it
        ex._close_tb(st, closing, None)
    for ev in closing:
        got.setdefault(ev.line_no or 0, set()).add(ev.rule.id)
    return got


@dataclass
class CategoryScore:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    near_lines: int = 0
    near_alarms: int = 0

    @property
    def precision(self) -> Optional[float]:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> Optional[float]:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


@dataclass
class Report:
    scores: Dict[str, CategoryScore] = field(default_factory=dict)
    files: int = 0
    lines: int = 0
    failure_lines: int = 0
    near_lines: int = 0
    silent_lines: int = 0
    false_alarms: int = 0
    #: Failure lines per verdict domain (watchdog.core.verdict) of the rule that reported them;
    #: a line no rule of its category reported is `unknown`.
    domains: Dict[str, int] = field(default_factory=dict)
    #: Failure lines missed in their category on which a rule of another category fired: the
    #: rules see the failure but file it under another kind than the annotation (a kill reported
    #: as a launcher's report, say). Counted as missed all the same.
    other_kind: int = 0
    #: Failure lines by (file name, line number), and those reported in their own category: what
    #: `reports_caught` reads to score whole failure reports (a block of lines) as well as lines.
    failing: Set[Tuple[str, int]] = field(default_factory=set)
    caught: Set[Tuple[str, int]] = field(default_factory=set)


#: A failure report's place in a sources file (the blind sets' SOURCES.md: `... lines accel_device.log:1-13`).
_RANGE = re.compile(r"([\w.-]{1,200}\.log):(\d{1,9})-(\d{1,9})")


def report_ranges(sources: str) -> List[Tuple[str, int, int]]:
    """The (file name, first line, last line) of every block a sources file lists."""
    return [(m.group(1), int(m.group(2)), int(m.group(3))) for m in _RANGE.finditer(sources)]


def reports_caught(rep: Report, ranges: Sequence[Tuple[str, int, int]]) -> Tuple[int, int]:
    """(failure reports, reports caught): a block holding a failure line is one failure report, as a
    person filed it; it is caught when any of its failure lines is reported in its own category.

    Why beside the line score: on-call is paged once per failure, whichever of its lines a rule
    knows; a report whose five driver lines are read on the first is caught, while the line score
    still counts the four others as missed. Both are reported; neither replaces the other."""
    by_file: Dict[str, List[int]] = {}
    for name, no in rep.failing:
        by_file.setdefault(name, []).append(no)
    for numbers in by_file.values():
        numbers.sort()
    total = caught = 0
    for name, first, last in ranges:  # each block by bisection: no cost of blocks x lines
        numbers = by_file.get(name, [])
        inside = numbers[bisect.bisect_left(numbers, first):bisect.bisect_right(numbers, last)]
        if inside:
            total += 1
            caught += any((name, no) in rep.caught for no in inside)
    return total, caught


def score(samples: Sequence[Sample], rules: Sequence[Rule], engine: str = "re") -> Report:
    """Per category, over lines: a line expected (or known-missed) in category C and raised in C
    is a true positive; raised but not expected, a false positive; expected but not raised, a
    false negative. Near-miss lines also count the alarms raised on them."""
    category = {r.id: r.category for r in rules}
    rep = Report(files=len(samples))
    for s in samples:
        got = run(s, rules, engine)
        for no, e in s.expect.items():
            want = {category.get(r, "custom") for r in e.rules} | set(e.missed)
            have = {category.get(r, "custom") for r in got.get(no, set())}
            rep.lines += 1
            rep.failure_lines += bool(want)
            rep.silent_lines += not want
            if e.near:
                rep.near_lines += 1
            if have - want:
                rep.false_alarms += 1
            for c in want | have | {category.get(r, "custom") for r in e.near}:
                sc = rep.scores.setdefault(c, CategoryScore())
                sc.tp += c in want and c in have
                sc.fp += c in have and c not in want
                sc.fn += c in want and c not in have
            for c in {category.get(r, "custom") for r in e.near}:
                rep.scores[c].near_lines += 1
                rep.scores[c].near_alarms += c in have
            if want and want - have and have:
                rep.other_kind += 1
            if want:
                rep.failing.add((s.name, no))
                if want & have:
                    rep.caught.add((s.name, no))
                hits = sorted(r for r in got.get(no, set()) if category.get(r, "custom") in want)
                domain = verdict_of_rule(hits[0], category.get(hits[0], "custom")).domain if hits else "unknown"
                rep.domains[domain] = rep.domains.get(domain, 0) + 1
    return rep


def _pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def render(rep: Report, order: Sequence[str], ranges: Sequence[Tuple[str, int, int]] = ()) -> str:
    """The report as a Markdown table (the docs embed it verbatim); with the blocks of a sources
    file (`report_ranges`), also the failure reports caught."""
    out = ["| category | failure lines | reported | missed | false alarms | precision | recall "
           "| near-miss lines | alarms on near misses |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cats = [c for c in order if c in rep.scores] + sorted(c for c in rep.scores if c not in order)
    for c in cats:
        s = rep.scores[c]
        out.append(f"| {c} | {s.tp + s.fn} | {s.tp} | {s.fn} | {s.fp} | {_pct(s.precision)} | "
                   f"{_pct(s.recall)} | {s.near_lines} | {s.near_alarms} |")
    out.append("")
    out.append(f"{rep.files} files, {rep.lines} lines: {rep.failure_lines} failure lines, "
               f"{rep.silent_lines} lines that must stay silent ({rep.near_lines} of them marked as "
               f"near misses of a rule); lines with an unexpected alarm: {rep.false_alarms}.")
    if rep.other_kind:
        out.append("")
        out.append(f"Missed failure lines on which a rule of another category fired: {rep.other_kind} "
                   "(seen, but filed under another kind than the annotation says; counted as missed).")
    if rep.failure_lines:
        out += ["", "| verdict domain | failure lines | share |", "|---|---:|---:|"]
        for d in DOMAINS:
            n = rep.domains.get(d, 0)
            out.append(f"| {d} | {n} | {100 * n / rep.failure_lines:.1f} % |")
        unknown = rep.domains.get("unknown", 0)
        out += ["", f"Unknown share: {unknown} of {rep.failure_lines} failure lines ({100 * unknown / rep.failure_lines:.1f} %): "
                    "lines no rule reported, or reported by a rule whose cause names no domain (a kill by signal 9, "
                    "a launcher's exit report)."]
    total, caught = reports_caught(rep, ranges)
    if total:
        out += ["", f"Failure reports (the blocks its sources file lists that hold a failure line): {total}; caught "
                    f"(a failure line of the block reported in its own category): {caught} ({100 * caught / total:.1f} %)."]
    return "\n".join(out)
