"""The alert volume of a 1,000-node job incident, pushed into a local two-peer Alertmanager cluster
with `npu-watchdog relay` behind it.

Run by hand (`make bench`, or `python bench/bench_fleet_load.py [--quick] [--nodes 1000] [--ranks 8]`).
What it does, with the real `prometheus-alertmanager` (Debian package) on 127.0.0.1, configured from
contrib/alertmanager (group_wait 5s, group_interval 3s, --cluster.peer-timeout=3s):

1. firing: every simulated node POSTs its alerts (one HCCL timeout per rank, an OOM on node 7)
   to both peers, 8 POSTs in flight (what `alerting.mode: fleet` nodes do when the job hangs);
2. refresh: the same again (each node re-pushes every `resend_interval`, 1 min by default);
3. resolved: every node pushes its alerts resolved.

Measured: the POST rate the cluster sustained, the time until both peers hold every alert, the
time until the relay's one message, the size of Alertmanager's webhook with the whole incident,
and the messages sent (target: exactly one firing and one resolved, no failed POST).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.receivers import Receiver  # noqa: E402
from tests.fleet_kit import ALERTMANAGER, AmCluster, Relay, push_incident  # noqa: E402
from tests.helpers import wait_for  # noqa: E402


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    return (f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, "
            f"load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="100 nodes")
    args = ap.parse_args()
    nodes = 100 if args.quick else args.nodes
    if ALERTMANAGER is None:
        print("prometheus-alertmanager is not installed (Debian package `prometheus-alertmanager`)")
        return 1
    print("command:", " ".join([Path(sys.executable).name] + sys.argv))
    print("machine:", machine())
    job, total = "load", nodes * args.ranks
    with tempfile.TemporaryDirectory() as tmp, Receiver("feishu", secret="bench") as rx:
        relay = Relay(Path(tmp) / "relay", rx.url, "bench")
        am = AmCluster(Path(tmp) / "am", relay.url + "/alertmanager")
        try:
            am.wait_ready()
            first = time.time() - 60
            t0, wall0 = time.monotonic(), time.time()
            fire = push_incident(am.urls, job, nodes, args.ranks, first, culprit=7)
            for url in am.urls:
                wait_for(lambda: len(AmCluster.alerts(url, job)) == total, timeout=600, interval=1, what="all alerts")
            held = time.monotonic() - t0
            rx.wait_for(1, timeout=600)
            paged = rx.accepted()[0].time - wall0
            refresh = push_incident(am.urls, job, nodes, args.ranks, first, culprit=7)
            wait_for(lambda: f"{total} alert(s) on {nodes} node(s)" in relay.log(), timeout=600, what="whole webhook")
            size = max(int(m) for m in re.findall(rf"{total} alert\(s\) on {nodes} node\(s\), 1 root, (\d+) bytes",
                                                   relay.log()))
            done = push_incident(am.urls, job, nodes, args.ranks, first, resolved=True, culprit=7)
            rx.wait_for(2, timeout=600)
            time.sleep(10)
            titles = [r.json["card"]["header"]["title"]["content"] for r in rx.accepted()]
        finally:
            am.stop()
            relay.stop()
    fails = len(fire["failures"]) + len(refresh["failures"]) + len(done["failures"])
    print(f"{'phase':<10} {'POSTs':>6} {'alerts':>7} {'bytes/peer':>11} {'seconds':>8} {'POST/s':>7} {'failed':>6}")
    for name, st in (("firing", fire), ("refresh", refresh), ("resolved", done)):
        print(f"{name:<10} {st['posts']:>6} {st['alerts']:>7} {st['bytes_per_peer']:>11} {st['seconds']:>8.1f} "
              f"{st['posts'] / st['seconds']:>7.0f} {len(st['failures']):>6}")
    print(f"both peers hold all {total} alerts after {held:.1f} s; first message after {paged:.1f} s; "
          f"webhook with the whole incident: {size / 1e6:.2f} MB")
    for t in titles:
        print("message:", t)
    ok = fails == 0 and len(titles) == 2 and "RESOLVED" in titles[1] and "node-0007" in titles[0]
    print(f"SUMMARY fleet load {nodes} nodes x {args.ranks} ranks: {len(titles)} messages (target 2: one firing naming "
          f"node-0007, one resolved), {fails} failed POSTs (target 0): {'PASS' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
