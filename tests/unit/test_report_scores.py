"""Failure reports scored from a sources file's blocks (`corpus.report_ranges`, `corpus.reports_caught`):
a block with a failure line is one report, caught when one of its failure lines is reported in its own
category; blocks of another file, blocks without a failure line and lines outside every block count
for nothing."""

from __future__ import annotations

from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset

SAMPLE = (
    "step 1  ##> -\n"
    "Segmentation fault (core dumped)  ##> ?crash\n"
    "words no rule knows  ##> ?crash\n"
    "more words no rule knows  ##> ?crash\n"
    "a healthy line  ##> -\n"
    "Segmentation fault (core dumped)  ##> ?oom\n"
)
SOURCES = """# a set
- a/b: https://example.invalid/1 (first) [x.log] lines x.log:1-3
- a/b: https://example.invalid/2 (second) [x.log] lines x.log:4-4
- a/b: https://example.invalid/3 (third, no failure) [x.log] lines x.log:5-5
- a/b: https://example.invalid/4 (filed under another kind) [x.log] lines x.log:6-6
- a/b: https://example.invalid/5 (another file) [y.log] lines y.log:1-9, x.log:2-2
"""


def test_blocks_are_read_from_the_sources_file() -> None:
    assert corpus.report_ranges(SOURCES) == [("x.log", 1, 3), ("x.log", 4, 4), ("x.log", 5, 5), ("x.log", 6, 6),
                                             ("y.log", 1, 9), ("x.log", 2, 2)]
    assert corpus.report_ranges("no ranges here; x.log:12 alone") == []


def test_a_report_is_caught_by_any_of_its_lines_in_its_own_category() -> None:
    rep = corpus.score([corpus.parse_annotated(SAMPLE, "x.log")], build_ruleset())
    # blocks 1 (caught on line 2), 2 (missed), 4 (a crash rule on an oom line: missed), and the
    # second listing of line 2 (caught); block 3 has no failure line, y.log no sample
    assert corpus.reports_caught(rep, corpus.report_ranges(SOURCES)) == (4, 2)
    assert corpus.reports_caught(rep, []) == (0, 0)
