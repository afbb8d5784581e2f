"""Shared by the rule tests that run one line through the shipped rules on each engine
(tests/unit/test_log_rules_round7.py, tests/unit/test_log_rules_shapes.py)."""

from __future__ import annotations

from functools import lru_cache
from typing import List

from watchdog.logrules.extract import Extractor, StreamState
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import build_ruleset

#: The engines a line is checked on: Python's `re` always, RE2 where it is installed.
ENGINES = ["re"] + (["re2"] if re2_available() else [])


@lru_cache(maxsize=None)
def matcher(engine: str) -> Matcher:
    """One compiled rule set per engine for a whole test run (a matcher holds no stream state)."""
    return Matcher(build_ruleset(), engine=engine)


def rules_on(line: str, engine: str) -> List[str]:
    """The ids of the shipped rules that report `line` (fed alone, as a log's one line)."""
    ex = Extractor(matcher(engine))
    return sorted({e.rule.id for e in ex.feed(StreamState(), (line + "\n").encode("utf-8"), None)})
