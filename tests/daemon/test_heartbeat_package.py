"""The installable heartbeat package: the NPU_WATCHDOG_HEARTBEAT contract, the flight recorder
(written by the package, read by the daemon's own reader), torn-record safety, step-end pacing."""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import REPO
from watchdog.parse import flight_recorder as fr
from watchdog.probes.heartbeat import read_ring_tail

PKG_DIR = REPO / "contrib" / "heartbeat"
sys.path.insert(0, str(PKG_DIR))

from npu_watchdog_heartbeat import Heartbeat, Pace, paths  # noqa: E402
from npu_watchdog_heartbeat.ring import FlightRecorder  # noqa: E402


# -- the path contract -------------------------------------------------------------------------

@pytest.mark.parametrize("spec,env,expected", [
    ("/hb/rank{rank}.json", {"RANK": "3"}, "/hb/rank3.json"),
    ("/hb/{rank}/beat-{rank}.json", {"RANK_ID": "5"}, "/hb/5/beat-5.json"),   # MindSpore
    ("/hb/", {"OMPI_COMM_WORLD_RANK": "7"}, "/hb/rank7.json"),                # MPI, trailing slash
    ("/hb/", {"PMI_RANK": "2", "LOCAL_RANK": "0"}, "/hb/rank2.json"),
    ("/hb/", {"LOCAL_RANK": "1"}, "/hb/rank1.json"),
    ("/hb/", {}, "/hb/rank0.json"),
    ("/hb/one.json", {"RANK": "4"}, "/hb/one.json"),                           # used as it is
    ("/hb/{x}-{rank}.json", {"RANK": "1"}, "/hb/{x}-1.json"),                  # other braces stay
])
def test_path_contract(spec, env, expected):
    assert paths.resolve(spec, environ=env) == expected


def test_existing_directory_and_unset_variable(tmp_path):
    assert paths.resolve(str(tmp_path), environ={"RANK": "2"}) == str(tmp_path / "rank2.json")
    assert paths.resolve(None, environ={"RANK": "2"}) is None
    assert paths.resolve(None, environ={paths.ENV_VAR: str(tmp_path) + "/"}) == str(tmp_path / "rank0.json")


def test_unset_variable_gives_an_inert_heartbeat(tmp_path, monkeypatch):
    monkeypatch.delenv(paths.ENV_VAR, raising=False)
    hb = Heartbeat()
    assert hb.enabled is False and hb.beat(step=1, loss=1.0) is False and hb.errors == 0
    hb.done()


