"""`/metrics` is written by the daemon's own renderer (watchdog/metrics/collector.py), not by
prometheus-client, which is a test dependency only (docs/architecture.md, "Runtime
dependencies"). prometheus-client is the reference here: for every metric of the table, with
hostile label values and every kind of float, our text must be byte for byte what its exposition
writes for the same samples, and its parser must read back the same values and labels."""

from __future__ import annotations

import ast
import math
import importlib.metadata
import re
from typing import Any, Dict, Iterable, List, Tuple

import pytest
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import REPO
from watchdog.metrics.catalog import all_metrics
from watchdog.metrics.collector import CONTENT_TYPE, WatchdogCollector

Sample = Tuple[str, Dict[str, str], float]
VALUES = [0.0, 1.0, -2.5, 0.1, 1e-7, 999999.0, 1e6, 1.5e7, 123456789.0, 2.0 ** 53, 1e21, -3.2e9,
          float("nan"), float("inf"), float("-inf")]
LABEL_VALUES = ['plain', 'quote " in it', "back\\slash", "new\nline", "卡 3", "", "a\\\"b\nc"]


class _Module:
    __name__ = "test_exposition"

    def __init__(self, samples: List[Sample]):
        self._samples = samples

    def samples(self, runtime: Any) -> Iterable[Sample]:
        return self._samples


def _samples() -> List[Sample]:
    out: List[Sample] = []
    for i, d in enumerate(all_metrics()):
        n = 1 if not d.labels else 3
        for j in range(n):
            labels = {name: f"{LABEL_VALUES[(i + j + k) % len(LABEL_VALUES)]}{j}"
                      for k, name in enumerate(d.labels)}
            out.append((d.name, labels, VALUES[(i * 3 + j) % len(VALUES)]))
    return out


def _ours(samples: List[Sample]) -> bytes:
    col = WatchdogCollector(None)
    col._modules = [_Module(samples)]
    return col.render()


def _reference(samples: List[Sample]) -> bytes:
    """The same samples through prometheus-client's families and text exposition."""
    defs = {d.name: d for d in all_metrics()}

    class Collector:
        def collect(self) -> Iterable[Any]:
            fams = {}
            for name, d in defs.items():
                cls = CounterMetricFamily if d.type == "counter" else GaugeMetricFamily
                fams[name] = cls(name, d.help, labels=sorted(d.labels))
            for name, labels, value in samples:
                fams[name].add_metric([labels[k] for k in sorted(labels)], value)
            return list(fams.values())

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collector())
    return generate_latest(reg)


def test_text_is_what_prometheus_client_writes_for_the_same_samples():
    samples = _samples()
    ours, ref = _ours(samples), _reference(samples)
    assert ours.count(b"\n") > len(all_metrics()) * 2  # every family, and its samples
    if ours != ref:
        diff = [(a, b) for a, b in zip(ours.decode().splitlines(), ref.decode().splitlines()) if a != b]
        pytest.fail(f"{len(diff)} lines differ from prometheus-client's exposition, first: {diff[:3]}")


def test_a_second_render_reuses_series_texts_and_serves_what_changed():
    """The series' texts are kept from one render to the next: the second render of the same
    samples is still prometheus-client's text; a series that went is not served (nor kept), a
    new one and a new value are; label values that compare equal but print apart stay apart."""
    samples = _samples()
    col = WatchdogCollector(None)
    mod = _Module(samples)
    col._modules = [mod]
    ref = _reference(samples)
    assert col.render() == ref and col.render() == ref
    assert len(col._series) == sum(1 for _, labels, _v in samples if labels)
    labelled = [x for x in samples if x[1]]
    gone, kept = labelled[0], labelled[1:]
    changed = [(n, dict(labels), v + 1 if v == v else v) for n, labels, v in kept]
    name, labels, _v = kept[0]
    one = {k: 1 for k in labels}
    fresh = [(name, {k: True for k in labels}, 2.0), (name, one, 3.0)]
    mod._samples = changed + fresh
    assert col.render() == _reference([(n, {k: str(v) for k, v in ls.items()}, v2) for n, ls, v2 in changed + fresh])
    assert (gone[0], *[str(gone[1][k]) for k in sorted(gone[1])]) not in col._series
    assert len(col._series) == len(changed) + 2


def test_prometheus_parser_reads_back_every_value_and_label():
    samples = _samples()
    got = {}
    for fam in text_string_to_metric_families(_ours(samples).decode("utf-8")):
        for s in fam.samples:
            got[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert len(got) == len(samples)
    for name, labels, value in samples:
        seen = got[(name, tuple(sorted(labels.items())))]
        assert (math.isnan(seen) and math.isnan(value)) or seen == value, (name, labels, value, seen)


def test_a_sample_with_labels_other_than_the_table_is_dropped_not_served():
    d = next(d for d in all_metrics() if d.labels)
    good = (d.name, {k: "x" for k in d.labels}, 1.0)
    bad = (d.name, {"instance": "x"}, 2.0)
    text = _ours([good, bad]).decode()
    assert f"{d.name}{{" in text and 'instance="x"' not in text
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_prometheus_client_is_not_a_runtime_dependency_nor_imported_by_the_daemon():
    """The choice of docs/architecture.md ("Runtime dependencies"): re-adding it (or importing it
    anywhere under watchdog/) must come with a new measurement there, so this test fails first."""
    reqs = importlib.metadata.requires("npu-watchdog") or []  # as pip installs it

    def name(req: str) -> str:
        return re.split(r"[\s<>=!~;\[]", req, 1)[0].lower().replace("_", "-")

    runtime = {name(r) for r in reqs if "extra ==" not in r}
    assert "psutil" in runtime and "prometheus-client" not in runtime, sorted(runtime)
    importers = []
    for path in sorted((REPO / "watchdog").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "prometheus_client" for n in names):
                importers.append(str(path.relative_to(REPO)))
    assert not importers, f"watchdog/ imports prometheus_client: {importers}"
