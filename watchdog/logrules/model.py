"""Log rules as data: the shipped YAML packs, user rules from the config, and their validation.

A rule is a record, not code: id, category, severity, one or more regexes, optional literals for
the prefilter, an optional threshold (count within a window), its role in a cascade and a hint.
Patterns must stay in the subset that both Python `re` and RE2 understand (no look-around, no
back-references), because the fast engine is RE2 when installed and Python `re` otherwise, and
both must give the same answer; `^`/`$` mean a line's start and end. A `trend` rule reads a loss
scale (`(?P<scale>...)`) and fires on the scale's trend (watchdog.core.losscale), not on every match.
A `fallback` rule (the generic vocabulary rules) is tried after every other rule, the code tables'
included, and only on a line no other rule reports; `unless` patterns (same subset) name look-alikes
a rule must not report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple


from watchdog.logrules import SHIPPED_PACKS  # noqa: E402 - re-exported for the rule loader
from watchdog.compat import resource_text
from watchdog.core.losscale import ScaleTrend, parse_scale
from watchdog.logrules.codes import code_rule_data
from watchdog.parse.durations import parse_duration

CATEGORIES = SHIPPED_PACKS + ("custom",)
ROLES = ("root", "cascade")
SEVERITIES = ("info", "warning", "critical")
KINDS = ("line", "traceback")

_ID = re.compile(r"^[a-z][a-z0-9_]{1,63}$")
# Constructs RE2 rejects; refused up front so a rule never behaves differently per engine.
_UNPORTABLE = re.compile(r"\(\?[=!<]|\(\?P=|\\[1-9]")
# Inline flags are allowed only as a leading `(?i)` (turned into a scoped group when combined).
_INLINE_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")


class RuleError(ValueError):
    """A rule (shipped or user) is invalid; the message names the rule and the problem."""


@dataclass(frozen=True)
class Threshold:
    """Fire only when `count` matches fall within `window` seconds (e.g. repeated overflow skips)."""

    count: int
    window: float


class _Compiled:
    """A rule's patterns compiled on first read and kept on the rule (`functools.cached_property`
    is not in Python 3.7). Why lazily: the shipped packs and code tables hold some 600 patterns,
    of which a node's logs reach few; compiling them all cost every daemon start, `scan` and
    `check-config` about 0.06 s of CPU (two thirds of loading the rules) and their memory for good.
    Stage 1 (RE2 or the literal prefilter) reads the pattern texts; only a line it lets through
    for a rule compiles that rule. The shipped patterns are compiled in the tests."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, rule: Any, owner: Any = None) -> Any:
        if rule is None:
            return self
        value = tuple(_compile(p, rule.id) for p in getattr(rule, self.source))
        rule.__dict__[self.name] = value  # a frozen dataclass: its own dict, as cached_property does
        return value


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    severity: str
    patterns: Tuple[str, ...]
    #: Lower-case substrings of which every matching line contains at least one (prefilter).
    literals: Tuple[str, ...] = ()
    role: str = "root"
    title: str = ""
    hint: str = ""
    #: Hint variants when the first match is early/late in the job's life (OOM, NaN).
    hint_early: str = ""
    hint_late: str = ""
    threshold: Optional[Threshold] = None
    kind: str = "line"
    pack: str = "custom"
    #: A rule that reads a loss scale (`(?P<scale>...)` in every pattern) and fires only when the
    #: scale's trend says it collapsed (watchdog.core.losscale), instead of on every matching line.
    trend: Optional[ScaleTrend] = None
    #: A generic vocabulary rule (`fallback: true`): tried after every other rule of its category,
    #: the code tables' included, so it reports only a line no exact wording reports.
    fallback: bool = False
    #: Patterns of look-alikes the rule must not report (`unless`): a line matching one of them is
    #: no match, whatever the patterns say (a generic rule's known benign texts).
    unless: Tuple[str, ...] = ()

    #: The patterns compiled (Python's `re`): on first use for the shipped rules, at load for a
    #: user's (`make_rule`), whose mistakes must be reported when the config is checked.
    compiled = _Compiled("patterns")
    unless_compiled = _Compiled("unless")

    def matches(self, text: str) -> bool:
        if not any(p.search(text) for p in self.compiled):
            return False
        return not any(u.search(text) for u in self.unless_compiled)

    def scales_of(self, text: str) -> Tuple[Tuple[float, ...], bool, int]:
        """The loss scales a trend rule's first matching pattern captured: the previous one
        (`(?P<prior>...)`, where the line says it, e.g. DeepSpeed's `Attempted loss scale: 64,
        reducing to 32`) and the new one (`(?P<scale>...)`), empty when none was readable; and
        whether the line is an overflow (a reduction or a skipped step). A pattern that only reads
        the current scale names its group `(?P<reading>...)` (Megatron's iteration line): at the
        floor, such a line is a collapse only after the scale fell to it (bf16 runs print 1.0
        on every line), while an overflow line at the floor is one at once. Last, the index of
        the pattern: each pattern is one framework's wording, whose values form one series."""
        for i, p in enumerate(self.compiled):
            m = p.search(text)
            if m is None:
                continue
            if "reading" in p.groupindex:
                value = parse_scale(m.group("reading"))
                return ((value,) if value is not None else ()), False, i
            if "scale" not in p.groupindex:
                continue
            new = parse_scale(m.group("scale"))
            prior = parse_scale(m.group("prior")) if "prior" in p.groupindex else None
            return (tuple(v for v in (prior, new) if v is not None) if new is not None else ()), True, i
        return (), False, -1


