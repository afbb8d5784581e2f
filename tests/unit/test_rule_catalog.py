"""The rule catalog is the only list of rules, and it cannot drift from the code or the docs.

Every rule any module can put into a Finding is declared in the catalog; every declared rule has
its runbook section; every name an inhibition or a same-event declaration refers to exists; the
config's defaults come from the catalog.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator, Set, Tuple

from tests.helpers import REPO
from watchdog import runbook
from watchdog.core import rulecatalog
from watchdog.core.state import ProbeStatus, Sample, StateView
from watchdog.detectors import blind_rules
from watchdog.docsgen import runbooks
from watchdog.config.load import load_config_text
from watchdog.logrules.model import CATEGORIES

#: Findings that never reach the alert engine (a snapshot taken on demand).
NOT_ALERTS = {"manual"}
_RULE_NAME = re.compile(r"^[a-z]+(?:_[a-z0-9]+)+$")


def _module_constants(tree: ast.Module) -> dict:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node.value.value
    return out


def _emitted(path: Path) -> Iterator[Tuple[str, int]]:
    """(rule name, line) of every `Finding(rule=...)` in a module, resolving what can be resolved."""
    tree = ast.parse(path.read_text(), str(path))
    consts = _module_constants(tree)
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Finding"):
            continue
        for kw in call.keywords:
            if kw.arg != "rule":
                continue
            v = kw.value
            if isinstance(v, ast.Constant):
                yield v.value, call.lineno
            elif isinstance(v, ast.JoinedStr):  # f"log_{a.category}": one rule per log category
                prefix = "".join(p.value for p in v.values if isinstance(p, ast.Constant))
                for c in CATEGORIES:
                    yield prefix + c, call.lineno
            elif isinstance(v, ast.Name) and v.id in consts:
                yield consts[v.id], call.lineno
            elif isinstance(v, ast.Name):  # a loop over a table of (..., "rule_name", ...) tuples
                fn = [f for f in funcs if f.lineno <= call.lineno <= (f.end_lineno or 0)][-1]
                names = {c.value for t in ast.walk(fn) if isinstance(t, ast.Tuple) for c in t.elts
                         if isinstance(c, ast.Constant) and isinstance(c.value, str) and _RULE_NAME.match(c.value)}
                assert names, f"{path}:{call.lineno}: cannot tell which rules `rule={v.id}` can be"
                for n in names:
                    yield n, call.lineno
            else:
                raise AssertionError(f"{path}:{call.lineno}: rule=... must be a literal the catalog test can read")


def test_every_rule_any_module_can_emit_is_in_the_catalog():
    declared = set(rulecatalog.names())
    seen: Set[str] = set()
    missing = []
    for path in sorted((REPO / "watchdog").rglob("*.py")):
        for name, line in _emitted(path):
            seen.add(name)
            if name not in declared and name not in NOT_ALERTS:
                missing.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert not missing, "rules emitted but not declared in a RULES tuple:\n" + "\n".join(missing)
    # The scan must find the rules (a scan that finds nothing would pass vacuously).
    assert {"heartbeat_unreadable", "rank_zombie", "log_oom", "stall", "npu_smi_hung"} <= seen
    assert declared - seen == set(), f"declared but never emitted: {sorted(declared - seen)}"


def test_every_catalog_rule_has_its_runbook_section():
    from tests.doclinks import anchors

    sections = anchors(REPO / "docs" / "runbook.md")
    for r in rulecatalog.catalog().values():
        assert r.name in sections, f"docs/runbook.md has no section for {r.name} (anchor {r.anchor})"
        assert r.anchor == f"docs/runbook.md#{r.name}"
        meaning, check = runbook.meaning_and_check(r.name)
        assert meaning and check, f"watchdog/runbook/en.md, ## {r.name}: its **Severity** and **Check first.** are required"


def test_the_runbook_is_the_one_source_of_what_a_rule_means():
    """The English meaning and first check come from the runbook page the daemon serves (and
    docs/runbook.md copies); no second text of them in the catalog or a generated page."""
    meaning, check = runbook.meaning_and_check("npu_smi_missing")
    assert meaning == "npu-smi is not installed where `probes.npu.npu_smi` says.", meaning
    assert not meaning.startswith("**Severity**") and "Check first" not in meaning
    assert check.startswith("Install the Ascend driver (npu-smi is usually") and check.endswith("disable `probes.npu`.")
    assert runbooks.rule_words("npu_smi_missing", "en").meaning == meaning
    assert runbooks.render_runbook_in("en") == runbook.source("en")
    assert not hasattr(rulecatalog, "render_runbook")
    fields = {f.name for f in dataclasses.fields(rulecatalog.Rule)}
    assert not fields & {"meaning", "first_check"}, "runbook text declared a second time"
    assert runbook.meaning_and_check("no_such_rule") == ("", "")


def test_references_between_rules_exist():
    names = set(rulecatalog.names())
    for r in rulecatalog.catalog().values():
        for i in r.inhibits:
            assert set(i.targets) <= names, (r.name, set(i.targets) - names)
            assert r.name not in i.targets
        assert set(r.same_event) <= names, r.name
        for other in r.same_event:
            assert r.name in rulecatalog.catalog()[other].same_event, f"{r.name} <-> {other} must be mutual"


def test_config_defaults_come_from_the_catalog():
    cfg = load_config_text("{}").alerting
    pairs = {(s, t) for rule in cfg.inhibitions for s in rule.source for t in rule.target}
    for r in rulecatalog.catalog().values():
        assert cfg.for_rule(r.name) == r.default_for
        for i in r.inhibits:
            assert {(r.name, t) for t in i.targets} <= pairs
    # The roots and symptoms of the one-page promise.
    for root, symptom in (("npu_smi_hung", "probe_down"), ("npu_smi_failing", "probe_down"),
                          ("log_oom", "rank_missing"), ("log_oom", "job_gone"), ("log_oom", "log_traceback"),
                          ("log_oom", "log_hccl"), ("loss_nan", "log_nan"), ("log_nan", "loss_nan"),
                          ("stall", "heartbeat_stale"), ("rank_missing", "stall")):
        assert (root, symptom) in pairs, (root, symptom)


def test_markdown_table_lists_every_rule_once():
    table = rulecatalog.render_markdown()
    rows = [ln for ln in table.splitlines() if ln.startswith("| `")]
    assert [ln.split("`")[1] for ln in rows] == list(rulecatalog.names())
    assert "(runbook.md#log_oom)" in table


def test_the_watchdog_self_rules_are_the_ones_the_grouping_doc_names():
    """alerting.md lists the rules about the watchdog itself (they get messages of their own):
    the list is the catalog's `subject="watchdog"`, no more, no fewer."""
    import re

    text = (REPO / "docs" / "alerting.md").read_text()
    section = text.split("### Watchdog-self alerts", 1)[1].split("\n#", 1)[0]
    para = section.split("\n\n")[1]
    named = set(re.findall(r"`([a-z_]+)`", para)) & set(rulecatalog.names())
    assert named == {r.name for r in rulecatalog.catalog().values() if r.subject == "watchdog"}
    assert {"probe_down", "log_offsets_unsaved", "npu_smi_failing"} <= named


