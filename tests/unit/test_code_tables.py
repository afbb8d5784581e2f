"""The vendor code tables: every entry renders in both languages, each table is documented with
its source, version and count, and a line carrying a documented code is that code's finding."""

from __future__ import annotations

import re

import pytest

from tests.helpers import TESTS
from tests.synth import T0, Synth, chip, npu_obs, rules
from watchdog.config.schema import Config
from watchdog.detectors import npu as npu_det
from watchdog.detectors.healthcodes import advise_code
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
    # Ascend chip fault event ids, in the line shapes the device and its tools print them
    # (tables/chipfault.yaml cites each): the device-os klogd line, tsdaemon's event line, the
    # diagnosis tool's bracketed form, npu-smi's health `Error Code` (the first documented code of
    # several), a network port going down, the device OS out of memory.
    ("[ERROR] KERNEL(3551,sklogd):2021-10-05-23:07:08.350.235 [klogd.c:242][583733.716915] event_id=0x80c78008",
     "code_chipfault_device", "80C78008"),
    ("[EVENT] TDT(4717,tsdaemon):2023-10-31-16:41:39.406.087 [tsdaemon.cpp:1811][RunSpecialProcess][tid:4717] "
     "[TsdEVENT] Event id=0x8c17a005.", "code_chipfault_device", "8C17A005"),
    ("2024-12-04 08:21:54 event_id:  [0x80E18402]", "code_chipfault_device", "80E18402"),
    # the keyword as CANN's troubleshooting guide quotes it from a device-os log
    ("[fault_manager] event_id: [0x80C98000]", "code_chipfault_device", "80C98000"),
    ("\tError Code                     : A4025021 8C03A000 8C084E00", "code_chipfault_device", "8C03A000"),
    ("[ERROR] KERNEL(3551,sklogd):2025-03-01-10:00:01.000.001 [klogd.c:242][1.2] event_id=0x81078603",
     "code_chipfault_hccl", "81078603"),
    ("[EVENT] PROCMGR(812,procmgr):2025-03-01-10:00:01.000.001 event_id=0x8C2FA001", "code_chipfault_oom", "8C2FA001"),
    # task scheduler codes as the runtime prints them (tables/ts.yaml cites each shape), on lines no
    # pack rule reads: a bus error during a task, poisoned memory found by an async copy, an SDMA
    # reduce of a collective, a stream synchronisation, the TS closed after a device fault
    ("[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 [task.cc:1050]93 PreCheckTaskErr:Kernel task "
     "happen error, retCode=0x112, [task bus error].", "code_ts_device", "0x112"),
    ("[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 [memory_task.cc:76]93 DoCompleteSuccessForMemcpyAsyncTask:"
     "mem async copy error, mte_err=0, retCode=0x221, [sdma poison error].", "code_ts_device", "0x221"),
    ("[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 [reduce_task.cc:129]93 mem async copy v2 error, "
     "retCode=0x218, [sdma reduce error].", "code_ts_hccl", "0x218"),
    ("[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 [stream.cc:1319]93 Stream Synchronize failed, "
     "stream_id=3, retCode=0x20c, [memcpy timeout].", "code_ts_device", "0x20C"),
    ("[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 [davinci_kernel_task.cc:1005]93 An error occurred in "
     "the kernel task, retCode=0x909, [TS is closed].", "code_ts_device", "0x909"),
])
def test_a_line_carrying_a_known_code_is_that_codes_finding(engine: str, line: str, rule: str, code: str) -> None:
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    events = list(ex.feed(StreamState(), (line + "\n").encode(), None))
    assert [e.rule.id for e in events] == [rule]
    entry = codes.describe(line)
    assert entry is not None and entry.code == code and entry.category == rule.split("_")[-1]


def test_a_task_exception_read_by_a_device_rule_still_names_its_task_scheduler_code() -> None:
    line = ("[ERROR] RUNTIME(16243,msame):2022-09-22-11:27:01.791.865 [engine.cc:1103]16282 ReportExceptProc:"
            "Task exception! device_id=0, stream_id=7, task_id=2, type=1, retCode=0x2a, [aicpu exception].")
    ex = Extractor(Matcher(build_ruleset(), engine="re"))
    assert [e.rule.id for e in ex.feed(StreamState(), (line + "\n").encode(), None)] == ["device_aicore_exception"]
    entry = codes.describe(line)
    assert entry is not None and (entry.table, entry.code, entry.name) == ("ts", "0x2A", "TS_ERROR_AICPU_EXCEPTION")
    assert entry.render("zh") == "0x2A TS_ERROR_AICPU_EXCEPTION：AI CPU执行异常（软件）"


