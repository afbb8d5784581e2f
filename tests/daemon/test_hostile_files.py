"""Files of ranks are opened without following links, without blocking, regular files of the
rank's user only: a symlink swap, a folder swapped for a link and a FIFO (all real) are refused
with a clear reason, never read, and never hold a reader up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import REPO, http_get, wait_for
from tests.hostile_kit import OTHER_UID, as_other_user, other_users_dir, root_only_secret, write_as_other_user
from tests.jobkit import TAG
from watchdog.config.sections.heartbeat import HeartbeatProbeConfig
from watchdog.logrules.tail import SourceSpec, Tailer
from watchdog.probes.heartbeat import HeartbeatProbe
from watchdog.host.rankfiles import NOT_REGULAR, SYMLINK, WRONG_OWNER, RankFileRefused, open_rank_file


def _finishes(fn, bound: float = 30.0):
    """Run fn in a thread; it must return (a hang guard, not a speed target)."""
    box: dict = {}

    def run():
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["exc"] = exc
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(bound)
    assert not t.is_alive(), "the reader blocked"
    if "exc" in box:
        raise box["exc"]
    return box.get("out")


def _refused(path, uid=None) -> str:
    with pytest.raises(RankFileRefused) as info:
        _finishes(lambda: os.close(open_rank_file(str(path), uid)))
    return info.value.reason


def test_the_helper_refuses_links_fifos_devices_and_other_users_files(tmp_path, other_root):
    mine = other_users_dir(other_root / "u")
    good = mine / "rank0.json"
    write_as_other_user(good, b'{"step": 1}\n')
    fd = open_rank_file(str(good), OTHER_UID)
    assert os.read(fd, 100) == b'{"step": 1}\n' and not os.get_blocking(fd) is False
    os.close(fd)
    secret = root_only_secret(tmp_path / "secret.json", '{"step": 99}')
    (mine / "link.json").symlink_to(secret)
    assert _refused(mine / "link.json", OTHER_UID) == SYMLINK
    assert _refused(mine / "link.json") == SYMLINK  # config paths too: no link is followed
    os.mkfifo(mine / "rank5.json")
    assert _refused(mine / "rank5.json") == NOT_REGULAR  # and the open did not block
    assert _refused("/dev/null") == NOT_REGULAR
    assert _refused(secret, OTHER_UID) == WRONG_OWNER
    # A folder swapped for a link to a root folder: the last component is a plain file, the owner
    # check (of the opened descriptor) refuses it.
    rootdir = tmp_path / "rootdir"
    rootdir.mkdir()
    (rootdir / "rank0.json").write_text('{"step": 99}')
    (mine / "hb").symlink_to(rootdir)
    assert _refused(mine / "hb" / "rank0.json", OTHER_UID) == WRONG_OWNER


def test_a_fifo_among_heartbeat_files_is_an_error_of_that_file_only(tmp_path):
    hb = tmp_path / "hb"
    hb.mkdir()
    for r in (4, 6):
        (hb / f"rank{r}.json").write_text(json.dumps({"step": 10 + r, "time": time.time()}))
    os.mkfifo(hb / "rank5.json")
    probe = HeartbeatProbe(HeartbeatProbeConfig.model_validate({"enabled": True, "paths": [f"{hb}/*.json"]}))
    readings = {r.rank: r for r in _finishes(probe.collect).value.readings}
    assert readings[4].step == 14 and readings[6].step == 16
    assert "FIFO" in (readings[5].error or "") and readings[5].step is None


def _poll(t: Tailer, got: list, now: float) -> None:
    _finishes(lambda: t.poll(lambda f, data, stop: got.append(data[:stop]), now))


def test_the_tailer_refuses_a_log_swapped_for_a_link_and_a_fifo(tmp_path):
    """Fails on the code before the fix: the root-only line was read through the link."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log, fifo = logs / "train.log", logs / "rank5.log"
    log.write_bytes(b"")
    os.mkfifo(fifo)
    t, got = Tailer([SourceSpec(name="train", paths=(str(logs / "*.log"),), start="beginning")]), []
    _poll(t, got, 1.0)
    with open(log, "ab") as fh:
        fh.write(b"own line\n")
    _poll(t, got, 2.0)
    assert b"".join(got) == b"own line\n"
    secret = root_only_secret(tmp_path / "secret.log", "ROOT ONLY LINE\n")
    os.unlink(log)
    log.symlink_to(secret)
    _poll(t, got, 3.0)
    assert b"ROOT ONLY" not in b"".join(got)
    assert "symbolic link" in t.errors[str(log)]


def test_the_tailer_reads_a_discovered_log_only_as_its_ranks_user(tmp_path, other_root):
    """A rank's log folder swapped for a link to a root folder with a file of the same name: the
    file read is not the rank's user's (checked on the opened descriptor), so it is refused."""
    mine = other_users_dir(other_root / "u")
    logs = other_users_dir(mine / "logs")
    log = logs / "train.log"
    write_as_other_user(log, b"")
    spec = SourceSpec(name="train", paths=(str(log),), start="beginning", path_owners=((str(log), OTHER_UID),))
    t, got = Tailer([spec]), []
    _poll(t, got, 1.0)
    with open(log, "ab") as fh:
        fh.write(b"own line\n")
    _poll(t, got, 2.0)
    assert b"".join(got) == b"own line\n" and t.errors == {}
    rootdir = tmp_path / "rootdir"
    rootdir.mkdir()
    root_only_secret(rootdir / "train.log", "ROOT ONLY LINE\n")
    os.rename(logs, mine / "old-logs")
    (mine / "logs").symlink_to(rootdir)
    _poll(t, got, 3.0)
    assert b"ROOT ONLY" not in b"".join(got)
    assert "not by the rank's user" in t.errors[str(log)]


