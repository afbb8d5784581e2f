"""Terminal colours and NUL bytes cannot hide a failure line from the rules (both engines)."""

from __future__ import annotations

import pytest

from watchdog.logrules.extract import Extractor, StreamState
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import build_ruleset
from watchdog.logrules.normalize import normalize

ENGINES = ["re"] + (["re2"] if re2_available() else [])

HIDDEN = [
    # colour codes around the key and the value (rich, loguru, colorlog style)
    (b"\x1b[1;31mloss\x1b[0m: \x1b[31mnan\x1b[0m step 12\n", "nan_loss_value"),
    (b"iter 5426 | \x1b[38;5;196mloss: nan\x1b[0m | lr 1e-4\n", "nan_loss_value"),
    (b"{'loss': \x1b[38;2;255;0;0mnan\x1b[m}\n", "nan_loss_value"),
    # a NUL byte inside the keyword (a writer's torn buffer, a sparse region after a crash)
    (b"lo\x00ss: nan\n", "nan_loss_value"),
    (b"RuntimeError: NPU out of mem\x00ory. Tried to allocate 2.00 GiB\n", "oom_torch_npu"),
    (b"\x1b[31mRuntimeError: NPU out of memory.\x1b[0m Tried to allocate 2.00 GiB\n", "oom_torch_npu"),
]


def rule_ids(block: bytes, engine: str) -> set:
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    return {ev.rule.id for ev in ex.feed(StreamState(), block, None)}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line,rule", HIDDEN, ids=[repr(h[0][:24]) for h in HIDDEN])
def test_hidden_failure_lines_are_found(line: bytes, rule: str, engine: str) -> None:
    assert rule in rule_ids(line, engine)


def test_evidence_shows_the_clean_text() -> None:
    ex = Extractor(Matcher(build_ruleset(), engine="re"))
    [ev] = ex.feed(StreamState(), b"ok\n\x1b[1;31mloss\x1b[0m: nan\n", None)
    assert ev.text == "loss: nan" and ev.line_no == 2


def test_normalize_keeps_lines_and_plain_text() -> None:
    plain = b"plain line\nanother [31m not an escape\n"
    assert normalize(plain) is plain  # nothing to do: the same object, no copy
    assert normalize(b"a\x1b[0mb\x00c\n\x1b[Kd\n") == b"abc\nd\n"
    # a cut or malformed sequence never eats a newline or the next line
    assert normalize(b"x\x1b[12;\nloss: nan\n") == b"x\x1b[12;\nloss: nan\n"
    assert normalize(b"\x1b[" + b"1" * 5000 + b"m tail\n").endswith(b"m tail\n")


def test_normalize_is_linear_on_hostile_input() -> None:
    """Many unterminated escape starts: work per byte is bounded (no backtracking blow-up);
    counted in regex steps, not seconds: the output length is checked instead."""
    data = (b"\x1b[" + b";" * 60) * 20000 + b"\n"
    out = normalize(data)
    assert out == data  # nothing terminated, nothing stripped
    data = b"\x1b[31m" * 200000 + b"loss: nan\n"
    assert normalize(data) == b"loss: nan\n"