def _as_list(value: Any, what: str, rid: str) -> List[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RuleError(f"rule {rid}: {what} must be a string or a list of non-empty strings")
    return list(value)


def parse_duration_text(value: Any, rid: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return parse_duration(value)
    except ValueError:
        raise RuleError(f"rule {rid}: threshold.window: expected a duration like 10m, got {value!r}") from None


def make_rule(data: Dict[str, Any], pack: str) -> Rule:
    """Build and validate one rule from its mapping (YAML pack entry or config entry)."""
    if not isinstance(data, dict):
        raise RuleError(f"pack {pack}: every rule must be a mapping")
    rid = data.get("id")
    if not isinstance(rid, str) or not _ID.match(rid):
        raise RuleError(f"pack {pack}: rule id {rid!r} must be lower-case letters, digits and _ (2-64)")
    known = {"id", "category", "severity", "patterns", "literals", "role", "title", "hint",
             "hint_early", "hint_late", "threshold", "kind", "trend", "fallback", "unless"}
    unknown = set(data) - known
    if unknown:
        raise RuleError(f"rule {rid}: unknown keys {sorted(unknown)}")
    category = data.get("category")
    if category not in CATEGORIES:
        raise RuleError(f"rule {rid}: category must be one of {', '.join(CATEGORIES)}, got {category!r}")
    severity = data.get("severity", "warning")
    if severity not in SEVERITIES:
        raise RuleError(f"rule {rid}: severity must be one of {', '.join(SEVERITIES)}, got {severity!r}")
    role = data.get("role", "root")
    if role not in ROLES:
        raise RuleError(f"rule {rid}: role must be root or cascade, got {role!r}")
    kind = data.get("kind", "line")
    if kind not in KINDS:
        raise RuleError(f"rule {rid}: kind must be line or traceback, got {kind!r}")
    patterns = _as_list(data.get("patterns"), "patterns", rid)
    unless = _as_list(data["unless"], "unless", rid) if data.get("unless") is not None else []
    for p in patterns + unless:
        _check_portable(p, rid)
    # A user's patterns (and a trend rule's, whose groups are checked here) are compiled now;
    # the shipped rules' when a line first reaches them (`_Compiled`).
    eager = (pack not in SHIPPED_PACKS and pack != "codes") or data.get("trend") is not None
    compiled = [_compile(p, rid) for p in patterns] if eager else []
    unless_compiled = [_compile(p, rid) for p in unless] if eager else []
    literals = [s.lower() for s in _as_list(data.get("literals", []), "literals", rid)] if data.get("literals") else []
    threshold = None
    th = data.get("threshold")
    if th is not None:
        if not isinstance(th, dict) or set(th) - {"count", "window"} or "count" not in th:
            raise RuleError(f"rule {rid}: threshold must be {{count: N, window: 10m}}")
        count = th["count"]
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise RuleError(f"rule {rid}: threshold.count must be an integer >= 1")
        window = parse_duration_text(th.get("window", "10m"), rid)
        threshold = Threshold(count=count, window=window)
    trend = _trend(data.get("trend"), rid, compiled, threshold, kind)
    fallback = data.get("fallback", False)
    if not isinstance(fallback, bool):
        raise RuleError(f"rule {rid}: fallback must be true or false")
    text = {k: data.get(k, "") for k in ("title", "hint", "hint_early", "hint_late")}
    for k, v in text.items():
        if not isinstance(v, str):
            raise RuleError(f"rule {rid}: {k} must be text")
    rule = Rule(
        id=rid, category=category, severity=severity, patterns=tuple(patterns), literals=tuple(literals),
        role=role, title=text["title"].strip() or rid, hint=" ".join(text["hint"].split()),
        hint_early=" ".join(text["hint_early"].split()), hint_late=" ".join(text["hint_late"].split()),
        threshold=threshold, kind=kind, pack=pack, trend=trend, fallback=fallback, unless=tuple(unless),
    )
    if eager:
        rule.__dict__.update(compiled=tuple(compiled), unless_compiled=tuple(unless_compiled))
    return rule


def _check_portable(p: str, rid: str) -> None:
    """A pattern held to the subset both engines share (checked at load, compiled or not)."""
    if _UNPORTABLE.search(p):
        raise RuleError(f"rule {rid}: pattern {p!r} uses look-around or back-references (not portable to RE2)")
    if _INLINE_FLAGS.search(p[4:] if p.startswith("(?i)") else p):
        raise RuleError(f"rule {rid}: pattern {p!r}: inline flags are only allowed as a leading (?i)")


def _compile(p: str, rid: str) -> Any:
    """One pattern of a rule (checked by `_check_portable` when the rule was made)."""
    try:
        # ASCII: \b \w \d mean the same here as in the bytes engines (RE2, bytes re).
        return re.compile(p, re.ASCII)
    except re.error as exc:
        raise RuleError(f"rule {rid}: pattern {p!r} does not compile: {exc}") from None


def _trend(data: Any, rid: str, compiled: List[Any], threshold: Optional[Threshold], kind: str) -> Optional[ScaleTrend]:
    """`trend: {fall: 32, below: 128, floor: 1, window: 10m}` of a loss-scale rule, validated."""
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) - {"fall", "below", "floor", "window"}:
        raise RuleError(f"rule {rid}: trend must be {{fall: 32, below: 128, floor: 1, window: 10m}}")
    if threshold is not None or kind != "line":
        raise RuleError(f"rule {rid}: a trend rule is a line rule without a threshold")
    if not all("scale" in p.groupindex or "reading" in p.groupindex for p in compiled):
        raise RuleError(f"rule {rid}: every pattern of a trend rule captures the scale as (?P<scale>...) "
                        "(an overflow line) or (?P<reading>...) (a line that only reads it)")
    base = ScaleTrend()
    values = {}
    for key in ("fall", "below", "floor"):
        v = data.get(key, getattr(base, key))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
            raise RuleError(f"rule {rid}: trend.{key} must be a finite number >= 0, got {v!r}")
        values[key] = float(v)
    if values["fall"] < 1:
        raise RuleError(f"rule {rid}: trend.fall is a ratio (>= 1), got {values['fall']!r}")
    window = parse_duration_text(data.get("window", "10m"), rid)
    return ScaleTrend(fall=values["fall"], below=values["below"], floor=values["floor"], window=window)


_PACK_CACHE: Dict[str, Tuple[Rule, ...]] = {}


def load_pack(name: str) -> Tuple[Rule, ...]:
    """The rules of one shipped pack (`watchdog/logrules/packs/<name>.yaml`), cached."""
    if name not in SHIPPED_PACKS:
        raise RuleError(f"unknown rule pack {name!r} (known: {', '.join(SHIPPED_PACKS)})")
    if name not in _PACK_CACHE:
        text = resource_text("watchdog.logrules", "packs", f"{name}.yaml")
        import yaml  # only when a pack is loaded: the CLI imports this module for its names

        # libyaml's loader where PyYAML has it: `scan` loads every pack before reading a byte.
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
            raise RuleError(f"pack {name}: expected a mapping with a `rules` list")
        rules = tuple(make_rule(r, name) for r in doc["rules"])
        _PACK_CACHE[name] = rules
    return _PACK_CACHE[name]


def shipped_rule_ids() -> Dict[str, str]:
    """Every shipped rule id -> its pack (the vendor code tables' rules are in pack `codes`)."""
    ids = {r.id: r.pack for p in SHIPPED_PACKS for r in load_pack(p)}
    ids.update((r.id, r.pack) for r in code_rules(SHIPPED_PACKS))
    return ids


_CODE_CACHE: Dict[Tuple[str, ...], Tuple[Rule, ...]] = {}


def code_rules(packs: Sequence[str]) -> Tuple[Rule, ...]:
    """The vendor code tables' rules (watchdog/logrules/codes.py) for the categories in `packs`,
    cached as the packs are (the config check and the daemon each ask)."""
    key = tuple(packs)
    if key not in _CODE_CACHE:
        _CODE_CACHE[key] = tuple(make_rule(d, "codes") for d in code_rule_data(packs))
    return _CODE_CACHE[key]


#: Shipped rule ids that were renamed or folded into another rule: a user's config naming the old
#: id (`disable`, a route's or silence's `log_rule` matcher) keeps working, with a warning naming
#: the new one. `oom_host_sigkill` filed every signal 9 as host OOM; its signal-9 wordings are
#: `launcher_killed` now (killed, not OOM; the kernel's own OOM line is `oom_host_oom_killer`).
RENAMED_RULE_IDS = {"oom_host_sigkill": "launcher_killed"}


def current_rule_id(rid: str, where: str, warn: Any = None) -> str:
    """The rule id to use for `rid`: its successor when it was renamed (said once through `warn`,
    a logging-style callable), else `rid` unchanged."""
    new = RENAMED_RULE_IDS.get(rid)
    if new is None:
        return rid
    if warn is not None:
        warn("%s: the log rule `%s` was removed; using its successor `%s`, please rename it", where, rid, new)
    return new


def build_ruleset(packs: Sequence[str] = SHIPPED_PACKS, disable: Iterable[str] = (),
                  user_rules: Iterable[Dict[str, Any]] = ()) -> Tuple[Rule, ...]:
    """Shipped rules of `packs` minus `disable`, then the code tables', then the user's rules, then
    the shipped generic ones (`fallback`); ids must be unique."""
    disabled = set(disable)
    known = shipped_rule_ids()
    for rid in disabled:
        if rid not in known:
            raise RuleError(f"disable: {rid!r} is not a shipped rule id")
    out: List[Rule] = []
    generic: List[Rule] = []
    for p in packs:
        for r in load_pack(p):
            if r.id not in disabled:
                (generic if r.fallback else out).append(r)
    # After the packs: per category the first matching rule wins, so a code rule fills only gaps.
    out.extend(r for r in code_rules(packs) if r.id not in disabled)
    seen = {r.id for r in out}
    for data in user_rules:
        r = make_rule(data, "custom")
        if r.id in seen or r.id in known:
            raise RuleError(f"rule {r.id}: id already used by another rule")
        if r.fallback:
            raise RuleError(f"rule {r.id}: `fallback` is for the shipped generic rules (a match of one is evidence, "
                            "never an alert of its own); leave it out of a user rule")
        seen.add(r.id)
        out.append(r)
    # Last, the generic vocabulary rules: they fill only what no wording, no code and no user rule
    # reports.
    out.extend(generic)
    return tuple(out)
