"""Fleet mode end to end: 16 simulated nodes (real daemons in `alerting.mode: fleet`, each with its
own state, port, fake npu-smi, rank processes and logs) push to a real two-peer Alertmanager
cluster configured from contrib/alertmanager; `npu-watchdog relay` sends to a signed Feishu
look-alike. Each scenario counts the messages: one firing and one resolved per job incident.

The scenarios share one fleet (starting 16 daemons is the expensive part) and run in file order;
each waits until its incident resolved everywhere before the next starts. The peer-loss scenario
runs last, since it kills a peer.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Dict, List

import pytest

from tests.fakes.receivers import Receiver
from tests.fleet_kit import ALERTMANAGER, AmCluster, Relay, SimNode, push_incident, wait_quiet
from tests.helpers import http_get, wait_for
from watchdog.config.sections.stall import StallConfig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(ALERTMANAGER is None,
                       reason="alertmanager is not installed (Debian package `prometheus-alertmanager`)"),
]

JOB = "llm-fleet"
NODES = 16
SECRET = "fleet-feishu-secret"
#: The stall rule's duration on the simulated nodes (the default): a simulated job in which the
#: daemons saw no progress would be called stalled this long after they started.
STALL_AFTER = StallConfig().duration


def explained(pred, explain, **kw) -> None:
    """wait_for, whose timeout also says what was there instead (which rules, which nodes)."""
    try:
        wait_for(pred, **kw)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {explain()}") from None


class Fleet:
    def __init__(self, root: Path):
        self.root = root
        self.rx = Receiver("feishu", secret=SECRET).start()
        self.relay = Relay(root / "relay", self.rx.url, SECRET)
        self.am = AmCluster(root / "am", self.relay.url + "/alertmanager")
        self.nodes: List[SimNode] = []
        self.seen = 0  # messages of earlier scenarios
        self.up_at = 0.0  # monotonic time when every daemon was following its rank logs

    def start(self) -> "Fleet":
        self.am.wait_ready()
        self.nodes = [SimNode(self.root / f"node-{i:02d}", i, JOB, self.am.urls) for i in range(1, NODES + 1)]
        for n in self.nodes:
            n.start()
        for n in self.nodes:
            wait_for(lambda: n.daemon.alive() and http_get(n.daemon.url + "/healthz")[0] in (200, 503),
                     timeout=120, what=f"{n.name} up")
            # A log file first seen at daemon start is read from its end: a line a rank writes
            # before the daemon's first round is, by design, never read (and that node would
            # report its part of the incident a rank step later, alone, as a new page).
            wait_for(lambda: n.daemon.metrics().get('npu_watchdog_log_files_followed{source="train"}') == n.ranks_n,
                     timeout=120, what=f"{n.name} following its rank logs")
        self.up_at = time.monotonic()
        return self

    def describe(self, job: str = JOB) -> str:
        """The job's alerts in each live peer (rule@host), for failure messages."""
        out = []
        for url, s in zip(self.am.urls, self.am.servers):
            if s.proc.poll() is None:
                rules = sorted({f"{a['labels']['alertname']}@{a['labels'].get('host', '?')}"
                                for a in AmCluster.alerts(url, job)})
                out.append(f"{url}: {', '.join(rules) or 'no alerts'}")
        return "; ".join(out)

    def node(self, i: int) -> SimNode:
        return self.nodes[i - 1]

    def titles(self) -> List[str]:
        return [r.json["card"]["header"]["title"]["content"] for r in self.rx.accepted()][self.seen:]

    def counts(self) -> Dict[str, int]:
        t = self.titles()
        resolved = sum(1 for x in t if " RESOLVED " in x)
        return {"firing": len(t) - resolved, "resolved": resolved}

    def wait_messages(self, firing: int, resolved: int, timeout: float = 150) -> List[str]:
        explained(lambda: self.counts() == {"firing": firing, "resolved": resolved}
                  or (self.counts()["firing"] > firing and self._fail()), self.explain, timeout=timeout,
                  what=f"{firing} firing and {resolved} resolved message(s)")
        return self.titles()

    def explain(self) -> str:
        return f"messages {self.titles()}; alerts {self.describe()}"

    def _fail(self) -> bool:
        raise AssertionError(f"too many messages: {self.titles()}\n{self.relay.log()[-3000:]}")

    def settle(self, firing: int = 1, resolved: int = 1, job: str = JOB) -> None:
        """The incident is over: no alert of the job left in a live peer, nothing waiting in the
        relay; then nothing more may arrive for a while (a late or duplicate notification)."""
        for url, s in zip(self.am.urls, self.am.servers):
            if s.proc.poll() is None:
                explained(lambda: not AmCluster.alerts(url, job), lambda: self.describe(job), timeout=120,
                          what="alerts gone from alertmanager")
        wait_for(lambda: self.relay.health()["outbox_pending"] == 0 and self.relay.health()["open_incidents"] == 0,
                 timeout=30, what="relay idle")
        wait_quiet(lambda: self._expect(firing, resolved), 8)
        self.seen = len(self.rx.accepted())

    def _expect(self, firing: int, resolved: int) -> None:
        assert self.counts() == {"firing": firing, "resolved": resolved}, self.titles()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
        self.am.stop()
        self.relay.stop()
        self.rx.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        yield f.start()
    finally:
        f.stop()