@pytest.mark.parametrize("engine", ENGINES)
def test_the_device_rule_and_the_ts_table_split_operator_faults_from_hardware_ones(engine: str) -> None:
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    head = "[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 PreCheckTaskErr:Kernel task happen error, "
    lines = [head + "retCode=0x10a, [aic trap read overflow].",        # an operator read out of bounds
             head + "retCode=0x5c, [aicore hardware local error].",    # the chip's own fault
             "[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 ReportExceptProc:Task exception! device_id=0, "
             "stream_id=3, task_id=12, type=0(KERNEL_AICORE), kernel_name=" + "FusedInferAttentionScore_" * 8
             + ", failure_mode=0, retCode=0x112, [task bus error]"]
    got = [[e.rule.id for e in ex.feed(StreamState(), (line + "\n").encode(), None)] for line in lines]
    assert got == [["device_aicore_exception"], ["code_ts_device"], ["device_task_run_failed"]]
    named = [codes.describe(line) for line in lines]
    assert [(e.code, e.kind) for e in named if e is not None] == [("0x10A", "software"), ("0x5C", "hardware"),
                                                                   ("0x112", "hardware")]


def test_unknown_codes_and_ordinary_numbers_stay_silent() -> None:
    ex = Extractor(Matcher(build_ruleset(), engine="re"))
    text = ("step 100 error code is 0\n"            # success
            "runtime result = 123456 bytes\n"       # a number, not a documented code
            "EI: 10 epochs left\n"                  # a prefix alone is no code
            "reset device 0 done, retcode 0\n").encode()
    assert list(ex.feed(StreamState(), text, None)) == []
    assert codes.describe("error code is 999999") is None


@pytest.mark.parametrize("engine", ENGINES)
def test_hex_numbers_that_are_no_documented_code_in_their_context_stay_silent(engine: str) -> None:
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    lines = [
        # the device plugin's bookkeeping of its fault table (no fault happened)
        "[INFO]     2024/01/10 03:29:09.354927 17      common/fault_code.go:857    insert FaultDuration "
        "for event id 80E01801 success, FaultTimeout: 30, RecoverTimeout: 60",
        "[INFO]     2024/01/10 03:29:09.354927 17      common/fault_code.go:871    delete FaultFrequency for event id 80C98009",
        # a black-box TS exception code in the exception dump: not a chip fault event id
        "<exception_print>TIME:2023-06-10-13:16:11.401.636, device_id=0, stream_id=16, task_id=43, "
        "exception_code=0xb4060007, magic_type=0xab6528",
        # a documented code's digits after another key, or inside a longer number
        "[ERROR] RUNTIME(123,python):2025-03-01-10:00:01.000.001 task_id=0x80e01801, stream_id=3",
        "[INFO] DRV(77,python): alloc addr=0x80C98009 size=4096",
        "[ERROR] KERNEL(3551,sklogd):2025-03-01-10:00:01.000.001 [klogd.c:242][1.2] event_id=0x80e018011",
        # the vendor's 'chip start-up finished' event is not a fault; an undocumented event id
        "[EVENT] KERNEL(3551,sklogd):2025-03-01-10:00:01.000.001 [klogd.c:242][1.2] event_id=0x8C2FA009",
        "[ERROR] KERNEL(3551,sklogd):2025-03-01-10:00:01.000.001 [klogd.c:242][1.2] event_id=0x80000001",
        # npu-smi health of a chip that is fine, and an error code in the middle of a sentence
        "\tError Code                     : NA",
        "the manual says error code: 80E01801 means HBM trouble",
        # a runtime-internal code after retCode (another numbering), the short echo that follows a
        # reported task error in the same dump, a model aborted on request, a task scheduler code
        # the vendor's header does not define
        "       AIV Kernel happen error, retCode=0x112.[FUNC:GetError][FILE:stream.cc][LINE:1183]",
        "        stream_id=40, retCode=0x715005e.[FUNC:StreamLaunchKernelV2][FILE:api_impl.cc][LINE:12]",
        "[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 PreCheckTaskErr:Kernel task happen error, "
        "retCode=0x99, [model abort normal].",
        "[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 model execute error, retCode=0x95, [end of sequence].",
        # overflow detection's report: the runtime does not print it as a task error (the nan pack
        # counts overflow skips instead)
        "[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 PreCheckTaskErr:Kernel task happen error, "
        "retCode=0x2f, [aicore overflow].",
        "[ERROR] RUNTIME(91,python3):2025-03-01-10:00:01.000.001 PreCheckTaskErr:Kernel task happen error, "
        "retCode=0x5f, [unknown error].",
    ]
    text = "".join(line + "\n" for line in lines).encode()
    assert [(e.rule.id, e.summary) for e in ex.feed(StreamState(), text, None)] == []


