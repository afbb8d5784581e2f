"""The vendor code tables: every entry renders in both languages, each table is documented with
its source, version and count, and a line carrying a documented code is that code's finding."""

from __future__ import annotations

import re

import pytest

from tests.helpers import TESTS
from watchdog.logrules import codes
from watchdog.logrules.extract import Extractor, StreamState
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import build_ruleset

ENGINES = ["re"] + (["re2"] if re2_available() else [])
DOC = (TESTS.parent / "docs" / "log-signatures.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", codes.TABLES)
def test_every_entry_renders_in_both_languages(name: str) -> None:
    table = codes.load_table(name)
    assert table.entries and table.source and table.version
    for e in table.entries:
        en, zh = e.render("en"), e.render("zh")
        assert e.code in en and e.en in en and e.kind in en
        assert e.code in zh and e.zh in zh and ("硬件" in zh or "软件" in zh)
        assert re.search(r"[\u4e00-\u9fff]", e.zh) or e.zh.isascii() is False, f"{name} {e.code}: no Chinese"


@pytest.mark.parametrize("name", codes.TABLES)
def test_each_table_is_documented_with_source_version_and_count(name: str) -> None:
    table = codes.load_table(name)
    row = next((line for line in DOC.splitlines() if line.startswith(f"| `{name}` |") and table.version in line), None)
    assert row is not None, f"docs/log-signatures.md lists no row for table {name}"
    assert f"| {len(table.entries)} |" in row and table.version in row


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule, code", [
    # codes no sample of the rule packs shows, each on a line nothing else matches
    ("RuntimeError: NPU function error: aclrtMemcpy, error code is 507901", "code_acl_device", "507901"),
    ("[ERROR] aclrtSynchronizeStream(stream) failed: 207003 (main.cpp:108)", "code_acl_nan", "207003"),
    ("OSError: (External) ACL error, the error code is : 245002", "code_acl_oom", "245002"),
    ("worker: HcclBroadcast, error code is 21", "code_hccl_hccl", "21"),
    ("[PID: 77] Invalid_Argument(EE1001): The argument is invalid.", "code_ecode_device", "EE1001"),
])
def test_a_line_carrying_a_known_code_is_that_codes_finding(engine: str, line: str, rule: str, code: str) -> None:
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    events = list(ex.feed(StreamState(), (line + "\n").encode(), None))
    assert [e.rule.id for e in events] == [rule]
    entry = codes.describe(line)
    assert entry is not None and entry.code == code and entry.category == rule.split("_")[-1]


def test_unknown_codes_and_ordinary_numbers_stay_silent() -> None:
    ex = Extractor(Matcher(build_ruleset(), engine="re"))
    text = ("step 100 error code is 0\n"            # success
            "runtime result = 123456 bytes\n"       # a number, not a documented code
            "EI: 10 epochs left\n"                  # a prefix alone is no code
            "reset device 0 done, retcode 0\n").encode()
    assert list(ex.feed(StreamState(), text, None)) == []
    assert codes.describe("error code is 999999") is None


def test_a_family_lookup_keeps_the_code_and_a_specific_code_wins() -> None:
    fam = codes.lookup("ecode", "EI0099")
    assert fam is not None and fam.code == "EI0099" and fam.name == "HCCL"
    assert codes.lookup("ecode", "EL0004").category == "oom"
    assert codes.lookup("ecode", "EL0005").category == "device"


def test_a_malformed_entry_is_a_specific_error() -> None:
    with pytest.raises(codes.CodeTableError, match="acl: .*kind must be hardware or software"):
        codes._entry("acl", [1, "X", "device", "firmware", "en", "中"])
    with pytest.raises(codes.CodeTableError, match="English and Chinese"):
        codes._entry("acl", [1, "X", "device", "software", "en", " "])
