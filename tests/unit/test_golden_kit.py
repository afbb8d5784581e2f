"""The behaviour goldens' reduction (tests/golden_kit.py): values never matter, everything else does.

The demo goldens themselves are checked in tests/e2e/test_demo_sequence.py; these tests show that the
reduction they compare would see a renamed metric, a changed TYPE or HELP, a new or lost label, a
renamed probe, and a changed message count, and that it ignores values and serving order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.golden_kit import GoldenError, message_counts, metrics_shape

EXPOSITION = """\
# HELP npu_watchdog_probe_runs_total Probe rounds run.
# TYPE npu_watchdog_probe_runs_total counter
npu_watchdog_probe_runs_total{probe="npu"} 12.0
npu_watchdog_probe_runs_total{probe="logs"} 30.0
# HELP npu_watchdog_rank_info One series per rank process.
# TYPE npu_watchdog_rank_info gauge
npu_watchdog_rank_info{path="/x/a, \\"b\\"",pid="41",rank="0",training_job="j"} 1
npu_watchdog_rank_info{path="/x/c",pid="42",rank="1",training_job="j"} 1
# HELP npu_watchdog_alert_first_seen_timestamp_seconds First seen.
# TYPE npu_watchdog_alert_first_seen_timestamp_seconds gauge
npu_watchdog_alert_first_seen_timestamp_seconds{rank="6",rule="rank_missing"} 1.7e+09
"""


def test_values_order_and_per_rank_series_do_not_matter():
    other = (EXPOSITION.replace("12.0", "99.0").replace('pid="42"', 'pid="7"')
             .replace('rank="6",rule="rank_missing"', 'rank="2",rule="heartbeat_stale"'))
    blocks = other.split("# HELP ")
    reordered = "# HELP ".join([blocks[0]] + blocks[:0:-1])
    assert metrics_shape(other) == metrics_shape(EXPOSITION) == metrics_shape(reordered)
    assert 'npu_watchdog_rank_info{path,pid,rank,training_job}' in metrics_shape(EXPOSITION)


@pytest.mark.parametrize("change", [
    ("npu_watchdog_probe_runs_total{", "npu_watchdog_probe_rounds_total{"),  # renamed series
    ("# TYPE npu_watchdog_rank_info gauge", "# TYPE npu_watchdog_rank_info counter"),
    ("Probe rounds run.", "Probe rounds."),  # HELP
    ('probe="logs"', 'probe="log"'),  # a renamed probe
    (',training_job="j"} 1\nnpu_watchdog_rank_info{path="/x/c"', '} 1\nnpu_watchdog_rank_info{path="/x/c"'),
    ('npu_watchdog_probe_runs_total{probe="logs"} 30.0\n', ""),  # a lost series
])
def test_every_change_but_values_shows(change):
    old, new = change
    assert old in EXPOSITION
    assert metrics_shape(EXPOSITION.replace(old, new, 1)) != metrics_shape(EXPOSITION)


def test_an_unreadable_line_is_an_error_not_a_silent_pass():
    with pytest.raises(GoldenError):
        metrics_shape(EXPOSITION + 'npu_watchdog_x{probe=npu} 1\n')


def test_message_counts_name_steps_without_their_numbers_and_see_every_count():
    step = SimpleNamespace(name="rank crash: rank 6 is killed", messages=1, resolved=0,
                           channels={"timeline": {"firing": 1, "resolved": 0}})
    base = message_counts([step])
    assert '"rank crash"' in base and "rank 6" not in base
    for field, value in (("messages", 2), ("resolved", 1), ("channels", {"timeline": {"firing": 1, "resolved": 1}})):
        assert message_counts([SimpleNamespace(**{**vars(step), field: value})]) != base, field
