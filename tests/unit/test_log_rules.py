"""Every shipped rule over sample logs with an inline expectation per line (both engines)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

import pytest

from tests.helpers import FIXTURES, TESTS
from watchdog.logrules import corpus
from watchdog.logrules.extract import Extractor, StreamState, line_timestamp
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import RuleError, SHIPPED_PACKS, build_ruleset, load_pack, make_rule

SAMPLES = TESTS / "samples" / "logs"
CORPUS = TESTS / "samples" / "corpus"
ENGINES = ["re"] + (["re2"] if re2_available() else [])


def load_sample(path: Path) -> Tuple[bytes, Dict[int, Set[str]]]:
    sample = corpus.parse_annotated(path.read_text(encoding="utf-8"), path.name)
    return sample.data, {no: set(e.rules) for no, e in sample.expect.items()}


def run_rules(data: bytes, engine: str, chunk_lines: int = 0) -> Dict[int, Set[str]]:
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    st = StreamState()
    got: Dict[int, Set[str]] = {}
    blocks = [data]
    if chunk_lines:
        parts = data.splitlines(keepends=True)
        blocks = [b"".join(parts[i:i + chunk_lines]) for i in range(0, len(parts), chunk_lines)]
    for block in blocks:
        for ev in ex.feed(st, block, None):
            got.setdefault(ev.line_no, set()).add(ev.rule.id)
    return got


SAMPLE_FILES = sorted(SAMPLES.glob("*.log")) + sorted(CORPUS.glob("*.log"))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_sample_expectations(path: Path, engine: str) -> None:
    data, expect = load_sample(path)
    for chunk in (0, 1, 3):  # whole file, line by line, odd slices: same answer
        got = run_rules(data, engine, chunk)
        wrong = {no: (expect[no], got.get(no, set())) for no in expect if expect[no] != got.get(no, set())}
        assert not wrong, f"{path.name} ({engine}, chunk={chunk}): line -> (expected, got): {wrong}"


def test_every_shipped_rule_has_a_positive_and_a_near_miss_sample() -> None:
    covered: Set[str] = set()
    near: Set[str] = set()
    for s in corpus.load(SAMPLE_FILES):
        for e in s.expect.values():
            covered |= e.rules
            near |= e.near
    shipped = {r.id for p in SHIPPED_PACKS for r in load_pack(p)}
    assert shipped - covered == set(), "rules without a positive sample line"
    assert shipped - near == set(), "rules without a near-miss sample line (`~rule_id`)"
    assert near - shipped == set(), "near-miss annotations naming no shipped rule"


def test_corpus_size_and_zero_false_alarms() -> None:
    """The verbatim corpus: >= 150 real failure lines, at least as many lines that must stay
    silent, and not one alarm on them (the scores the docs quote)."""
    real = [p for p in sorted(CORPUS.glob("*.log")) if "constructed" not in p.name]
    rep = corpus.score(corpus.load(real), build_ruleset())
    assert rep.failure_lines >= 150, rep.failure_lines
    assert rep.silent_lines >= rep.failure_lines, (rep.silent_lines, rep.failure_lines)
    assert rep.false_alarms == 0
    every = corpus.score(corpus.load(SAMPLE_FILES), build_ruleset())
    assert every.false_alarms == 0 and all(s.near_alarms == 0 for s in every.scores.values())
    cats = {r.category for r in build_ruleset()} | {corpus.OTHER}
    for s in corpus.load(SAMPLE_FILES):
        for no, e in s.expect.items():
            assert e.missed <= cats, f"{s.name}:{no}: unknown category in {sorted(e.missed)}"


def test_sources_file_names_every_sample() -> None:
    text = (TESTS / "samples" / "SOURCES.md").read_text(encoding="utf-8")
    for path in SAMPLE_FILES:
        assert f"## {path.parent.name}/{path.name}" in text, f"{path.name} has no provenance in samples/SOURCES.md"


def test_annotation_errors_are_specific() -> None:
    with pytest.raises(corpus.AnnotationError, match="x.log:2"):
        corpus.parse_annotated("a  ##> -\nno marker here\n", "x.log")


def test_samples_have_negatives_for_each_category() -> None:
    data, expect = load_sample(SAMPLES / "near_misses.log")
    assert len(expect) >= 20 and all(not v for v in expect.values())


def test_literals_cover_every_positive_line() -> None:
    """The prefilter contract: a line a rule matches contains one of its literals (lower-cased)."""
    rules = {r.id: r for r in build_ruleset()}
    for path in SAMPLE_FILES:
        data, expect = load_sample(path)
        lines = data.decode().splitlines()
        for no, ids in expect.items():
            for rid in ids:
                low = lines[no - 1].lower()
                assert any(lit in low for lit in rules[rid].literals), f"{path.name}:{no} {rid}"


def test_no_literal_of_a_rule_repeats_or_contains_another_of_it() -> None:
    """A rule's literals admit a line when any one is in it: a literal listed twice, or one that
    contains a shorter literal of the same rule, admits nothing the other does not (dead weight
    the prefilter checks on every line)."""
    assert _redundant(("nccl error ", "nccl error in:", "x", "x")) == ["nccl error in:", "x"]
    offenders = {r.id: _redundant(r.literals) for p in SHIPPED_PACKS for r in load_pack(p)}
    assert {rid: lits for rid, lits in offenders.items() if lits} == {}


def _redundant(literals: Sequence[str]) -> List[str]:
    return sorted({a for i, a in enumerate(literals) for j, b in enumerate(literals)
                   if i != j and b in a and (a != b or i > j)})


@pytest.mark.parametrize("engine", ENGINES)
def test_shared_fixtures(engine: str) -> None:
    """The public plog/device-log captures: what each must raise."""
    logs = FIXTURES / "logs"
    expect = {
        "plog_hccl_notify_wait_timeout_heartbeat_lost.log": {"hccl_notify_wait_timeout", "hccl_heartbeat_lost"},
        # hccl_generic: the link table's ERROR lines under the exact report (`|  comm error, device[2]`), evidence only
        "plog_hccl_link_establish_timeout.log": {"hccl_socket_timeout", "hccl_link_error", "hccl_generic"},
        "plog_hccl_no_connect_allreduce_error.log": {"hccl_link_error", "hccl_call_failed", "hccl_generic"},
        "plog_mixed_runtime_hccl_errors.log": {"hccl_socket_timeout", "device_sdma_error", "hccl_roce_cqe_error",
                                               "device_driver_error"},
        "hisi_logs_history.log": {"device_ts_exception"},
    }
    for name, rules in expect.items():
        got = run_rules((logs / name).read_bytes(), engine)
        ids = set().union(*got.values()) if got else set()
        assert ids == rules, name
    # INFO lines of a healthy HCCL init never fire.
    info = b"".join(l + b"\n" for l in (logs / "plog_hccl_notify_wait_timeout_heartbeat_lost.log").read_bytes().splitlines()
                    if l.startswith(b"[INFO]"))
    assert run_rules(info, engine) == {}


def test_engines_agree_on_noisy_bytes() -> None:
    if not re2_available():
        pytest.skip("google-re2 not installed")
    noise = (b"\xff\xfe garbage \x00\x00 NPU out of memory. Tried to allocate 1 MiB\n"
             + b"x" * 300000 + b" loss: nan\n" + b"\x00" * 100 + b"EI0002 timeout\n"
             + b"caf\xc3\xa9 loss: nan\n" + "中文 EI0006 文\n".encode())
    assert run_rules(noise, "re") == run_rules(noise, "re2")
    got = run_rules(noise, "re")
    assert got[1] == {"oom_torch_npu"} and got[3] == {"hccl_notify_wait_timeout"} and got[4] == {"nan_loss_value"}
    assert 2 not in got  # ' loss: nan' lies beyond the 64 KiB matching window of a 300 kB line


def test_rule_validation_errors_are_specific() -> None:
    with pytest.raises(RuleError, match="look-around"):
        make_rule({"id": "x1", "category": "custom", "patterns": ["(?<=a)b"]}, "custom")
    with pytest.raises(RuleError, match="does not compile"):
        make_rule({"id": "x2", "category": "custom", "patterns": ["(unclosed"]}, "custom")
    with pytest.raises(RuleError, match="category"):
        make_rule({"id": "x3", "category": "bogus", "patterns": ["a"]}, "custom")
    with pytest.raises(RuleError, match="not a shipped rule id"):
        build_ruleset(disable=["no_such_rule"])
    with pytest.raises(RuleError, match="already used"):
        build_ruleset(user_rules=[{"id": "oom_torch_npu", "category": "oom", "patterns": ["x"]}])
    assert "oom_torch_npu" not in {r.id for r in build_ruleset(disable=["oom_torch_npu"])}


def test_shipped_patterns_compile_when_first_used_and_every_one_compiles() -> None:
    """The shipped rules' patterns are compiled when a line first reaches the rule, not at load
    (a daemon start compiled some 600 of them); a user's rule is compiled at load, so a config
    check reports its mistakes. Every shipped pattern compiles (nothing else would show a broken
    one before a log line reached it)."""
    from watchdog.logrules.codes import code_rule_data

    fresh = [make_rule(d, "codes") for d in code_rule_data(SHIPPED_PACKS)]  # not the cached ones
    assert fresh and all("compiled" not in vars(r) for r in fresh)
    assert fresh[0].matches("no such line") is False and "compiled" in vars(fresh[0])
    rules = build_ruleset()
    for r in rules:
        assert len(r.compiled) == len(r.patterns) and len(r.unless_compiled) == len(r.unless), r.id
        assert all(p.pattern == text for p, text in zip(r.compiled, r.patterns)), r.id
    assert all("compiled" in vars(r) for r in rules)
    mine = make_rule({"id": "mine", "category": "custom", "patterns": ["a+b"], "unless": ["^ab"]}, "custom")
    assert "compiled" in vars(mine) and mine.matches("aab") and not mine.matches("ab")
    with pytest.raises(RuleError, match="look-around"):
        make_rule({"id": "x4", "category": "oom", "patterns": ["(?!a)b"]}, SHIPPED_PACKS[0])


def test_line_timestamp_formats() -> None:
    assert line_timestamp("[ERROR] HCCL(1,p):2025-01-24-11:24:07.908.424 [x]") is not None
    assert line_timestamp("[2024-07-10 15:50:45,798] [INFO] x") is not None
    assert line_timestamp("no time here") is None


def _unbounded_risks(pattern: str) -> list:
    """Parts of `pattern` whose cost on Python `re` can grow with the square of a line: an
    unbounded `.` repeat, or an unbounded repeat inside another unbounded repeat."""
    try:
        from re import _parser as sre_parse  # Python 3.11+
    except ImportError:  # pragma: no cover - older Pythons
        import sre_parse  # type: ignore[no-redef]

    risks = []

    def walk(items, inside_unbounded):
        for op, av in items:
            if op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT):
                lo, hi, sub = av
                unbounded = hi == sre_parse.MAXREPEAT
                if unbounded and any(o == sre_parse.ANY for o, _ in sub):
                    risks.append("unbounded . repeat")
                if unbounded and inside_unbounded:
                    risks.append("nested unbounded repeat")
                walk(sub, inside_unbounded or unbounded)
            elif op == sre_parse.SUBPATTERN:
                walk(av[-1], inside_unbounded)
            elif op == sre_parse.BRANCH:
                for alt in av[1]:
                    walk(alt, inside_unbounded)

    walk(sre_parse.parse(pattern), False)
    return risks


def test_no_shipped_pattern_can_cost_the_square_of_a_line():
    """The fallback engine is Python `re` (and it runs the exact stage on flagged lines even with
    RE2): an unbounded `.*` or a nested `(?: \\w+)*` after a literal rescans a hostile 64 KiB line
    from every occurrence of the literal. Shipped rules bound such repeats."""
    from watchdog.logrules.model import build_ruleset
    from watchdog.logrules import SHIPPED_PACKS

    bad = {}
    for rule in build_ruleset(list(SHIPPED_PACKS), [], []):
        for pat in tuple(getattr(rule, "patterns", ())) + tuple(getattr(rule, "unless", ())):
            risks = _unbounded_risks(pat if isinstance(pat, str) else pat.pattern)
            if risks:
                bad[f"{rule.id}: {pat}"] = risks
    assert not bad, bad


def test_a_failure_seen_under_another_kind_is_counted_apart_and_still_missed() -> None:
    """`scan --report` says how many missed failure lines a rule of another category did see:
    there the rules and the annotation disagree on the kind, which is not the same gap as silence."""
    text = ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)  ##> ?oom\n"
            "all good here  ##> ?crash\n")
    rules = build_ruleset()
    rep = corpus.score([corpus.parse_annotated(text)], rules)
    assert rep.other_kind == 1
    assert rep.scores["oom"].fn == 1 and rep.scores["crash"].fn == 1
    assert "Missed failure lines on which a rule of another category fired: 1 " in corpus.render(rep, ["oom", "crash"])


def test_the_loosened_stage_one_misses_no_line_an_exact_pattern_matches() -> None:
    """Stage 1 on RE2 runs the patterns with their bounded repetitions widened (`.{0,200}` to
    `.*`): a prefilter may let more lines through, never fewer. Checked on every annotated line of
    every sample folder, against each rule's exact patterns, and the two engines' events agree."""
    if not re2_available():
        pytest.skip("google-re2 not installed")
    from watchdog.logrules.matcher import _loosened
    assert _loosened(r"a.{0,200}b\{[^}]{0,9}x{2,5}?\s{1,8}0{8}") == r"a.*b\{[^}]*x+?\s+0{8}"
    # a brace in a character class or escaped is text (a user's rule): left as it is
    assert _loosened(r"[{1,2}]x{1,3}[]{0,2}]\{1,2\}\\{0,3}") == r"[{1,2}]x+[]{0,2}]\{1,2\}\\*"
    rules, matcher = build_ruleset(), Matcher(build_ruleset(), engine="re2")
    files = sorted((TESTS / "samples").glob("*/*.log"))
    lines = [ln for f in files for ln in corpus.parse_annotated(f.read_text(encoding="utf-8"), f.name).data.split(b"\n")]
    block = b"\n".join(lines) + b"\n"
    starts = {s for s, _ in matcher.candidates(block)}
    pos = 0
    for ln in lines:
        text = ln.decode("utf-8", "replace")
        if any(p.search(text) for r in rules for p in r.compiled):
            assert pos in starts, text[:200]
        pos += len(ln) + 1
    for f in files:
        data = corpus.parse_annotated(f.read_text(encoding="utf-8"), f.name).data
        assert run_rules(data, "re") == run_rules(data, "re2"), f.name


@pytest.mark.parametrize("engine", ENGINES)
def test_a_line_that_is_not_utf8_is_matched_as_stage_two_reads_it(engine: str) -> None:
    """A GBK-encoded word inside a failure line: RE2's stage 1 (UTF-8 mode) could not step over
    its bytes with `.` or `\\S`, while stage 2 reads them as U+FFFD and matches; the line was lost
    on RE2 only (found by an attack pass). Both engines now report the same lines."""
    gbk = "内存不足".encode("gbk")
    data = b"\n".join([
        b"NCCL WARN " + gbk + b" failed", b"RuntimeError: " + gbk,
        b"[rank3]: ValueError: " + gbk + b" npu device failed", b"2024-01-01 ERROR " + gbk + b" out of memory",
        b"step 5 " + gbk + b" loss 2.0", "内存不足 ok".encode(), b"\xff" * 3000,
    ]) + b"\n"
    got = {no: ids for no, ids in run_rules(data, engine).items() if ids}
    assert got == {1: {"hccl_call_failed"}, 2: {"traceback_generic"}, 3: {"device_generic"}, 4: {"oom_generic"}}
