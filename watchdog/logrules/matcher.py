"""Finding candidate lines fast, then deciding per line with the rules' own regexes.

Two stages, so that speed never changes the answer:
1. Bulk: over a whole slice of bytes (megabytes), find the lines that *may* match. With RE2
   (`google-re2`, optional) this is one combined pattern of every rule; without it, the rules'
   literals are searched with `bytes.find` on a lower-cased copy of the slice (rules without
   literals fall back to a combined Python `re` pass). Either way the result is a superset.
2. Exact: each candidate line (truncated to `max_line_bytes`, decoded with replacement) is
   checked against every rule's Python `re` patterns (ASCII mode), but only for rules one of whose
   literals the line contains (each distinct literal is looked for once). Per category, the first
   rule in pack order wins, so a line is one event per category at most. The generic vocabulary
   rules (`fallback`) come last and fire only on a line no other rule reports, one of them at most.
The bulk stage runs in multi-line mode, so `^`/`$` mean a line's start and end in both stages.
Python's `re` over a joined alternation is ~10x slower than grep, which is why stage 1 exists.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from watchdog.logrules.model import Rule

log = logging.getLogger(__name__)

#: The RE2 module once loaded (see `_load_re2`), None before and where it cannot be.
_re2: Any = None
#: None: not tried yet; True: loaded; False: the import failed (said once in the log).
_re2_loaded: Optional[bool] = None
_re2_lock = threading.Lock()

#: With `engine: auto`, stage 1 runs on the literal prefilter until it has read BULK_MIN_BYTES
#: within one window of BULK_WINDOW seconds, counted per matcher, so over all the files of the logs
#: probe together (logs writing over ~1 KB/s in all, or one burst that large); RE2 is then
#: imported, compiled, and serves every slice from then on. The literal path costs about 0.15 ms
#: per small slice and 12 ms per 64 KiB of training-log text, RE2 0.004 and 0.16 ms
#: (bench/bench_stage1_slices.py, docs/benchmarks.md): a quiet log (a line every second or
#: slower) costs a few ms a minute either way, while RE2 loaded is 4 MB of resident memory (its
#: library 2.6 MB, the shipped bulk pattern and its DFA about 1.5 MB on the footprint bench).
BULK_MIN_BYTES = 64 << 10
BULK_WINDOW = 60.0


@functools.lru_cache(maxsize=None)
def _re2_on_path() -> bool:
    """Whether google-re2 is installed, without importing it (its library is 2.6 MB resident):
    the package folder on the import path, where pip puts it. Looked up once: every /metrics
    scrape and status answer asks for the engine."""
    return any(os.path.isfile(os.path.join(d or ".", "re2", "__init__.py")) for d in sys.path)


def _load_re2() -> Any:
    """The RE2 module, imported on first use; None where it is missing or fails to load (then the
    literal path serves every slice, with the same results, and the engine is reported as `re`)."""
    global _re2, _re2_loaded
    with _re2_lock:
        if _re2_loaded is None:
            try:  # optional accelerator, loaded when a slice needs it (see BULK_MIN_BYTES)
                import re2 as module  # type: ignore
            except Exception as exc:  # pragma: no cover - depends on the installation
                _re2_loaded = False
                if _re2_on_path():
                    log.warning("google-re2 is installed but does not load (%s): log rules run on "
                                "Python's `re` engine", exc)
            else:
                _re2, _re2_loaded = module, True
        return _re2


def re2_available() -> bool:
    """RE2 can serve stage 1: loaded, or installed and not yet tried (not imported here). An
    installed RE2 that does not load is found at its first use (then False, said in the log)."""
    if _re2_loaded is None:
        return _re2_on_path()
    return _re2_loaded


def re2_loadable() -> bool:
    """RE2 imports here (it is imported to find out): for `engine: re2`, which uses it from the
    start, and for `doctor`, which says what the daemon will run."""
    return _load_re2() is not None


#: Said wherever the engine is reported (start-up log, status, doctor) when the slow one runs.
SLOW_ENGINE_ADVICE = ("log rules run on Python's `re` engine (google-re2 is not installed): the same "
                      "results, but many times slower on busy logs; install `google-re2` into the "
                      "daemon's venv (`make install` does where a wheel exists)")


def effective_engine(requested: str = "auto") -> str:
    """The engine a rule set configured with `requested` runs on: "re2" or "re" ("re2" for
    `auto` where RE2 is installed: it serves the slices of BULK_MIN_BYTES and more)."""
    if requested == "auto":
        return "re2" if re2_available() else "re"
    return requested


_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def _scoped(pattern: str) -> str:
    """A leading `(?i)` becomes `(?i:...)` so patterns can be joined into one alternation; named
    groups (a trend rule's `(?P<scale>...)`) become plain groups, since a name may appear in
    several joined patterns and only the rule's own regexes read it."""
    pattern = _NAMED_GROUP.sub("(?:", pattern)
    if pattern.startswith("(?i)"):
        return "(?i:" + pattern[4:] + ")"
    return "(?:" + pattern + ")"


#: A bounded repetition `{m,n}`, read where `_loosened` finds a `{` outside a character class.
_BOUNDED = re.compile(r"\{(\d+),(\d+)\}")
#: The stage-1 pattern's memory budget (program and DFA cache). The loosened bulk pattern of the
#: shipped rules compiles to about 3 MB and its DFA settles near 25 MB on the whole sample corpus
#: (689 KB of the most varied lines the project has); 64 MB leaves room for a larger custom rule
#: set and caps what a multi-day stream of new lines can make the cache grow to.
_BULK_MAX_MEM = 64 << 20


def _loosened(pattern: str) -> str:
    """`X{m,n}` becomes `X*` (m = 0) or `X+`: stage 1 only has to find every line that may match,
    and stage 2 checks each candidate line with the exact patterns. The bounds keep Python's `re`
    linear on hostile lines; RE2 is linear anyway, but expands each bounded repetition into n
    copies: the shipped bulk pattern's program is three times smaller without them, and its DFA
    half as large and twice as fast on the sample corpus (bench/bench_stage1_memory.py). An
    escaped `\\{` and a `{` inside a character class (`[{]`, a user's rule) are text, left alone."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            # a `]` first in the class (`[]x]`, `[^]x]`) is a member, not its end
            j = i + 2 if pattern[i + 1:i + 2] == "^" else i + 1
            if pattern[j:j + 1] == "]":
                out.append(pattern[i:j + 1])
                i = j + 1
                continue
        elif c == "{":
            m = _BOUNDED.match(pattern, i)
            if m is not None:
                out.append("*" if m.group(1) == "0" else "+")
                i = m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def stage_one_re2(alternatives: Sequence[str], loosen: bool = True, max_mem: int = _BULK_MAX_MEM) -> Any:
    """Stage 1 on RE2: the rules' patterns (already `_scoped`) as one compiled alternation, as
    the matcher runs it; `loosen` and `max_mem` are there for bench/bench_stage1_memory.py, which
    compares it with the exact pattern and the former 256 MB budget."""
    re2 = _load_re2()
    if re2 is None:
        raise RuntimeError("the re2 engine needs the google-re2 package")
    opts = re2.Options()
    opts.never_nl = True          # a match never spans two lines
    opts.never_capture = True
    opts.max_mem = max_mem
    # (?m): `^`/`$` mean a line's start and end here as they do on one line in stage 2.
    bulk = "(?m)" + "|".join(_loosened(a) if loosen else a for a in alternatives)
    return re2.compile(bulk.encode("utf-8"), options=opts)


def decode_line(raw: bytes, max_bytes: int) -> str:
    """Bytes of one line -> text for matching/display: truncated, invalid UTF-8 replaced, no NULs."""
    if len(raw) > max_bytes:
        raw = raw[:max_bytes]
    text = raw.decode("utf-8", "replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    return text.rstrip("\r\n")


#: A byte outside ASCII (the literal path's candidates where case folding or `.` needs the text).
_NON_ASCII = re.compile(rb"[\x80-\xff]")

#: What `surrogateescape` makes of a byte that is not UTF-8.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def _invalid_utf8_lines(block: bytes, n: int, search: Any, add: Callable[[int], int]) -> None:
    """Stage 1 again over each line of `block[:n]` that is not valid UTF-8, with every invalid byte
    read as `?`. RE2 runs in UTF-8 mode, where `.`, `\\S` or `[^\\n]` cannot step over an invalid
    byte, while stage 2 matches the decoded line, in which that byte became U+FFFD: a GBK-encoded
    word inside an HCCL or OOM line hid the line from stage 1 although stage 2 reports it. One `?`
    per byte keeps the offsets. Linear: an ASCII buffer costs one `isascii()`, a valid UTF-8 one
    a decode (11 ms for 8.4 MB of Chinese text: as long as stage 1's own pass over it, 10 ms of
    the 21 measured with it), an invalid one a pass over its lines."""
    if block.isascii():
        return
    view = memoryview(block)[:n]  # no copy of a multi-megabyte slice
    try:
        str(view, "utf-8")
        return
    except UnicodeDecodeError:
        pass
    text = str(view, "utf-8", "surrogateescape")
    pos = 0
    for line in text.split("\n"):
        size = len(line.encode("utf-8", "surrogateescape"))
        if _UNDECODABLE.search(line) is not None and search(_UNDECODABLE.sub("?", line).encode("utf-8")):
            add(pos)
        pos += size + 1


class Matcher:
    """Compiled once per rule set; `engine` is "auto" (the literal prefilter until the log is
    busy, see BULK_MIN_BYTES, then RE2 where it is installed), "re2" (RE2 for every slice) or "re"
    (the literal prefilter for every slice). `scan` calls `candidates` from worker threads: the
    compile happens once, under a lock; the window's count may lose a slice to a race, no more."""

    def __init__(self, rules: Sequence[Rule], engine: str = "auto", max_line_bytes: int = 65536):
        self.rules = tuple(rules)
        self.max_line_bytes = max_line_bytes
        if engine not in ("auto", "re2", "re"):
            raise ValueError(f"unknown engine {engine!r}")
        if engine == "re2" and _load_re2() is None:
            raise RuntimeError("the re2 engine needs the google-re2 package")
        #: Bytes read on the literal path within a window before RE2 takes over (0: RE2 from the
        #: start; None: never).
        self._bulk_min: Optional[int] = {"re2": 0, "re": None}.get(engine, BULK_MIN_BYTES)
        if engine == "auto" and not re2_available():
            self._bulk_min = None
        #: The literal path's bytes in the current window, and when the window began (monotonic).
        self._window = (0, 0.0)
        self._compile_lock = threading.Lock()
        self.engine = "re" if self._bulk_min is None else "re2"
        self._bulk: Any = None
        # Stage 2's literal guard: each distinct literal once, and the rules it admits.
        admits: Dict[str, Set[int]] = {}
        for i, r in enumerate(self.rules):
            for lit in r.literals:
                admits.setdefault(lit, set()).add(i)
        self._guard = tuple((lit, frozenset(ix)) for lit, ix in sorted(admits.items()))
        self._alternatives = [_scoped(p) for r in self.rules for p in r.patterns]
        if not self._alternatives:
            self._bulk_min = None
        if self._bulk_min == 0:
            self._bulk = stage_one_re2(self._alternatives)
        # The literal path (every slice on `re`, the small ones on `auto`): cheap to build.
        self._literals: Tuple[bytes, ...] = tuple(sorted(
            {lit.encode("utf-8") for r in self.rules if r.literals for lit in r.literals}))
        rest = [_scoped(p) for r in self.rules if not r.literals for p in r.patterns]
        self._no_literal_bulk: Optional[Any] = (
            re.compile("|".join(rest).encode("utf-8"), re.MULTILINE) if rest and self._bulk_min != 0 else None)
        #: `bytes.lower()` folds ASCII only, and the bytes pass's `.` is one byte: with a literal that
        #: has non-ASCII case (`Сбой`) or a rule without literals, every line holding a non-ASCII byte
        #: is a candidate on the literal path (stage 2 decides on the decoded line, as it always does).
        self._non_ascii_lines = bool(rest) or any(not lit.isascii() and lit != lit.upper()
                                                   for r in self.rules for lit in r.literals)

    def _stage_one(self, n: int) -> Any:
        """RE2's compiled bulk pattern for a slice of `n` bytes, or None for the literal path:
        RE2 once the literal path has read BULK_MIN_BYTES within BULK_WINDOW seconds, counting
        this slice. Compiled then; a failed load leaves the literal path for good."""
        if self._bulk is not None or self._bulk_min is None:
            return self._bulk
        now = time.monotonic()
        read, since = self._window
        if now - since > BULK_WINDOW:
            read, since = 0, now
        read += n
        self._window = (read, since)
        if read < self._bulk_min:
            return None
        with self._compile_lock:
            if self._bulk is None and self._bulk_min is not None:
                try:
                    self._bulk = stage_one_re2(self._alternatives)
                except Exception as exc:  # RE2 does not load, or rejects a (user's) pattern Python takes
                    self._bulk_min, self.engine = None, "re"
                    if _re2_loaded:
                        log.warning("RE2 cannot compile the log rules (%s): they run on the literal "
                                    "prefilter and Python's `re`, with the same results, slower on busy "
                                    "logs; a user rule's pattern RE2 rejects is the usual cause", exc)
        return self._bulk

    # -- stage 1 ------------------------------------------------------------------------------
    def candidates(self, block: bytes, stop: Optional[int] = None) -> List[Tuple[int, int]]:
        """Sorted, unique (start, end) spans of lines in `block[:stop]` that may match (end
        excludes \\n). Line boundaries are looked up only around matches; `stop` spares the caller
        a copy of a multi-megabyte slice.

        A span starts after the last carriage return before the match, not at the newline: a
        progress bar (tqdm) redraws itself with `\\r` and no newline, and the line a trainer
        prints through it (`tqdm.write`: `\\r`, spaces, `\\r`, the text, `\\n`) ends a "line" of
        every redraw since the last newline, hundreds of KiB after an hour, of which matching
        sees the first `max_line_bytes`: a NaN at its end was never matched. The span is what a
        terminal shows. The search for `\\r` stays within the line (linear)."""
        spans = set()
        n = len(block) if stop is None else stop

        def add(pos: int) -> int:
            start = block.rfind(b"\n", 0, pos) + 1
            start = block.rfind(b"\r", start, pos) + 1 or start
            end = block.find(b"\n", pos, n)
            if end < 0:
                end = n
            spans.add((start, end))
            return end

        bulk = self._stage_one(n)
        if bulk is not None:
            # One pass of the combined pattern over the whole buffer; after a hit the search goes
            # on from the next line (the line is a candidate already).
            search = bulk.search
            m = search(block, 0, n)
            while m is not None:
                end = add(m.start())
                m = search(block, end + 1, n) if end + 1 < n else None
            _invalid_utf8_lines(block, n, search, add)
        else:
            if stop is not None and stop < len(block):
                block = block[:stop]
            if self._literals:
                low = block.lower()
                for lit in self._literals:
                    pos = low.find(lit)
                    while pos >= 0:
                        end = add(pos)
                        pos = low.find(lit, end + 1)
            if self._no_literal_bulk is not None:
                for m in self._no_literal_bulk.finditer(block):
                    add(m.start())
            if self._non_ascii_lines and not block.isascii():
                m = _NON_ASCII.search(block)
                while m is not None:
                    end = add(m.start())
                    m = _NON_ASCII.search(block, end + 1)
        return sorted(spans)

    # -- stage 2 ------------------------------------------------------------------------------
    def match_text(self, text: str) -> List[Rule]:
        """The rules that match one decoded line: at most one per shipped category, in rule order.

        A rule with literals is only tried on a line that contains one of them (the contract every
        rule's literals keep, tested on the samples): most candidate lines are candidates for one
        or two rules, and substring tests are far cheaper than running every rule's regexes.
        """
        hits: List[Rule] = []
        seen = set()
        low = text.lower()
        # Each distinct literal is looked for once per line (not once per rule that names it).
        admitted: Set[int] = set()
        for lit, rules in self._guard:
            if lit in low:
                admitted |= rules
        for i, r in enumerate(self.rules):
            if r.category in seen:
                continue
            if r.fallback and hits:
                continue  # a generic rule fills only a line no other rule reports, once
            if r.literals and i not in admitted:
                continue
            if r.matches(text):
                hits.append(r)
                if r.category != "custom":  # user rules never mask each other
                    seen.add(r.category)
        return hits