def test_env_var_alone_gives_per_rank_files_and_no_daemon_import(tmp_path):
    """Two 'ranks' with only the environment set; the package never imports `watchdog`."""
    code = ("from npu_watchdog_heartbeat import Heartbeat; import sys; h = Heartbeat(min_interval=0); "
            "h.beat(step=int(sys.argv[1]), loss=0.5); h.done(); "
            "print(sorted(m for m in sys.modules if m == 'watchdog' or m.startswith('watchdog.')))")
    for rank in ("0", "1"):
        env = {**os.environ, "PYTHONPATH": str(PKG_DIR), paths.ENV_VAR: str(tmp_path) + "/", "RANK": rank}
        out = subprocess.run([sys.executable, "-c", code, str(10 + int(rank))], env=env, cwd=str(tmp_path),
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "[]"
    names = sorted(os.listdir(tmp_path))
    assert names == ["rank0.json", "rank0.json.ring", "rank1.json", "rank1.json.ring"]
    ring = fr.parse_ring((tmp_path / "rank1.json.ring").read_bytes())
    assert ring.header.rank == 1 and [r["step"] for r in ring.records] == [11]


# -- the flight recorder: package writer, daemon reader --------------------------------------

def test_ring_round_trip_keeps_every_field_and_the_newest_capacity(tmp_path):
    hb = Heartbeat(str(tmp_path / "rank{rank}.json"), rank=2, min_interval=60, ring_capacity=8, seed=1234)
    for step in range(1, 13):
        hb.beat(step=step, loss=1.0 / step, lr=1e-4, grad_norm=0.5, loss_scale=65536.0,
                samples_per_s=10.0 * step, skipped=(step == 11))
    hb.beat(step=12, loss=float("nan"))           # a later hook of the same step updates it
    hb.phase_now("checkpoint")
    ring = fr.parse_ring((tmp_path / "rank2.json.ring").read_bytes())
    assert ring.header.capacity == 8 and ring.header.rank == 2 and ring.header.pid == os.getpid()
    assert ring.header.counter == 12 and ring.torn == 0
    assert [r["step"] for r in ring.records] == list(range(5, 13))
    last = ring.records[-1]
    assert math.isnan(last["loss"]) and last["lr"] == 1e-4 and last["grad_norm"] == 0.5
    assert last["loss_scale"] == 65536.0 and last["throughput"] == 120.0 and last["unit"] == "samples_per_s"
    assert last["seed"] == 1234 and last["phase"] == "init" and "skipped" not in last
    assert ring.records[-2]["skipped"] is True
    assert "lr" not in fr.parse_ring(_ring_with(tmp_path, {"step": 1, "time": 1.0})).records[0]
    # The heartbeat file stayed throttled (first step, then the NaN at once, then the phase).
    assert hb.writes == 4


def _ring_with(tmp_path, rec):
    r = FlightRecorder(str(tmp_path / "one.ring"), capacity=2)
    r.record(rec)
    r.close()
    return (tmp_path / "one.ring").read_bytes()


def test_a_restarted_rank_continues_after_its_predecessors_steps(tmp_path):
    path = str(tmp_path / "r.ring")
    first = FlightRecorder(path, capacity=4)
    for s in (1, 2, 3):
        first.record({"step": s, "time": 1.0})
    first.close()
    second = FlightRecorder(path, capacity=4)
    second.record({"step": 0, "time": 2.0})
    ring = fr.parse_ring(open(path, "rb").read())
    assert [(r["seq"], r["step"]) for r in ring.records] == [(1, 1), (2, 2), (3, 3), (4, 0)]
    other = FlightRecorder(path, capacity=16)      # another geometry starts afresh
    other.record({"step": 9, "time": 3.0})
    assert [r["step"] for r in fr.parse_ring(open(path, "rb").read()).records] == [9]


def test_torn_records_are_skipped_and_the_rest_survive(tmp_path):
    path = tmp_path / "r.ring"
    rec = FlightRecorder(str(path), capacity=8)
    for s in range(1, 7):
        rec.record({"step": s, "time": float(s), "loss": 1.0})
    rec.close()
    data = bytearray(path.read_bytes())
    slot = lambda seq: fr.HEADER.size + (seq - 1) * 96  # noqa: E731
    data[slot(6):slot(6) + 8] = b"\0" * 8            # killed after zeroing seq 6's head
    data[slot(3) + 20] ^= 0xFF                       # a body byte changed under the reader
    struct.pack_into("<Q", data, 32, 5)              # ... and the counter was not bumped yet
    ring = fr.parse_ring(bytes(data))
    assert [r["step"] for r in ring.records] == [1, 2, 4, 5] and ring.torn == 2
    # The status tail reads only the newest slots, and finds a record the counter missed.
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, 32, 5)
    path.write_bytes(bytes(data))
    records, error = read_ring_tail(str(path), 3)
    assert error is None and [r["step"] for r in records] == [4, 5, 6]


def test_reader_racing_a_live_writer_never_returns_a_mixed_record(tmp_path):
    """A real writer process rewrites a tiny ring as fast as it can while we read it."""
    path = tmp_path / "r.ring"
    code = ("import sys, time; from npu_watchdog_heartbeat.ring import FlightRecorder; "
            "r = FlightRecorder(sys.argv[1], capacity=4); s = 0; end = time.time() + 3\n"
            "while time.time() < end:\n"
            "    s += 1; r.record({'step': s, 'time': float(s), 'loss': float(s) * 2, 'lr': float(-s)})\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)],
                            env={**os.environ, "PYTHONPATH": str(PKG_DIR)})
    try:
        checked = 0
        while proc.poll() is None:
            try:
                data = path.read_bytes()
                ring = fr.parse_ring(data)
            except (FileNotFoundError, fr.RingFormatError):
                continue
            for r in ring.records:
                assert r["loss"] == r["step"] * 2 and r["lr"] == -r["step"] and r["time"] == r["step"]
                checked += 1
    finally:
        proc.wait(10)
    assert proc.returncode == 0 and checked > 0


