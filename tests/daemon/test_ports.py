"""The port a test or the demo hands to a server that binds it later (watchdog/demo/ports.py): outside
the kernel's ephemeral range, where no outgoing connection can take it in between, and out of
Kubernetes' NodePort range."""

from __future__ import annotations

import socket

import pytest

from watchdog.demo.ports import LOWEST, NODE_PORTS, ephemeral_range, free_port, spans


def test_ports_come_from_the_first_span_outside_the_ephemeral_range_and_bind():
    """On the usual range (32768-60999) the first span is below it and below the NodePort range;
    on a machine tuned otherwise, whatever `spans` says comes first."""
    first, end = spans()[0]
    low, _ = ephemeral_range()
    if low >= NODE_PORTS:
        assert (first, end) == (LOWEST, NODE_PORTS)
    ports = {free_port() for _ in range(50)}
    assert all(first <= p < end for p in ports), sorted(ports)
    assert len(ports) > 40  # spread over the span, not one port again and again
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_when_every_port_below_the_range_is_held_one_above_it_is_handed_out(tmp_path):
    """The span below narrowed to the 1,000 ports from LOWEST, each held here: none of them is
    handed out (each try fails to bind); one above the ephemeral range is, and it binds."""
    rng = tmp_path / "range"
    rng.write_text(f"{LOWEST + 1000}\t60999\n")
    held = []
    try:
        for port in range(LOWEST, LOWEST + 1000):
            s = socket.socket()
            held.append(s)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                pass  # in use already: held all the same
        port = free_port(range_file=str(rng))
        assert 61000 <= port < 65536, port
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    finally:
        for s in held:
            s.close()


def test_the_spans_follow_the_range_file_and_a_damaged_one_means_the_default(tmp_path):
    def spans_of(text):
        f = tmp_path / "range"
        f.write_text(text)
        return spans(str(f))

    assert spans_of("32768\t60999\n") == [(LOWEST, NODE_PORTS), (61000, 65536)]
    assert spans_of("20000 60999") == [(LOWEST, 20000), (61000, 65536)]
    assert spans_of("1024 40000") == [(40001, 65536)]  # a tuned host: above the range only
    assert spans_of("garbage") == spans_of("32768 60999")
    assert spans(str(tmp_path / "missing")) == spans_of("32768 60999")
    tuned = tmp_path / "tuned"
    tuned.write_text("1024 65535")  # no room either side: the kernel picks, and it binds
    port = free_port(range_file=str(tuned))
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_an_ipv6_host_gets_a_port_too():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback on this machine: {exc}")
    port = free_port("::1")
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", port))