def _view(**statuses):
    return StateView(now=100.0, started_at=0.0,
                     samples={name: (Sample(90.0, SimpleNamespace(absent=False)),) for name in statuses},
                     statuses={name: ProbeStatus(name, 10.0, up=up, runs_total=3) for name, up in statuses.items()})


def test_the_rules_held_while_their_probe_cannot_see():
    """npu-smi down: the NPU rules and the fused stall (which abstains then) are held; the rules of
    probes that see, and of probes that are not running at all (a reload disabled them), are not."""
    held = blind_rules(_view(npu=False, process=True, heartbeat=True, subhealth=True))
    assert {"npu_missing", "npu_unhealthy", "npu_idle", "stall"} <= held
    assert not held & {"rank_missing", "job_gone", "link_down", "npu_ecc_double_bit", "log_oom"}
    assert blind_rules(_view(npu=True, process=True, heartbeat=True)) == frozenset()
    assert blind_rules(_view(process=True, heartbeat=True)) == frozenset()  # no npu probe at all
    assert {"link_down", "link_flapping"} <= blind_rules(_view(links=False))
    every = {r.name: r for r in rulecatalog.catalog().values()}
    assert all(set(r.observes) <= {"npu", "subhealth", "links", "heartbeat", "logs", "process"}
               for r in every.values()), "a rule observes a probe that does not exist"


def test_a_released_symptom_waits_two_rounds_of_the_probes_it_reads():
    """`release_hold`: two rounds of the rule's observed probes plus the jitter; a rule that names
    none waits for the job probes (heartbeat, logs, npu, process)."""
    from watchdog.config import load_config
    from watchdog.core.rulecatalog import release_hold
    cfg = load_config(str(REPO / "config" / "npu-watchdog.example.yaml"))
    p = cfg.probes
    jobs = max(float(p.heartbeat.interval), float(p.logs.interval), float(p.npu.interval), float(p.process.interval))
    assert release_hold("heartbeat_stale", cfg) == 2 * jobs + float(p.jitter)
    assert release_hold("link_flapping", cfg) == 2 * float(p.links.interval) + float(p.jitter)
    assert release_hold("no_such_rule", cfg) == 2 * jobs + float(p.jitter)
    assert release_hold("heartbeat_stale", SimpleNamespace()) == 0.0  # a config it cannot read: no hold
