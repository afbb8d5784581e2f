"""A probe, a detector rule and a channel are each one plugin: one module of code, plus its name
in the composition root's list (`watchdog/plugins_list.py`), is all the package needs. The module
declares its config section, its observation record and key, its metrics and whether discovery
feeds it (a probe), its rules (a detector), its type and limits (a channel); the config schema,
the config reference, the metric table, discovery, the rule catalog and the channel set get them
from the root, with no other file edited.

Proved on a copy of the package with one throw-away plugin added the way docs/architecture.md's
checklist says (the copy is imported in this process in place of the real package, then the real
one is put back); the copy still keeps the layer contract, and the count of files each kind of
plugin touches that docs/architecture.md states is held to what this test plants.
"""

from __future__ import annotations

import filecmp
import importlib
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

import watchdog

REPO = Path(watchdog.__file__).resolve().parent.parent
PACKAGE = Path(watchdog.__file__).resolve().parent

#: The throw-away probe: config section, observation record, metrics, discovery feed, build().
CANARY = '''
"""Canary probe: a throw-away probe that a test plants in a copy of the package."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, List

from pydantic import Field

from watchdog.config.sections.common import ProbeSchedule, ProbeSection
from watchdog.core.metricdef import MetricDef, MetricSample
from watchdog.core.state import RecordKey
from watchdog.probes.base import Collected, Probe, ProbeContext


class CanaryProbeConfig(ProbeSchedule):
    """Off unless enabled: counts the canary's chirps."""

    enabled: bool = False
    #: Chirps per round the canary reports (a test's number).
    chirps: int = Field(default=3, ge=0)


@dataclass(frozen=True)
class CanaryObservation:
    chirps: int


CANARY: RecordKey[CanaryObservation] = RecordKey("canary")


class CanaryProbe(Probe):
    name = "canary"

    def __init__(self, cfg: CanaryProbeConfig):
        self.cfg = cfg
        self.interval = float(cfg.interval)

    def collect(self) -> Collected:
        return Collected(CanaryObservation(self.cfg.chirps), f"{self.cfg.chirps} chirps")


ORDER = 99
SECTION = ProbeSection("canary", CanaryProbeConfig, feed=5)
METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_canary_chirps", "gauge", (), "Chirps of the canary's last round."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    sample = rt.state.latest(CANARY)
    if sample is not None:
        yield MetricSample("npu_watchdog_canary_chirps", {}, sample.value.chirps)


def build(ctx: ProbeContext) -> List[Probe]:
    cfg = ctx.config.probes.canary
    return [CanaryProbe(cfg)] if cfg.enabled else []
'''


def _own_modules() -> Dict[str, Any]:
    return {k: v for k, v in sys.modules.items() if k == "watchdog" or k.startswith("watchdog.")}


#: A throw-away detector with one rule, reading the canary-free process probe.
LOOKOUT = '''
"""Lookout: a throw-away detector that a test plants in a copy of the package."""

from __future__ import annotations

from typing import List

from watchdog.config.schema import Config
from watchdog.core.findings import Finding
from watchdog.core.rulecatalog import Rule
from watchdog.core.state import StateView

RULES = (Rule("lookout_seen", "info", title="Lookout saw something"),)
TRIGGERS = ("process",)


def detect(view: StateView, config: Config) -> List[Finding]:
    return []
'''

#: A throw-away channel: a vendor with its own type, config model (one key of its own) and limits.
PIGEON = '''
"""Pigeon: a throw-away channel that a test plants in a copy of the package."""

from __future__ import annotations

from watchdog.compat import Literal
from watchdog.alerting.deliver.channels.base import AuthedChannelConfig
from watchdog.alerting.deliver.channels.webhook import WebhookChannel


class PigeonConfig(AuthedChannelConfig):
    """A pigeon loft."""

    type: Literal["pigeon"] = "pigeon"
    vendor_limits = ((1, 1.0),)
    #: The loft the pigeon flies to.
    loft: str = "home"


class PigeonChannel(WebhookChannel):
    type = "pigeon"
    config_model = PigeonConfig
'''


def add_to_root(root_py: Path, import_line: str, list_name: str, item: str) -> None:
    """Step 2 of each checklist in docs/architecture.md, to the letter: the module's import among
    the root's imports, and its name first in the root's list."""
    text = root_py.read_text(encoding="utf-8")
    anchor = "\n\n#: Probe modules"
    assert anchor in text and f"{list_name}: " in text
    text = text.replace(anchor, f"\n{import_line}{anchor}", 1)
    head, sep, tail = text.partition(f"{list_name}: ")
    decl, paren, rest = tail.partition("= (")
    root_py.write_text(head + sep + decl + paren + f"{item}, " + rest, encoding="utf-8")


