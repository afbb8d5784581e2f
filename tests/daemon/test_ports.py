"""The port a test or the demo hands to a server that binds it later (watchdog/demo/ports.py): below
the kernel's ephemeral range, where no outgoing connection can take it in between."""

from __future__ import annotations

import socket

from watchdog.demo.ports import LOWEST, ephemeral_low, free_port


def test_ports_are_below_the_ephemeral_range_and_bind(tmp_path):
    low = ephemeral_low()
    ports = {free_port() for _ in range(50)}
    assert all(LOWEST <= p < low for p in ports), sorted(ports)
    assert len(ports) > 40  # spread over the range, not one port again and again
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_when_every_port_below_the_range_is_held_the_kernels_pick_is_handed_out(tmp_path):
    """The range narrowed to the 1,000 ports above LOWEST, each held here: none of them is handed
    out (each try fails to bind), and the kernel's pick, which binds, is."""
    rng = tmp_path / "range"
    rng.write_text(f"{LOWEST + 1000}\t60999\n")
    held = []
    try:
        for port in range(LOWEST, LOWEST + 1000):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
        port = free_port(range_file=str(rng))
        assert not (LOWEST <= port < LOWEST + 1000)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    finally:
        for s in held:
            s.close()


def test_the_range_file_is_read_and_a_damaged_one_means_the_default(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("40000\t60999\n")
    bad.write_text("garbage")
    assert ephemeral_low(str(good)) == 40000
    assert ephemeral_low(str(bad)) == 32768
    assert ephemeral_low(str(tmp_path / "missing")) == 32768
    small = tmp_path / "small"
    small.write_text(f"{LOWEST + 10} 60999")  # too little room below: the kernel picks
    assert free_port(range_file=str(small)) >= ephemeral_low()