def test_a_chip_fault_code_is_named_on_a_line_a_pack_rule_matched_first() -> None:
    """The runtime's HBM UCE line (its message as MindSpore's UCE handling quotes it, in a plog
    line's frame) is a device finding by the pack's wording; the code still names itself (with the
    vendor's level) for the message and the verdict."""
    line = ("[ERROR] RUNTIME(2713,python):2025-01-08-11:48:07.312.416 [stars_engine.cc:1543]2722 ProcHBMRas:"
            "HBM MULTI BIT ECC, Uncorrectable ECC, device_id=3, event_id=0x80e01801, time us=67672363666.")
    ex = Extractor(Matcher(build_ruleset(), engine="re"))
    events = list(ex.feed(StreamState(), (line + "\n").encode(), None))
    assert len(events) == 1 and events[0].rule.category == "device"
    entry = codes.describe(line)
    assert entry is not None and (entry.code, entry.level, entry.kind) == ("80E01801", "RestartBusiness", "hardware")
    assert "vendor level RestartBusiness" in entry.render("en") and "厂商处理级别：RestartBusiness" in entry.render("zh")


def test_chip_fault_levels_are_the_vendors_and_a_wrong_level_is_a_specific_error() -> None:
    table = codes.load_table("chipfault")
    assert {e.level for e in table.entries} <= set(codes.HANDLING_LEVELS) | {""}
    assert codes.lookup("chipfault", "80e18402").level == "SeparateNPU"    # lower case as logs print it
    assert codes.lookup("chipfault", "8C2FA009") is None                   # start-up finished: no fault
    with pytest.raises(codes.CodeTableError, match="chipfault: 80E01801: unknown handling level 'Reboot'"):
        codes._entry("chipfault", ["80E01801", "X", "device", "hardware", "en", "中", "Reboot"])


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


def test_an_npu_smi_health_code_is_worded_as_the_chip_fault_table_words_it() -> None:
    """npu-smi's `Error Code : 80E18402` and a device log's `event_id=0x80e18402` mean the same:
    the npu_unhealthy finding takes the table's meaning and level (the action follows the level),
    and a code the table does not document keeps the npu-smi layer's level and wording."""
    adv = advise_code("80e18402", "Critical")
    assert (adv.code, adv.level, adv.action) == ("80E18402", "SeparateNPU", "isolate_now")
    assert adv.meaning == codes.lookup("chipfault", "80E18402").en
    assert advise_code("A4025021").meaning == "a device process exited abnormally"   # not in the table
    assert advise_code("8C084E00").level == "FreeRestartNPU"
    # where the npu-smi layer's older level list differs, the table's (versioned) level and its action win
    assert (advise_code("816F8002").level, advise_code("816F8002").action) == ("RestartNPU", "drain_after_job")

    s = Synth(probes=("npu",))
    s.config = Config.model_validate({"node": {"name": "n1"}})
    chips = [chip(n, util=0) for n in range(8)]
    chips[2] = chip(2, util=0, health="Critical")
    s.put("npu", npu_obs(chips, held=[], codes={(2, 0): ["80E18402", "A4025021"]}), T0)
    (f,) = rules(npu_det.detect(s.view(T0), s.config), "npu_unhealthy")
    assert "80E18402: HBM rows isolated for multi-bit ECC reached 64 in total" in f.summary
    assert "A4025021: a device process exited abnormally" in f.summary
    assert f.details["code_levels"] == {"80E18402": "SeparateNPU", "A4025021": "NotHandleFault"}
    assert f.details["action"] == "isolate_now"


@pytest.mark.parametrize("name", codes.TABLES)
def test_context_patterns_bound_every_run_of_whitespace_or_separators(name: str) -> None:
    """A context's runs are bounded (`\\s{0,8}`, `[\\s:=]{0,12}`), never `\\s*`/`\\s+`/`.*`: two unbounded
    runs around optional parts (`\\s*[:=]?\\s*:?\\s*`) made Python's `re`, the engine used where RE2
    is missing, cubic on a line with a long run of spaces (1.5 KB: minutes). RE2 is linear anyway."""
    table = codes.load_table(name)
    for ctx in table.contexts + table.printed_contexts:
        for unbounded in ("\\s*", "\\s+", ".*", ".+"):
            assert unbounded not in ctx, (name, ctx)


#: Two unbounded whitespace runs with at most one optional piece between them (`\s*[=:]?\s*`):
#: the shape that is quadratic (or worse) under Python's `re` on a long run of spaces.
_TWO_RUNS = re.compile(r"\\s[*+](?:\[[^\]]*\]\?|\(\?:[^)]*\)\?|\\?.\?)?\\s[*+]")


