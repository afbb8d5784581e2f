"""A failure line printed through a progress bar is matched whole, however long the bar ran.

tqdm redraws its bar with a carriage return and no newline, and `tqdm.write` (which trainers use
to print their logs while a bar runs) clears the bar with `\\r`, spaces and `\\r`, then writes the
text and a newline. In a log file, everything since the previous newline is one "line": after an
hour of redraws, hundreds of KiB, of which matching sees the first `max_line_bytes` (64 KiB). A
NaN line at its end was never matched. The matched span now starts after the last `\\r` before
the match: what a terminal shows (watchdog.logrules.matcher.Matcher.candidates)."""

from __future__ import annotations

import pytest

from watchdog.logrules.extract import Extractor, StreamState
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import build_ruleset

ENGINES = ["re"] + (["re2"] if re2_available() else [])

#: The bytes tqdm 4.70.1 wrote to a file for `bar = tqdm(total=1000, file=fh, mininterval=0)`, five
#: `bar.update(1)`, `tqdm.write("{'loss': nan, ...}", file=fh)`, one more update and `close()`
#: (captured with `repr(open(path, "rb").read())`, 2026-12-07).
TQDM_WRITE = (
    b"\r  0%|          | 0/1000 [00:00<?, ?it/s]\r  0%|          | 1/1000 [00:00<00:00, 262144.00it/s]"
    b"\r  0%|          | 2/1000 [00:00<00:00, 29934.16it/s] \r  0%|          | 3/1000 [00:00<00:00, 28461.07it/s]"
    b"\r  0%|          | 4/1000 [00:00<00:00, 30802.02it/s]\r  0%|          | 5/1000 [00:00<00:00, 32540.12it/s]"
    b"\r                                                   \r"
    b"{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
    b"\r  0%|          | 5/1000 [00:00<00:00, 32540.12it/s]\r  1%|          | 6/1000 [00:00<00:00, 21152.18it/s]"
    b"\r  1%|          | 6/1000 [00:00<00:00, 20360.70it/s]\n"
)
REDRAW = b"\r 37%|###7      | 3712/10000 [12:01<20:22, 5.14it/s]"
NAN = b"{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}"


def events(block: bytes, engine: str):
    return Extractor(Matcher(build_ruleset(), engine=engine)).feed(StreamState(), block, None)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_line_tqdm_wrote_is_matched_as_the_terminal_shows_it(engine: str) -> None:
    [ev] = events(b"start\n" + TQDM_WRITE, engine)
    assert ev.rule.id == "nan_loss_value" and ev.line_no == 2
    assert ev.text == NAN.decode()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_nan_after_an_hour_of_redraws_is_matched(engine: str) -> None:
    """5,000 redraws (254 KiB, far past the 64 KiB a line is matched on) before the NaN line."""
    block = b"start\n" + REDRAW * 5000 + b"\r" + b" " * 55 + b"\r" + NAN + b"\n" + REDRAW + b"\n"
    assert len(block) > 3 * 65536
    [ev] = events(block, engine)
    assert ev.rule.id == "nan_loss_value" and ev.line_no == 2 and ev.text == NAN.decode()


@pytest.mark.parametrize("engine", ENGINES)
def test_windows_line_ends_and_bars_alone_change_nothing(engine: str) -> None:
    assert [e.text for e in events(b"ok\r\nloss: nan\r\nok\r\n", engine)] == ["loss: nan"]
    assert events(REDRAW * 2000 + b"\n", engine) == []
