"""`AlertStore.damaged` and `replace_damaged` (watchdog.alerting.deliver.rebuild): a database
damaged in place is told from a healthy one, and rebuilt with the alerts and silences given."""

from __future__ import annotations

from watchdog.alerting.decide.records import AlertRow
from watchdog.alerting.deliver.store import AlertStore
from watchdog.service import statefiles


def _row(fp: str) -> AlertRow:
    return AlertRow(fp, "log_oom", "critical", {"rank": "0"}, {"summary": "NPU out of memory"}, "firing",
                    1.0, 2.0, 3.0)


def test_damage_in_place_is_told_from_a_healthy_file_and_rebuilt_with_memory(tmp_path):
    store = AlertStore(str(tmp_path))
    store.commit_alerts([_row("a")], [], [])
    s = store.add_silence(["rule=log_nan"], 0.0, 4e9, "ops", "known spikes")
    assert store.damaged() is None
    with open(store.path, "r+b") as fh:
        fh.truncate(0)
    assert store.damaged() == "tables missing: alerts, outbox, silences"
    with open(store.path, "r+b") as fh:
        fh.write(b"garbage!" * 4096)
    assert store.damaged() == "file is not a database"
    before = len(statefiles.events())
    what = store.replace_damaged("file is not a database", [_row("a"), _row("b")], [s])
    assert "2 alerts and 1 silences carried over" in what
    assert store.damaged() is None
    assert sorted(store.load_alerts()) == ["a", "b"]
    assert [x.id for x in store.silences()] == [s.id]
    kept = list(tmp_path.glob("alerting.sqlite3.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"garbage!")
    assert len(statefiles.events()) == before + 1 and "damaged under the running daemon" in statefiles.events()[-1].reason
    store.close()