def test_no_rule_pattern_has_two_unbounded_runs_of_spaces_around_an_optional_piece() -> None:
    assert _TWO_RUNS.search(r"(?:result|ret)\s*[=:]?\s*20700[18]") and _TWO_RUNS.search(r"a\s*:?\s*b")
    offenders = [(r.id, p) for r in build_ruleset() for p in r.patterns if _TWO_RUNS.search(p)]
    assert offenders == []


def test_a_long_run_of_spaces_after_error_code_is_scanned_in_linear_time_by_either_engine() -> None:
    """The line that took minutes: `error code` then 60,000 spaces. Each engine must finish it and
    find nothing (no timing is asserted: a hang would hit the suite's per-test timeout)."""
    from watchdog.logrules.extract import Extractor, StreamState
    from watchdog.logrules.matcher import Matcher
    from watchdog.logrules.model import build_ruleset

    line = ("CUDA out of memory. error code" + " " * 60000 + "x\n").encode()
    for engine in ENGINES:
        events = list(Extractor(Matcher(build_ruleset(), engine=engine)).feed(StreamState(), line, None))
        assert [e.rule.id for e in events] == ["oom_cuda"], (engine, [e.rule.id for e in events])


@pytest.mark.parametrize("engine", ENGINES)
def test_every_printed_text_names_its_code_and_is_a_finding_of_its_category(engine: str) -> None:
    """torch_npu's `[Error]: <first sentence of its description>` line, with no number on it
    (prefixed as a Ray or vLLM worker prints it), is a finding of the code's category, and the
    message names that code."""
    table = codes.load_table("acl")
    assert len(table.printed) == 148
    rules = build_ruleset()
    category = {r.id: r.category for r in rules}
    ex = Extractor(Matcher(rules, engine=engine))
    for code, text in table.printed:
        line = f"(EngineCore_DP0 pid=118283) [Error]: {text}"
        entry = codes.describe(line)
        assert entry is not None and entry.code == code, (code, text, entry)
        got = {category[e.rule.id] for e in ex.feed(StreamState(), (line + "\n").encode(), None)}
        assert got == {entry.category}, (code, text, got)


def test_a_text_two_codes_share_is_not_printed_and_a_shared_one_is_refused() -> None:
    """`Failed to apply for memory.` is torch_npu's text for 200000, 207001 and 207005: it cannot
    say which, so it names none (the line with the number does)."""
    assert codes.describe("[Error]: Failed to apply for memory.") is None
    doc = {"printed": {"507014": "Same text.", "507015": "Same text."}, "printed_contexts": ["(?P<text>TEXTS)"]}
    with pytest.raises(codes.CodeTableError, match="share a printed text"):
        codes._printed("acl", doc, {"507014", "507015"})
    with pytest.raises(codes.CodeTableError, match="codes not in the table: 999999"):
        codes._printed("acl", {"printed": {"999999": "x."}, "printed_contexts": ["(?P<text>TEXTS)"]}, {"507014"})
    for ctx in ("TEXTS", "(?i)(?P<text>TEXTS)"):  # no group to look up, or a case the lookup would miss
        with pytest.raises(codes.CodeTableError, match="needs \\(\\?P<text>TEXTS\\) and no"):
            codes._printed("acl", {"printed": {"507014": "x."}, "printed_contexts": [ctx]}, {"507014"})


@pytest.mark.parametrize("engine", ENGINES)
def test_a_printed_text_is_read_only_where_torch_npu_prints_it(engine: str) -> None:
    """The `[Error]: ` marker starts the line (after a worker's prefix) and the sentence ends it
    (or an older build's two spaces lead to the next sentence): the same words elsewhere, with
    more words after them, or after another tool's name are no code, and no finding."""
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    for line in ("INFO checking: The aicore execution times out. is a possible error",
                 "[Error]: Invalid file. Please check the --config path and try again.",
                 "deploy.sh [Error]: Invalid device.", "[Error]: Unsupported data type. Use fp16 instead"):
        assert codes.describe(line) is None, line
        assert [e.rule.id for e in ex.feed(StreamState(), (line + "\n").encode(), None)] == [], line
    for line in ("[Error]: The aicore execution times out.", "    [Error]: The aicore execution times out. ",
                 "[rank3]: [Error]: The aicore execution times out.",
                 "(EngineCore_DP0 pid=1) (RayWorkerWrapper pid=2) [Error]: The aicore execution times out.",
                 "[Error]: The aicore execution times out.  Rectify the fault based on the error information"):
        assert codes.describe(line).code == "507014", line
