"""Lines -> events: rule hits, thresholds (count within a window) and multi-line tracebacks.

One `StreamState` per followed file (per scanned file in `scan`) carries what must survive from
one slice to the next: the line number, a traceback still being collected, and the recent match
times of thresholded rules. The daemon and `scan` both use `Extractor.feed`, so a line is reported
by `scan` exactly where the daemon would raise it.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Set, Tuple

from watchdog.logrules.device import device_of
from watchdog.logrules.matcher import Matcher, decode_line
from watchdog.logrules.model import Rule
from watchdog.logrules.normalize import normalize
from watchdog.core.losscale import ScaleTrack, collapsed

#: Longest text kept per line for display (alerts, evidence, scan output).
DISPLAY_CHARS = 400
#: A traceback longer than this is closed with what was seen (its last line as summary).
MAX_TRACEBACK_LINES = 200
TRACEBACK_MARK = "Traceback (most recent call last):"

# Timestamps at the start of common training/CANN lines: `2025-01-24-11:24:07.908`,
# `[2024-07-10 15:50:45,798]`, `2026-05-28T22:26:20`. Local time, like the writers use.
_TS = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T-](\d{2}):(\d{2}):(\d{2})")


def line_timestamp(text: str) -> Optional[float]:
    """Epoch seconds of a timestamp in the first 80 characters of a line, else None."""
    m = _TS.search(text, 0, 80)
    if not m:
        return None
    try:
        y, mo, d, h, mi, s = (int(g) for g in m.groups())
        return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))
    except (ValueError, OverflowError):
        return None


def clip(text: str, limit: int = DISPLAY_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class RawEvent:
    """A rule hit that passed its threshold: what the probe stores and `scan` prints."""

    rule: Rule
    line_no: Optional[int]
    text: str
    lines: Tuple[str, ...]
    #: Timestamp parsed from the line, if any (thresholds and `scan` timelines use it).
    line_time: Optional[float]
    #: Device (chip logic id) the line names, if any (`device_id=3`, `Device[1]`, ...).
    device: Optional[int] = None


@dataclass
class _Traceback:
    rule: Rule
    line_no: Optional[int]
    prefix: str
    prefix_mode: Optional[bool] = None
    lines: List[str] = field(default_factory=list)
    skipped: int = 0
    line_time: Optional[float] = None


@dataclass(frozen=True)
class Prepared:
    """One slice ready for `Extractor.consume`: its normalised bytes, the length that counts, and
    the (start, end) spans of the lines that may match (the matcher's bulk stage)."""

    block: bytes
    size: int
    spans: List[Tuple[int, int]]


@dataclass
class StreamState:
    #: Complete lines consumed before the next byte (None when unknown: started at the end).
    line_no: Optional[int] = 0
    tb: Optional[_Traceback] = None
    hits: Dict[str, Deque[float]] = field(default_factory=dict)
    #: Loss-scale values per trend rule (window maximum only).
    scales: Dict[str, ScaleTrack] = field(default_factory=dict)
    last_time: Optional[float] = None
    #: Lines fed so far (also when line_no is unknown): the tailer's line counter reads it
    #: instead of counting the newlines of every slice a second time.
    lines_fed: int = 0
    #: Offsets, in the slice being consumed, of other processes' lines interleaved with a
    #: prefixed traceback: passed over by the traceback, so still lines of their own.
    foreign: Set[int] = field(default_factory=set)


class Extractor:
    def __init__(self, matcher: Matcher):
        self.matcher = matcher
        self.max_line_bytes = matcher.max_line_bytes
        #: Raw (pre-threshold) matching lines per rule id: the matches counter.
        self.matched: Dict[str, int] = {r.id: 0 for r in matcher.rules}
        #: Lines on which any rule matched (before thresholds): what `grep -c` with the same
        #: patterns counts (`scan --count`).
        self.matched_lines = 0

    def feed(self, st: StreamState, block: bytes, now: Optional[float], stop: Optional[int] = None) -> List[RawEvent]:
        """Process one slice of complete lines, `block[:stop]` (ending in a newline, or a forced cut).

        `now` is the reading time used for thresholds when a line carries no timestamp (None in
        `scan`: then the last timestamp seen in the file is used, or a count without window).
        Newlines are counted once per slice, piecewise up to each hit and then to the end.
        """
        return self.consume(st, self.prepare(block, stop), now)

    def prepare(self, block: bytes, stop: Optional[int] = None) -> Prepared:
        """The stateless half of `feed`: normalised bytes and the candidate lines of a slice.

        Needs no stream state, so `scan` runs it for the next slice in a worker thread (RE2
        releases the GIL) while `consume` handles the current one in order.
        """
        if stop is not None and stop >= len(block):
            stop = None
        if b"\x1b" in block or b"\x00" in block:  # two memchr passes; most logs stop here
            if stop is not None:
                # Normalising removes bytes: cut first, so `stop` cannot land past the last
                # complete line (only coloured or torn logs pay for this copy).
                block, stop = block[:stop], None
            block = normalize(block)  # colour codes and NULs must not hide a failure line
        size = len(block) if stop is None else stop
        return Prepared(block, size, self.matcher.candidates(block, size))

    def consume(self, st: StreamState, prepared: Prepared, now: Optional[float]) -> List[RawEvent]:
        """The stateful half of `feed`, for slices in file order: rules, thresholds, line numbers."""
        block, size = prepared.block, prepared.size
        out: List[RawEvent] = []
        base = st.line_no
        pos = 0
        st.foreign.clear()
        # A traceback still open from the previous slice continues at the top of this one.
        if st.tb is not None:
            pos = self._continue_tb(st, block, 0, out, size)
        counted_pos, counted = 0, 0
        for start, end in prepared.spans:
            text = decode_line(block[start:end], self.max_line_bytes)
            rules = self.matcher.match_text(text)
            if not rules:
                continue
            self.matched_lines += 1
            counted += block.count(b"\n", counted_pos, start)
            counted_pos = start
            line_no = None if base is None else base + counted + 1
            ts = line_timestamp(text)
            if ts is not None:
                st.last_time = ts
            for rule in rules:
                self.matched[rule.id] = self.matched.get(rule.id, 0) + 1
                if rule.kind == "traceback":
                    if start < pos:  # inside a traceback already being collected
                        continue
                    idx = text.find(TRACEBACK_MARK)
                    st.tb = _Traceback(rule, line_no, text[:idx] if idx > 0 else "", line_time=ts)
                    st.tb.lines.append(clip(text))
                    # end < len: the line ended with a newline; else the traceback stays open.
                    pos = self._continue_tb(st, block, end + 1, out, size) if end < size else end
                    continue
                if rule.fallback and rule.category == "traceback" and start < pos and start not in st.foreign:
                    continue  # an exception's last line inside a traceback: that traceback reports it
                if rule.trend is not None:
                    if not self._collapsing(st, rule, text, ts, now):
                        continue
                elif not self._passes(st, rule, ts, now):
                    continue
                out.append(RawEvent(rule, line_no, clip(text), (clip(text),), ts, device_of(text)))
        nlines = counted + block.count(b"\n", counted_pos, size)
        if size and block[size - 1] != 0x0A:
            nlines += 1  # a forced cut of an over-long line counts as a line
        if st.line_no is not None:
            st.line_no += nlines
        st.lines_fed += nlines
        out.sort(key=lambda e: (e.line_no or 0))
        return out

    # -- thresholds -------------------------------------------------------------------------
    def _passes(self, st: StreamState, rule: Rule, ts: Optional[float], now: Optional[float]) -> bool:
        th = rule.threshold
        if th is None:
            return True
        t = ts if ts is not None else (now if now is not None else st.last_time)
        q = st.hits.setdefault(rule.id, deque())
        if t is None:
            q.append(float("nan"))  # no clock at all: count only
        else:
            q.append(t)
            while q and q[0] == q[0] and q[0] < t - th.window:
                q.popleft()
        while len(q) > th.count:
            q.popleft()
        return len(q) >= th.count

    def _collapsing(self, st: StreamState, rule: Rule, text: str, ts: Optional[float],
                    now: Optional[float]) -> bool:
        """A trend rule fires when the scale this line reports has collapsed (watchdog.core.losscale):
        judged on the values of this stream, within the rule's window."""
        assert rule.trend is not None
        values, overflow, which = rule.scales_of(text)
        if not values:
            return False
        t = ts if ts is not None else (now if now is not None else st.last_time)
        # One series per wording (framework): a log that mixes two never compares their scales.
        track = st.scales.setdefault(f"{rule.id}#{which}", ScaleTrack())
        for value in values:  # the previous scale first, where the line names it
            peak = track.add(t, value, rule.trend.window)
        return collapsed(rule.trend, values[-1], peak, overflow=overflow)

    # -- tracebacks -------------------------------------------------------------------------
    def _continue_tb(self, st: StreamState, block: bytes, pos: int, out: List[RawEvent], n: int) -> int:
        """Collect traceback lines from `pos` up to `n`; returns the offset after the last line consumed."""
        tb = st.tb
        assert tb is not None
        while pos < n:
            nl = block.find(b"\n", pos, n)
            end = n if nl < 0 else nl
            text = decode_line(block[pos:end], self.max_line_bytes)
            line_start = pos
            if TRACEBACK_MARK in text:
                # Another traceback starts (another rank's, or this one was cut short): close this
                # one with what it has and leave the line to start its own event, prefixed or not.
                self._close_tb(st, out, None)
                return pos
            pos = end + 1
            if tb.prefix and tb.prefix_mode is None:
                tb.prefix_mode = text.startswith(tb.prefix)
            body = text
            if tb.prefix and tb.prefix_mode:
                if not text.startswith(tb.prefix):
                    tb.skipped += 1  # interleaved output of another process
                    st.foreign.add(line_start)
                    if tb.skipped > MAX_TRACEBACK_LINES:
                        self._close_tb(st, out, None)
                        return pos
                    continue
                body = text[len(tb.prefix):]
            if not body.strip() or body[0] in " \t":
                tb.lines.append(clip(text))
                if len(tb.lines) >= MAX_TRACEBACK_LINES:
                    self._close_tb(st, out, None)
                    return pos
                continue
            tb.lines.append(clip(text))
            self._close_tb(st, out, clip(body.strip()))
            return pos
        return n

    def _close_tb(self, st: StreamState, out: List[RawEvent], summary: Optional[str]) -> None:
        tb = st.tb
        st.tb = None
        if tb is None:
            return
        if summary is None:
            summary = tb.lines[-1].strip() if tb.lines else TRACEBACK_MARK
        # Evidence: the first line, the last frames and the summary (a few, already clipped).
        lines = tuple(tb.lines[:1] + tb.lines[-4:]) if len(tb.lines) > 5 else tuple(tb.lines)
        out.append(RawEvent(tb.rule, tb.line_no, summary, lines, tb.line_time))
