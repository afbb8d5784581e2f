"""A port for a server that another process will bind a moment later (the daemon's /metrics, a
simulated node's Alertmanager), chosen so that nothing else takes it in between.

The usual trick, binding port 0 and handing the number on, picks from the kernel's ephemeral range
(`net.ipv4.ip_local_port_range`, 32768-60999 by default), the range every outgoing connection
takes its local port from. On a busy machine (parallel tests: thousands of HTTP requests a minute)
a client connection took such a port before the daemon bound it, and the daemon came up without
/metrics ("Address already in use"). Below that range no outgoing connection ever lands, so a
port there that binds now stays free until its server takes it, unless another process picks the
same one of some twenty thousand at the same moment.
"""

from __future__ import annotations

import random
import socket

#: The lowest port chosen: above the registered services most machines run.
LOWEST = 10000
#: Where the kernel does not say (not Linux), its default.
EPHEMERAL_DEFAULT = 32768
#: Ports tried below the ephemeral range before falling back to one the kernel picks.
TRIES = 100
RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_low(path: str = RANGE_FILE) -> int:
    """The first port of the kernel's ephemeral range."""
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_DEFAULT


def _binds(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1", range_file: str = RANGE_FILE) -> int:
    """A port that binds now, below the ephemeral range when it leaves room (else the kernel's pick)."""
    high = ephemeral_low(range_file)
    rng = random.SystemRandom()
    if high - LOWEST >= 1000:
        for _ in range(TRIES):
            port = rng.randrange(LOWEST, high)
            if _binds(host, port):
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
