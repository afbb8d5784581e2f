"""The pure heartbeat parser on plain bytes: objects, JSON lines, torn writes, bad types."""

from __future__ import annotations

import math

import pytest

from watchdog.parse.heartbeat_format import HeartbeatFormatError, parse_heartbeat


def test_single_object_with_all_fields_and_unknown_ones_kept():
    b = parse_heartbeat(b'{"step": 120, "time": 1700000000.5, "loss": 2.5, "grad_norm": 1.25, '
                        b'"loss_scale": 65536, "tokens_per_s": 5120.0, "phase": "Train", "rank": 3, '
                        b'"pid": 4242, "lr": 0.0003}')
    assert (b.step, b.time, b.loss, b.grad_norm, b.loss_scale) == (120, 1700000000.5, 2.5, 1.25, 65536.0)
    assert (b.throughput, b.throughput_unit, b.phase, b.rank, b.pid) == (5120.0, "tokens_per_s", "train", 3, 4242)
    assert b.extra == {"lr": 0.0003}


def test_samples_per_s_is_throughput_too():
    b = parse_heartbeat(b'{"step": 1, "samples_per_s": 12.5}')
    assert (b.throughput, b.throughput_unit) == (12.5, "samples_per_s")


def test_json_lines_last_complete_line_counts_and_torn_tail_is_skipped():
    data = b'{"step": 1}\n{"step": 2}\n{"step": 3, "lo'
    assert parse_heartbeat(data).step == 2
    assert parse_heartbeat(b'{"step": 1}\n{"step": 2}\n').step == 2


@pytest.mark.parametrize("data,needle", [
    (b"", "empty"),
    (b"   \n", "empty"),
    (b'{"step": 12, "loss"', "half-written"),
    (b'{"step": "twelve"}', "'step'"),
    (b'{"loss": true}', "'loss'"),
    (b'{"time": 1700000000000}', "'time'"),
    (b'{"phase": 3}', "'phase'"),
    (b"[1, 2]", "JSON object"),
    (b"\xff\xfe", "UTF-8"),
])
def test_bad_content_is_a_specific_error(data, needle):
    with pytest.raises(HeartbeatFormatError) as exc:
        parse_heartbeat(data)
    assert needle in str(exc.value)


def test_nan_and_inf_survive_in_every_spelling():
    assert math.isnan(parse_heartbeat(b'{"loss": NaN}').loss)
    assert math.isinf(parse_heartbeat(b'{"grad_norm": Infinity}').grad_norm)
    assert math.isnan(parse_heartbeat(b'{"grad_norm": "nan"}').grad_norm)
    assert parse_heartbeat(b'{"loss": null}').loss is None
    assert parse_heartbeat(b'{"step": 7.0}').step == 7
