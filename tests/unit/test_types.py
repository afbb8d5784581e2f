"""mypy passes on the core, the detectors and the alerting side (`[tool.mypy]` in pyproject.toml):
the typed record keys (`view.latest(NPU)` is a `Sample[NpuObservation]`) and the frozen records are
checked where they are read. Run in-process through mypy's API, with the project's config."""

from __future__ import annotations

import pytest

from tests.helpers import REPO


def _mypy(*args: str):
    api = pytest.importorskip("mypy.api", reason="mypy is in the dev extra")
    return api.run(["--config-file", str(REPO / "pyproject.toml"), "--no-incremental", "--no-error-summary",
                    "--show-error-codes", *args])


def test_mypy_passes_on_core_detectors_and_alerting(monkeypatch):
    monkeypatch.chdir(REPO)
    out, err, status = _mypy()
    assert status == 0, out + err


def test_mypy_sees_a_wrong_field_of_a_keyed_record(tmp_path, monkeypatch):
    """The check can fail: a detector reading a field its record does not have, through the key."""
    monkeypatch.chdir(REPO)
    planted = tmp_path / "planted.py"
    planted.write_text("from watchdog.core.state import StateView\n"
                       "from watchdog.observations import NPU\n\n\n"
                       "def f(view: StateView) -> bool:\n"
                       "    s = view.latest(NPU)\n"
                       "    return s is not None and s.value.not_a_field\n")
    out, err, status = _mypy(str(planted))
    assert status == 1 and '"NpuObservation" has no attribute "not_a_field"' in out, out + err


def test_mypy_sees_a_wrong_key_of_a_probes_config_section(tmp_path, monkeypatch):
    """A probe's section is typed through its module's SECTION: a misspelt key fails, and so does
    reading the section by attribute (`config.probes.links`), which only the run-time model has."""
    monkeypatch.chdir(REPO)
    planted = tmp_path / "planted_config.py"
    planted.write_text("from watchdog.config.schema import Config\n"
                       "from watchdog.probes.links import SECTION as LINKS_CONFIG\n\n\n"
                       "def f(config: Config) -> int:\n"
                       "    return LINKS_CONFIG.of(config).flap_cnt\n\n\n"
                       "def g(config: Config) -> int:\n"
                       "    return config.probes.links.flap_count\n")
    out, err, status = _mypy(str(planted))
    assert status == 1, out + err
    assert '"LinksProbeConfig" has no attribute "flap_cnt"' in out, out + err
    assert '"ProbeDefaults" has no attribute "links"' in out, out + err