@pytest.mark.parametrize("mutate,message", [
    (lambda d: b"NOTARING" + d[8:], "not a flight recorder"),
    (lambda d: d[:8] + struct.pack("<H", 2) + d[10:], "unsupported version 2"),
    (lambda d: d[:16] + struct.pack("<I", 0) + d[20:], "bad capacity 0"),
    (lambda d: d[:16] + struct.pack("<I", 1 << 30) + d[20:], "bad capacity 1073741824"),
    (lambda d: d[:12] + struct.pack("<I", 8) + d[16:], "bad record size 8"),
    (lambda d: d[:40], "too short for a header: 40 of 64 bytes"),
])
def test_damaged_headers_get_a_specific_error(tmp_path, mutate, message):
    good = _ring_with(tmp_path, {"step": 1, "time": 1.0})
    with pytest.raises(fr.RingFormatError, match=message):
        fr.parse_ring(mutate(good))
    bad = tmp_path / "bad.ring"
    bad.write_bytes(mutate(good))
    records, error = read_ring_tail(str(bad))
    assert records == () and error.startswith("bad.ring: ") and message in error


def test_a_symlinked_ring_is_not_followed(tmp_path):
    secret = tmp_path / "secret.ring"
    secret.write_bytes(_ring_with(tmp_path, {"step": 1, "time": 1.0}))
    (tmp_path / "hb.json.ring").symlink_to(secret)
    records, error = read_ring_tail(str(tmp_path / "hb.json.ring"))
    assert records == () and error is not None and "cannot read" in error
    assert read_ring_tail(str(tmp_path / "absent.ring")) == ((), None)


# -- pacing ----------------------------------------------------------------------------------

def test_pace_counts_the_time_between_step_ends_including_the_loader():
    now = [0.0]
    pace = Pace(window=4, clock=lambda: now[0])
    pace.start()
    rates = []
    for loader, compute in [(0.0, 0.1)] * 4 + [(0.4, 0.1)] * 4:
        now[0] += loader + compute             # a begin->end timer would see 0.1 s every time
        rates.append(pace.step_end(100))
    assert rates[3] == pytest.approx(1000.0)
    assert rates[-1] == pytest.approx(200.0)   # 5x slower: the starving loader shows
    assert Pace().step_end(None) is None


# -- the distribution ------------------------------------------------------------------------

def test_wheel_builds_with_only_the_package_and_no_dependencies(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(tmp_path), str(PKG_DIR)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    wheels = list(tmp_path.glob("npu_watchdog_heartbeat-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith("METADATA"))).decode()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"npu_watchdog_heartbeat"}
    assert "Requires-Dist" not in meta
    # The Apache-2.0 text ships with every copy, byte for byte the project's LICENSE.
    [lic] = [n for n in names if n.split("/")[0].endswith(".dist-info") and n.rsplit("/", 1)[-1] == "LICENSE"]
    with zipfile.ZipFile(wheels[0]) as zf:
        assert zf.read(lic) == (PKG_DIR.parent.parent / "LICENSE").read_bytes()
    assert "License-File: LICENSE" in meta
    # Installed into a bare directory, it imports and writes with nothing else around.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheels[0])], check=True, capture_output=True, timeout=300)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(target),
           paths.ENV_VAR: str(tmp_path / "hb") + "/", "RANK": "3"}
    (tmp_path / "hb").mkdir()
    subprocess.run([sys.executable, "-S", "-c", "import npu_watchdog_heartbeat as h; h.Heartbeat().beat(step=1)"],
                   env=env, check=True, cwd=str(tmp_path), timeout=60)
    assert sorted(os.listdir(tmp_path / "hb")) == ["rank3.json", "rank3.json.ring"]


def test_ring_costs_no_file_write_per_step(tmp_path):
    """Steps go to the mapping: the file's mtime moves only through the page cache, and the
    heartbeat file itself is not rewritten inside the throttle interval."""
    hb = Heartbeat(str(tmp_path / "hb.json"), min_interval=3600)
    hb.beat(step=1)
    before = os.stat(tmp_path / "hb.json").st_ino
    for s in range(2, 2002):
        hb.beat(step=s, loss=1.0)
    assert os.stat(tmp_path / "hb.json").st_ino == before and hb.writes == 2
    assert fr.parse_ring((tmp_path / "hb.json.ring").read_bytes()).records[-1]["step"] == 2001
