"""A port for a server that another process will bind a moment later (the daemon's /metrics, a
simulated node's Alertmanager), chosen so that nothing else takes it in between.

The usual trick, binding port 0 and handing the number on, picks from the kernel's ephemeral range
(`net.ipv4.ip_local_port_range`, 32768-60999 by default), the range every outgoing connection
takes its local port from. On a busy machine (parallel tests: thousands of HTTP requests a minute)
a client connection took such a port before the daemon bound it, and the daemon came up without
/metrics ("Address already in use"). Outside that range no outgoing connection ever lands, so a
port there that binds now stays free until its server takes it, unless another process picks the
same one of some twenty thousand at the same moment. Below the range is tried first, stopping
short of Kubernetes' NodePort range (30000-32767, which kube-proxy may redirect without holding a
socket), then above it (a host tuned to `1024 65535` leaves no room either side: the kernel picks).
"""

from __future__ import annotations

import random
import socket
from typing import List, Tuple

#: The lowest port chosen: above the registered services most machines run.
LOWEST = 10000
#: Kubernetes' default NodePort range starts here: nothing at or above it (below the ephemeral
#: range) is chosen.
NODE_PORTS = 30000
#: Where the kernel does not say (not Linux), its default range.
EPHEMERAL_DEFAULT = (32768, 60999)
#: Ports tried per span before the next one; a span smaller than ROOM is not tried.
TRIES = 100
ROOM = 1000
RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_range(path: str = RANGE_FILE) -> Tuple[int, int]:
    """The kernel's ephemeral range, first and last port."""
    try:
        with open(path, encoding="ascii") as fh:
            low, high = (int(v) for v in fh.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return EPHEMERAL_DEFAULT


def spans(path: str = RANGE_FILE) -> List[Tuple[int, int]]:
    """Where a port is chosen, in order (half-open spans), each with room for ROOM ports."""
    low, high = ephemeral_range(path)
    out = [(LOWEST, min(low, NODE_PORTS)), (max(high + 1, LOWEST), 65536)]
    return [(a, b) for a, b in out if b - a >= ROOM]


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _binds(host: str, port: int) -> bool:
    with socket.socket(_family(host)) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1", range_file: str = RANGE_FILE) -> int:
    """A port that binds now, outside the ephemeral range where there is room (else the kernel's pick)."""
    rng = random.SystemRandom()
    for first, end in spans(range_file):
        for _ in range(TRIES):
            port = rng.randrange(first, end)
            if _binds(host, port):
                return port
    with socket.socket(_family(host)) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
