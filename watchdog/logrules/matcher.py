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

import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from watchdog.logrules.model import Rule

try:  # optional accelerator; both engines give identical results (tested)
    import re2 as _re2  # type: ignore
except Exception:  # pragma: no cover - depends on the installation
    _re2 = None


def re2_available() -> bool:
    return _re2 is not None


#: Said wherever the engine is reported (start-up log, status, doctor) when the slow one runs.
SLOW_ENGINE_ADVICE = ("log rules run on Python's `re` engine (google-re2 is not installed): the same "
                      "results, but many times slower on busy logs; install `google-re2` into the "
                      "daemon's venv (`make install` does where a wheel exists)")


def effective_engine(requested: str = "auto") -> str:
    """The engine a rule set configured with `requested` runs on: "re2" or "re"."""
    if requested == "auto":
        return "re2" if _re2 is not None else "re"
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
    opts = _re2.Options()
    opts.never_nl = True          # a match never spans two lines
    opts.never_capture = True
    opts.max_mem = max_mem
    # (?m): `^`/`$` mean a line's start and end here as they do on one line in stage 2.
    bulk = "(?m)" + "|".join(_loosened(a) if loosen else a for a in alternatives)
    return _re2.compile(bulk.encode("utf-8"), options=opts)


def decode_line(raw: bytes, max_bytes: int) -> str:
    """Bytes of one line -> text for matching/display: truncated, invalid UTF-8 replaced, no NULs."""
    if len(raw) > max_bytes:
        raw = raw[:max_bytes]
    text = raw.decode("utf-8", "replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    return text.rstrip("\r\n")


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
    """Compiled once per rule set; `engine` is "auto" (RE2 if installed), "re2" or "re"."""

    def __init__(self, rules: Sequence[Rule], engine: str = "auto", max_line_bytes: int = 65536):
        self.rules = tuple(rules)
        self.max_line_bytes = max_line_bytes
        if engine == "auto":
            engine = "re2" if _re2 is not None else "re"
        if engine == "re2" and _re2 is None:
            raise RuntimeError("the re2 engine needs the google-re2 package")
        if engine not in ("re2", "re"):
            raise ValueError(f"unknown engine {engine!r}")
        self.engine = engine
        self._bulk: Any = None
        self._literals: Tuple[bytes, ...] = ()
        self._no_literal_bulk: Optional[Any] = None
        # Stage 2's literal guard: each distinct literal once, and the rules it admits.
        admits: Dict[str, Set[int]] = {}
        for i, r in enumerate(self.rules):
            for lit in r.literals:
                admits.setdefault(lit, set()).add(i)
        self._guard = tuple((lit, frozenset(ix)) for lit, ix in sorted(admits.items()))
        alternatives = [_scoped(p) for r in self.rules for p in r.patterns]
        if not alternatives:
            return
        if engine == "re2":
            self._bulk = stage_one_re2(alternatives)
        else:
            lits = sorted({lit.encode("utf-8") for r in self.rules if r.literals for lit in r.literals})
            self._literals = tuple(lits)
            rest = [_scoped(p) for r in self.rules if not r.literals for p in r.patterns]
            if rest:
                self._no_literal_bulk = re.compile("|".join(rest).encode("utf-8"), re.MULTILINE)

    # -- stage 1 ------------------------------------------------------------------------------
    def candidates(self, block: bytes, stop: Optional[int] = None) -> List[Tuple[int, int]]:
        """Sorted, unique (start, end) spans of lines in `block[:stop]` that may match (end
        excludes \\n). Line boundaries are looked up only around matches; `stop` spares the caller
        a copy of a multi-megabyte slice."""
        spans = set()
        n = len(block) if stop is None else stop

        def add(pos: int) -> int:
            start = block.rfind(b"\n", 0, pos) + 1
            end = block.find(b"\n", pos, n)
            if end < 0:
                end = n
            spans.add((start, end))
            return end

        if self._bulk is not None:
            # One pass of the combined pattern over the whole buffer; after a hit the search goes
            # on from the next line (the line is a candidate already).
            search = self._bulk.search
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