def _plant(tmp_path: Path, kind: str) -> Path:
    """A copy of the package with one plugin of `kind` added as the checklist says."""
    root = tmp_path / "src"
    shutil.copytree(PACKAGE, root / "watchdog", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pkg = root / "watchdog"
    if kind == "probe":
        (pkg / "probes" / "canary.py").write_text(CANARY, encoding="utf-8")
        add_to_root(pkg / "plugins_list.py", "from watchdog.probes import canary", "PROBE_MODULES", "canary")
        add_to_root(pkg / "plugins_list.py", "", "PROBE_METRIC_MODULES", "canary")
    elif kind == "detector":
        (pkg / "detectors" / "lookout.py").write_text(LOOKOUT, encoding="utf-8")
        add_to_root(pkg / "plugins_list.py", "from watchdog.detectors import lookout", "DETECTOR_MODULES", "lookout")
    else:
        (pkg / "alerting" / "deliver" / "channels" / "pigeon.py").write_text(PIGEON, encoding="utf-8")
        add_to_root(pkg / "plugins_list.py", "from watchdog.alerting.deliver.channels import pigeon", "CHANNELS",
                    "pigeon.PigeonChannel")
    return pkg


@pytest.fixture
def planted(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A copy of the package with one plugin added (`probe` unless the test is parametrized),
    imported as `watchdog`, its composition root run, for the test."""
    pkg = _plant(tmp_path, getattr(request, "param", "probe"))
    root = pkg.parent
    saved = _own_modules()
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        assert importlib.import_module("watchdog").__file__.startswith(str(root))
        importlib.import_module("watchdog.plugins_list")
        yield root / "watchdog"
    finally:
        sys.path.remove(str(root))
        for name in _own_modules():
            del sys.modules[name]
        sys.modules.update(saved)
        importlib.invalidate_caches()


def _changed(a: Path, b: Path) -> list:
    """Files that differ between two trees (added, removed or edited), relative paths."""
    out = []
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    stack = [(cmp, Path())]
    while stack:
        c, rel = stack.pop()
        out += [str(rel / n) for n in c.left_only + c.right_only + c.diff_files + c.funny_files]
        stack += [(sub, rel / name) for name, sub in c.subdirs.items()]
    return sorted(out)


def test_one_module_is_a_whole_probe(planted: Path):
    assert _changed(PACKAGE, planted) == ["plugins_list.py", "probes/canary.py"]  # no other file edited

    from watchdog.config.load import ConfigError, load_config_text
    from watchdog.config.reference import render_reference
    from watchdog.docsgen import BLOCKS
    from watchdog.metrics.catalog import all_metrics, metric_modules
    from watchdog.probes import ProbeContext, build_probes, probe_modules
    from watchdog.core.state import StateStore

    # Config: the section is accepted, checked strictly, and absent means its defaults.
    cfg = load_config_text("probes:\n  canary: {enabled: true, chirps: 7, interval: 5s}\n")
    assert (cfg.probes.canary.enabled, cfg.probes.canary.chirps, cfg.probes.canary.interval) == (True, 7, 5.0)
    assert load_config_text("").probes.canary.enabled is False
    with pytest.raises(ConfigError, match=r"probes\.canary\.chirp: unknown key"):
        load_config_text("probes:\n  canary: {chirp: 7}\n")
    with pytest.raises(ConfigError, match=r"probes\.canary\.chirps"):
        load_config_text("probes:\n  canary: {chirps: -1}\n")

    # Discovery: the probe declares a feed, so `discovery.feed` accepts it and feeds it by default.
    fed = load_config_text("discovery: {enabled: true}\n")
    assert fed.discovery.feed == ["process", "logs", "heartbeat", "npu", "canary"]
    assert fed.feeds["canary"] == "discovery" and fed.probes.canary.enabled
    from watchdog.detectors.jobs import filtered
    assert filtered()[-1] == "canary"  # a job's view takes its samples per job
    assert load_config_text("discovery: {enabled: true, feed: [canary]}\n").feeds["process"] == "off"

    # Docs generation: the config reference and the metric table pick up its key and metric.
    reference = render_reference()
    assert "| `probes.canary.chirps` | int | `3` | Chirps per round the canary reports (a test's number). |" in reference
    assert "| `probes.canary` | section |  | Off unless enabled: counts the canary's chirps. |" in reference
    assert "`npu_watchdog_canary_chirps` | gauge | - | Chirps of the canary's last round." in \
        BLOCKS[("docs/metrics.md", "metric-table")]()
    assert [d.name for d in all_metrics()][-1] == "npu_watchdog_canary_chirps"

    # The registry builds it for the scheduler, last in ORDER; its record reaches the state and
    # its metric reads it.
    assert probe_modules()[-1] == "watchdog.probes.canary"
    probes = build_probes(ProbeContext(config=cfg, state_dir=str(planted.parent / "state")))
    canary = [p for p in probes if p.name == "canary"]
    assert len(canary) == 1 and canary[0].interval == 5.0
    store = StateStore()
    store.put("canary", canary[0].collect().value)
    module = [m for m in metric_modules() if m.__name__ == "watchdog.probes.canary"][0]
    rt = type("Rt", (), {"state": store, "config": cfg})()
    assert [(s.name, s.value) for s in module.samples(rt)] == [("npu_watchdog_canary_chirps", 7)]


@pytest.mark.parametrize("planted", ["detector"], indirect=True)
def test_one_module_is_a_whole_detector_rule(planted: Path):
    assert _changed(PACKAGE, planted) == ["detectors/lookout.py", "plugins_list.py"]
    from watchdog.core.rulecatalog import catalog
    from watchdog.detectors import load_detectors, triggers

    assert catalog()["lookout_seen"].module == "watchdog.detectors.lookout"
    assert "lookout" in dict(load_detectors()) and triggers()["lookout"] == ("process",)


@pytest.mark.parametrize("planted", ["channel"], indirect=True)
def test_one_module_is_a_whole_channel(planted: Path):
    assert _changed(PACKAGE, planted) == ["alerting/deliver/channels/pigeon.py", "plugins_list.py"]
    from watchdog.alerting.deliver.channels import CHANNEL_CLASSES
    from watchdog.config.load import load_config_text

    cfg = load_config_text("alerting:\n  channels:\n    - {type: pigeon, name: p1, url: 'http://127.0.0.1:1/x', "
                           "loft: roof}\n")
    assert cfg.alerting.channels[0].limits() == [(1, 1.0)] and cfg.alerting.channels[0].loft == "roof"
    assert CHANNEL_CLASSES["pigeon"].__name__ == "PigeonChannel"


@pytest.mark.parametrize("kind", ["probe", "detector", "channel"])
def test_a_plugin_added_by_the_checklist_keeps_the_contract(tmp_path, monkeypatch, kind):
    """The checklist, followed to the letter, keeps the layer contract and adds no dynamic import."""
    from tests import archkit

    pkg = _plant(tmp_path, kind)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "src" / "pyproject.toml")
    assert archkit.dynamic_imports(pkg) == []
    monkeypatch.chdir(tmp_path / "src")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    saved = _own_modules()
    for name in saved:
        monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    kept, report = archkit.check_contracts(tmp_path / "src" / "pyproject.toml")
    assert kept, report


def test_detectors_read_only_declared_probes():
    """Each detector declares the probes whose rounds it reads (`TRIGGERS`, the stall rule's
    `SOURCES`): every name is a probe some module declares."""
    from watchdog.config.schema import PROBE_SECTIONS
    from watchdog.detectors import stall, triggers

    declared = {s.key for s in PROBE_SECTIONS}
    read = {p for probes in triggers().values() for p in probes} | set(stall.SOURCES)
    assert read and read <= declared, sorted(read - declared)


def test_the_real_package_has_no_canary():
    """The fixture put the real package back (and never wrote into it)."""
    from watchdog.config import Config
    from watchdog.probes import probe_modules

    assert not (PACKAGE / "probes" / "canary.py").exists()
    assert "canary" not in type(Config().probes).model_fields
    assert "watchdog.probes.canary" not in probe_modules()


@pytest.mark.parametrize("kind,planted_code,beside", [
    # the module and the root's list; + its tests + its docs page
    ("probe", 2, 2),
    # the module and the root's list; + its tests + the runbook section in en.md + its words in zh.yaml
    ("detector rule", 2, 3),
    # the module and the root's list; + its tests + its line in docs/alerting.md
    ("channel", 2, 2),
])
def test_the_checklist_states_the_count_this_test_keeps(kind, planted_code, beside):
    """docs/architecture.md says how many files each plugin touches: the package files planted
    above and what the checklist adds beside them; generated tables are rewritten by `make docs`."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    stated = re.search(rf"A new {kind} touches (\d+) files", text)
    assert stated is not None, f"docs/architecture.md lost the count of files a new {kind} touches"
    assert int(stated.group(1)) == planted_code + beside