def test_a_collective_hang_on_every_node_pages_once(fleet):
    for n in fleet.nodes:
        n.signal_ranks(signal.SIGUSR2)  # every rank: HCCL watchdog timeout, then hung
    titles = fleet.wait_messages(1, 0)
    assert f"{JOB}: no root cause reported; earliest log_hccl on node-" in titles[0], titles
    wait_for(lambda: {a["labels"]["host"] for a in AmCluster.alerts(fleet.am.urls[1], JOB)}
             == {n.name for n in fleet.nodes}, timeout=60, what="every node's alerts in the second peer")
    titles = fleet.wait_messages(1, 1)
    assert "RESOLVED" in titles[1]
    fleet.settle()


def test_b_oom_on_node_7_rank_3_named_first_despite_later_hccl_timeouts(fleet):
    culprit = fleet.node(7)
    culprit.signal_ranks(signal.SIGUSR1, [3])  # rank 3 writes the OOM and dies
    wait_for(lambda: [a for a in AmCluster.alerts(fleet.am.urls[0], JOB) if a["labels"]["alertname"] == "log_oom"],
             timeout=60, what="the OOM in alertmanager")
    for n in fleet.nodes:
        if n is not culprit:
            n.signal_ranks(signal.SIGUSR2)  # the peers wait in the collective, then time out
    titles = fleet.wait_messages(1, 0)
    first_line = titles[0]
    assert f"{JOB}: first failure log_oom on node-07 " in first_line and "rank=3" in first_line, first_line
    # The symptoms of the other 15 nodes join the incident without another message.
    wait_for(lambda: len({a["labels"]["host"] for a in AmCluster.alerts(fleet.am.urls[0], JOB)}) == NODES,
             timeout=60, what="all nodes in the incident")
    card = fleet.rx.accepted()[fleet.seen].json["card"]
    assert "NPU out of memory" in card["body"]["elements"][0]["content"]
    fleet.wait_messages(1, 1)
    fleet.settle()
    culprit.start_rank(3)


def test_d_dead_card_on_one_node_pages_once_naming_it(fleet):
    sick = fleet.node(5)
    sick.set_card(2, gone=True)
    titles = fleet.wait_messages(1, 0)
    assert f"{JOB}: first failure npu_missing on node-05 " in titles[0] and "npu=2" in titles[0], titles
    assert "| 1 node, " in titles[0], titles
    time.sleep(12)  # another npu-smi round of every node: still the one message
    assert fleet.counts() == {"firing": 1, "resolved": 0}, fleet.titles()
    sick.set_card(2, gone=False)
    fleet.wait_messages(1, 1)
    fleet.settle()


def test_load_a_1000_node_incident_holds(fleet):
    """A 1,000-node job (8 ranks each) in a collective hang after an OOM on node 7: every node
    pushes its 8 alerts to both peers (2,000 POSTs, 8,000 alerts), then again (the refresh every
    `resend_interval`), then resolves. Both peers hold every alert, one message names the OOM."""
    job, nodes, ranks = "load-1000", 1000, 8
    first = time.time() - 60
    stats = push_incident(fleet.am.urls, job, nodes, ranks, first, culprit=7)
    assert stats["posts"] == 2 * nodes and stats["failures"] == [], stats["failures"][:3]
    for url in fleet.am.urls:
        wait_for(lambda: len(AmCluster.alerts(url, job)) == nodes * ranks, timeout=180, interval=2,
                 what="every alert in the peer")
    titles = fleet.wait_messages(1, 0, timeout=180)
    assert titles[0].startswith(f"[CRITICAL] {job}: first failure log_oom on node-0007 ") and "rank=56" in titles[0]
    again = push_incident(fleet.am.urls, job, nodes, ranks, first, culprit=7)  # the refresh round
    assert again["failures"] == []
    wait_for(lambda: f"{nodes * ranks} alert(s) on {nodes} node(s), 1 root" in fleet.relay.log(), timeout=120,
             what="a webhook carrying the whole incident")
    done = push_incident(fleet.am.urls, job, nodes, ranks, first, resolved=True, culprit=7)
    assert done["failures"] == []
    fleet.wait_messages(1, 1, timeout=180)
    fleet.settle(job=job)


def test_c_one_alertmanager_peer_killed_mid_incident(fleet):
    # The daemons have run for longer than the stall rule's duration, as they have when this
    # scenario runs after the others: a job the simulation let look stalled would page by itself.
    time.sleep(max(0.0, fleet.up_at + STALL_AFTER + 15 - time.monotonic()))
    assert not any(AmCluster.alerts(url, JOB) for url in fleet.am.urls), fleet.describe()
    first_half = fleet.nodes[: NODES // 2]
    for n in first_half:
        n.signal_ranks(signal.SIGUSR2)
    fleet.wait_messages(1, 0)
    first = fleet.am.first_sender()
    fleet.am.servers[first].kill9()  # the peer that sends first (position 0) dies, without a goodbye
    survivor = fleet.am.urls[1 - first]
    for n in fleet.nodes[NODES // 2:]:
        n.signal_ranks(signal.SIGUSR2)
    # No loss: the surviving peer holds every node's alerts; no second page for the same incident.
    wait_for(lambda: {a["labels"]["host"] for a in AmCluster.alerts(survivor, JOB)}
             == {n.name for n in fleet.nodes}, timeout=90, what="every node's alerts in the surviving peer")
    fleet.wait_messages(1, 1, timeout=180)
    fleet.settle()
