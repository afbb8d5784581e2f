"""The npu probe remembers the chips it saw across a restart of the daemon, within one boot.

A card lost while the daemon runs is reported missing; a daemon restarted meanwhile (an upgrade,
a crash) must still report it missing, or its alert resolves although the card is still gone.
Real npu probes over the fake npu-smi (the NPU is what cannot exist here) and a real state folder.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from tests.jobkit import FakeNpuNode
from watchdog.config import load_config_text
from watchdog.probes import npu as npu_probe
from watchdog.service import statefiles


def probe(node: FakeNpuNode, state: Path, monkeypatch) -> npu_probe.NpuProbe:
    for k, v in node.env().items():
        monkeypatch.setenv(k, v)
    cfg = load_config_text("node: {name: n}\njob: {name: j}\nprobes:\n  npu: {enabled: true}\n")
    return npu_probe.NpuProbe(cfg.probes.npu, state_dir=str(state))


def missing(p: npu_probe.NpuProbe) -> list:
    return [(c.npu, c.chip) for c in p.collect().value.missing]


def test_a_card_lost_before_a_restart_is_still_missing_after_it(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    node = FakeNpuNode(tmp_path / "node")
    first = probe(node, state, monkeypatch)
    assert missing(first) == []
    node.lose(2)
    assert missing(first) == [(2, 0)]
    saved = state / npu_probe.STATE_FILE
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    before = saved.stat().st_mtime_ns
    assert missing(first) == [(2, 0)]
    assert saved.stat().st_mtime_ns == before  # written when the sets change, not every round

    again = probe(node, state, monkeypatch)  # the daemon restarted: a new probe, the same folder
    obs = again.collect().value
    assert [(c.npu, c.chip) for c in obs.missing] == [(2, 0)]
    assert obs.missing[0].health == "OK"  # its last reading is the one from before it went
    node.lost.discard(2)
    node.refresh()
    assert missing(again) == []


def test_another_boot_or_a_damaged_file_starts_afresh(tmp_path, monkeypatch, caplog):
    state = tmp_path / "state"
    state.mkdir()
    node = FakeNpuNode(tmp_path / "node")
    first = probe(node, state, monkeypatch)
    first.collect()
    node.lose(5)
    assert missing(first) == [(5, 0)]
    saved = state / npu_probe.STATE_FILE
    doc = json.loads(saved.read_text())
    doc["data"]["boot_id"] = "another-boot"
    saved.write_text(json.dumps(doc))
    assert missing(probe(node, state, monkeypatch)) == []  # a reboot: the card may be gone for good

    saved.write_text('{"version": 1, "data": {"boot_id": ')  # torn
    assert missing(probe(node, state, monkeypatch)) == []
    assert any(d.path == str(saved) for d in statefiles.events())  # set aside and reported
    assert json.loads(saved.read_text())["data"]["chips"]  # and written anew

    doc = json.loads(saved.read_text())
    good = dict(doc["data"]["chips"][0], npu=5)  # the lost card, as the first life saw it
    doc["data"]["chips"] = [{"npu": "x"}, 7, {"npu": 1, "chip": 0, "nonsense": 1}, dict(good, npu="5"), good]
    saved.write_text(json.dumps(doc))
    assert missing(probe(node, state, monkeypatch)) == [(5, 0)]  # bad rows dropped, the good one kept


def test_an_unwritable_state_folder_is_said_and_the_probe_goes_on(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    node = FakeNpuNode(tmp_path / "node")
    p = probe(node, state, monkeypatch)
    os.chmod(state, 0o500)
    try:
        if os.access(state, os.W_OK):  # root writes anyway: make the file's place a folder instead
            os.chmod(state, 0o700)
            (state / npu_probe.STATE_FILE).mkdir()
        got = p.collect()
    finally:
        os.chmod(state, 0o700)
    assert len(got.value.chips) == 8
    assert "not kept across a restart" in got.summary


def test_a_hostile_state_file_is_set_aside_without_blocking_or_crashing_the_round(tmp_path, monkeypatch):
    """Nested past the parser's depth, a FIFO (a reader would block forever), a file over the
    size limit, a chip number that is a bool: each is refused, reported, and the round goes on."""
    state = tmp_path / "state"
    state.mkdir()
    node = FakeNpuNode(tmp_path / "node")
    saved = state / npu_probe.STATE_FILE
    deep = "[" * 100000 + "]" * 100000
    big = json.dumps({"version": 1, "data": {"boot_id": "x", "pad": "y" * (npu_probe.MAX_FILE_BYTES + 1)}})

    def plant(kind: str) -> None:
        if saved.exists() or saved.is_symlink():
            saved.unlink()
        if kind == "fifo":
            os.mkfifo(saved)
        else:
            saved.write_text(deep if kind == "deep" else big)

    for kind, reason in (("deep", "unreadable JSON"), ("fifo", "not a regular file"), ("big", "more than")):
        plant(kind)
        before = len(statefiles.events())
        got = probe(node, state, monkeypatch).collect()  # must return: no RecursionError, no hang
        assert len(got.value.chips) == 8, kind
        new = statefiles.events()[before:]
        assert [d.path for d in new] == [str(saved)] and reason in new[0].reason, (kind, new)
        assert saved.is_file() and json.loads(saved.read_text())["data"]["chips"]  # written anew

    first = probe(node, state, monkeypatch)
    first.collect()
    node.lose(1)
    first.collect()
    doc = json.loads(saved.read_text())
    lost = [r for r in doc["data"]["chips"] if r["npu"] == 1][0]
    doc["data"]["chips"] = [dict(lost, npu=True)]  # what `1` would be if a bool passed for a number
    saved.write_text(json.dumps(doc))
    assert missing(probe(node, state, monkeypatch)) == []