def _snapshot(cfg: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "watchdog", "snapshot", "--json", "-c", str(cfg), "--reason", "t"],
                         capture_output=True, text=True, cwd=str(REPO), timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_fifo_named_like_a_heartbeat_does_not_cost_the_snapshot_the_files_after_it(tmp_path):
    """Fails on the code before the fix: the reader blocked in open() on the FIFO until the
    budget, and the heartbeat files after it (rank 6) were missing from every snapshot."""
    hb, logs = tmp_path / "hb", tmp_path / "logs"
    hb.mkdir(), logs.mkdir()
    for r in (4, 6):
        (hb / f"rank{r}.json").write_text(json.dumps({"step": 10 + r}))
    os.mkfifo(hb / "rank5.json")
    (logs / "a.log").write_text("first\n")
    os.mkfifo(logs / "b.log")
    (logs / "c.log").write_text("evidence of rank 6\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({
        "node": {"name": "n"}, "job": {"name": "j"},
        "paths": {"state_dir": str(tmp_path / "state"), "snapshot_dir": str(tmp_path / "snaps")},
        "snapshots": {"enabled": True, "min_free_space": "1MiB", "dmesg_lines": 0, "budget": "20s"},
        "probes": {"heartbeat": {"enabled": True, "paths": [f"{hb}/rank*.json"]},
                   "logs": {"sources": [{"name": "train", "paths": [f"{logs}/*.log"]}]}}}))
    got = _snapshot(cfg)
    with tarfile.open(got["path"]) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        manifest = json.load(tar.extractfile(f"{top}/manifest.json"))
    items = {i["name"]: i for i in manifest["items"]}
    assert any(n.endswith("hb/rank6.json") for n in names) and any(n.endswith("logs/c.log") for n in names)
    assert not any(n.endswith("rank5.json") or n.endswith("b.log") for n in names)
    for name, fifo in (("heartbeat", hb / "rank5.json"), ("logs:train", logs / "b.log")):
        skipped = {p["what"]: p["reason"] for p in items[name]["problems"]}
        assert skipped == {str(fifo): "not_regular_file"}, items[name]
    assert manifest["complete"] is True and manifest["missing"] == [], manifest["missing"]  # nothing hung


def _as_other_user(*argv: str) -> None:
    subprocess.run(list(argv), check=True, preexec_fn=as_other_user, timeout=30)


def _swap_for_link(target: Path, link: Path) -> None:
    """As the other user: replace `link` by a symlink to `target` (renamed over it, atomically)."""
    _as_other_user("ln", "-s", str(target), f"{link}.tmp")
    _as_other_user("mv", "-T", f"{link}.tmp", str(link))


@pytest.mark.slow
def test_a_heartbeat_swapped_for_a_link_to_a_root_file_never_shows_its_content(tmp_path, other_root, make_daemon,
                                                                               procs):
    """Fails on the code before the fix: the root-only file's content appeared in /api/status."""
    tag, marker = f"t-{uuid.uuid4().hex[:12]}", f"TOPSECRET-{uuid.uuid4().hex[:8]}"
    mine = other_users_dir(other_root / "u")
    hbdir = other_users_dir(mine / "hb")
    hb = hbdir / "rank0.json"
    write_as_other_user(hb, json.dumps({"step": 5, "phase": "train", "time": time.time()}).encode())
    secret = root_only_secret(tmp_path / "secret.json", json.dumps(
        {"step": 31337, "phase": "train", "time": time.time(), "token": marker, "loss": 0.123456}))
    procs(["sleep", "600"], env={"PATH": "/usr/bin:/bin", TAG: tag, "RANK": "0", "LOCAL_RANK": "0",
                                 "NPU_WATCHDOG_JOB": "hostile", "NPU_WATCHDOG_HEARTBEAT": str(hb)},
          preexec_fn=as_other_user)
    d = make_daemon({"discovery": {"enabled": True, "only_env": f"{TAG}={tag}", "interval": "1s"},
                     "probes": {"process": {"interval": "1s"},
                                "heartbeat": {"interval": "300ms", "unreadable_after": "1s"}}})

    def hb_result() -> str:
        return next(p for p in d.status()["probes"] if p["name"] == "heartbeat")["last_result"] or ""

    def everything() -> str:
        return "".join(http_get(d.url + p)[1] for p in ("/api/status", "/", "/metrics"))

    wait_for(lambda: "steps 5..5" in hb_result(), timeout=30, what="the rank's own heartbeat read")
    _swap_for_link(secret, hb)

    def leaked_or_refused():
        text = everything()
        if marker in text or "31337" in text or "0.123456" in text:
            return "leaked"
        return [f for f in d.status()["findings"] if f["rule"] == "heartbeat_unreadable"
                and "symbolic link" in f["summary"]]
    found = wait_for(leaked_or_refused, timeout=30, what="a finding for the link")
    assert found != "leaked", "the root-only file's content is shown"
    assert "/hb/rank0.json" in json.dumps(found)
    text = everything()
    assert marker not in text and "31337" not in text and "0.123456" not in text
    # The folder swapped for a link to a root folder holding a file of the same name.
    rootdir = tmp_path / "rootdir"
    rootdir.mkdir()
    (rootdir / "rank0.json").write_text(secret.read_text())
    os.chmod(rootdir / "rank0.json", 0o600)
    _as_other_user("mv", "-T", str(hbdir), str(mine / "old-hb"))
    _as_other_user("ln", "-s", str(rootdir), str(hbdir))
    wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "heartbeat_unreadable"
                      and "not by the rank's user" in f["summary"]], timeout=30, what="a finding for the owner")
    text = everything()
    assert marker not in text and "31337" not in text and "0.123456" not in text
