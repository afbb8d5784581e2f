"""The links and subhealth probes against the fake hccn_tool and npu-smi run as real programs
(subprocesses under hard timeouts): what each round reads, that a down is confirmed by a second
read, that flaps between reads come from the change records, that a hung or failing tool is
reported and never stops the other NPUs, and that only read-only queries are ever sent."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.helpers import REPO
from watchdog.config.schema import Config
from watchdog.probes.base import ProbeError
from watchdog.probes.links import LinksProbe
from watchdog.probes.subhealth import SubhealthProbe

FAKE_HCCN = str(REPO / "tests" / "fakes" / "hccn_tool")
FAKE_NPU_SMI = str(REPO / "tests" / "fakes" / "npu-smi")


def write(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


@pytest.fixture
def hccn(tmp_path, monkeypatch):
    scenario = tmp_path / "hccn.json"
    log = tmp_path / "hccn.log"
    write(scenario, {"devices": [0, 1, 2, 3]})
    monkeypatch.setenv("FAKE_HCCN_TOOL_SCENARIO", str(scenario))
    monkeypatch.setenv("FAKE_HCCN_TOOL_LOG", str(log))
    return scenario, log


def probe(**links) -> LinksProbe:
    cfg = Config.model_validate({"probes": {"links": {"hccn_tool": FAKE_HCCN, "devices": [0, 1, 2, 3], **links}}})
    return LinksProbe(cfg.probes.links)


def ports(p: LinksProbe):
    return {r.device: r for r in p.collect().value.ports}


def test_a_down_link_is_confirmed_by_the_next_read_and_nothing_but_queries_is_sent(hccn):
    scenario, log = hccn
    p = probe()
    assert all(r.link_up for r in ports(p).values())
    write(scenario, {"devices": [0, 1, 2, 3], "ports": {"2": {"link": "DOWN", "changes": [[time.time(), "DOWN"]]}}})
    first = ports(p)[2]
    assert (first.link_up, first.down_reads) == (False, 1)
    second = ports(p)[2]
    assert (second.link_up, second.down_reads) == (False, 2) and second.down_since == first.down_since
    calls = log.read_text().splitlines()
    assert calls and all(c.split()[2] in ("-link", "-link_stat", "-optical", "-net_health", "-stat", "-fec", "-lldp")
                         and c.endswith(" -g") for c in calls), calls
    # One run per NPU per round.
    assert len(calls) == 3 * 4


def test_detail_queries_take_turns_and_flaps_between_reads_come_from_the_records(hccn):
    scenario, log = hccn
    now = time.time()
    flaps = [[now - 400, "DOWN"], [now - 399, "UP"], [now - 200, "DOWN"], [now - 198, "UP"],
             [now - 50, "DOWN"], [now - 49, "UP"]]
    write(scenario, {"devices": [0, 1, 2, 3], "ports": {"1": {"changes": flaps, "rx_mw": [1.0, 0.05, 1.0, 1.0],
                                                              "stat": {"roce_rx_err_pkt_num": 7}}}})
    p = probe()
    for _ in range(12):
        got = ports(p)
    one = got[1]
    assert one.link_up is True and one.up_count == 4 and one.down_count == 3
    assert len(one.downs) == 3 and abs(one.downs[0] - (now - 400)) < 3
    assert one.optical is not None and dict(one.optical.rx_mw)[1] == 0.05
    assert dict(one.counters)["roce_rx_err_pkt_num"] == 7 and one.net_health == "Success"
    assert one.fec == "rs" and one.lldp is not None and one.lldp.port == "400GE1/1/2:2"
    kinds = [c.split()[2] for c in log.read_text().splitlines() if c.startswith("-i 1 ")]
    assert kinds[0::2] == ["-link"] * 6  # every other round reads the link state


def test_a_hung_or_failing_device_is_reported_and_the_others_are_read(hccn):
    scenario, _log = hccn
    write(scenario, {"devices": [0, 1, 2, 3], "ports": {"0": {"behavior": "hang"}, "3": {"behavior": "garbage"}}})
    p = probe(command_timeout="1s")
    got = ports(p)
    assert got[0].link_up is None and "no answer within 1s" in dict(got[0].errors)["link"]
    assert got[3].link_up is None and "unreadable" in dict(got[3].errors)["link"]
    assert got[1].link_up is True and got[2].link_up is True
    write(scenario, {"devices": [0, 1, 2, 3], "behavior": "fail"})
    with pytest.raises(ProbeError, match="every hccn_tool query"):
        p.collect()


def test_without_hccn_tool_the_round_says_absent(tmp_path):
    p = probe(hccn_tool=str(tmp_path / "no-such-tool"))
    got = p.collect()
    assert got.value.absent and got.value.ports == () and "not found" in got.summary


def test_subhealth_reads_ecc_clock_and_counts_a_code_each_time_it_comes_back(tmp_path, monkeypatch):
    scenario = tmp_path / "npu.json"
    monkeypatch.setenv("FAKE_NPU_SMI_SCENARIO", str(scenario))
    busy = {"ecc_single_bit": 40, "aicore": 90, "aicore_cur_freq_mhz": 1000}
    write(scenario, {"generate": {"npus": 2}, "devices": {"1": busy}})
    cfg = Config.model_validate({"probes": {"npu": {"enabled": True, "npu_smi": FAKE_NPU_SMI}}})
    p = SubhealthProbe(cfg.probes.subhealth, FAKE_NPU_SMI, 5.0)
    alarm = {"generate": {"npus": 2}, "devices": {"1": {**busy, "health": "Alarm", "health_codes": ["8C084E00"]}}}
    ok = {"generate": {"npus": 2}, "devices": {"1": busy}}
    seen = []
    # A chip is asked -t health, -t ecc, -t common in turn: health is read at rounds 0, 3, 6, 9.
    for state in (None, None, alarm, None, None, ok, None, None, alarm, None):
        if state is not None:
            write(scenario, state)
        seen.append({(c.npu, c.chip): c for c in p.collect().value.chips})
    one = seen[1][(1, 0)]
    assert one.ecc is not None and one.ecc.single_bit == 40
    assert seen[2][(1, 0)].common.aicore_cur_freq_mhz == 1000 and seen[2][(1, 0)].throttled_since is not None
    last = seen[-1][(1, 0)]
    assert last.codes == ("8C084E00",) and len(dict(last.appearances)["8C084E00"]) == 2
