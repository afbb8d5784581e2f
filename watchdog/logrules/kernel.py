"""Kernel log rules as data: the pack `watchdog/probes/kernel.yaml` plus user rules.

The pack has the log rule format (`watchdog.logrules.model.make_rule` builds and validates each
rule, so the same checks apply: RE2-portable patterns, literals, categories) with one more key,
`pid`: a regular expression whose one group is the process the record is about, or whose named
groups `pid` and `comm` (and `pid2`/`comm2` for a second wording) are its pid and command name, so
that a record names a rank only when both are the rank's (`task_of`). Matching goes
through the log matcher's API (`Matcher.match_text`), so a kernel record is judged exactly like
a log line would be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

from watchdog.compat import resource_text
from watchdog.logrules.model import _UNPORTABLE, Rule, RuleError, make_rule

PACK = "kernel"
_PACK_CACHE: List[Tuple["KernelRule", ...]] = []

__all__ = ["KernelRule", "RuleError", "kernel_ruleset", "load_kernel_pack", "pid_of", "task_of"]

#: Named groups a `pid` expression may have: the pid and command name, twice (two wordings).
_TASK_GROUPS = ({"pid"}, {"pid", "comm"}, {"pid", "comm", "pid2", "comm2"})


@dataclass(frozen=True)
class KernelRule:
    """A log rule plus how to find the process it names (None: the record names none)."""

    rule: Rule
    pid: Optional["re.Pattern[str]"] = None


def _make(data: Dict[str, Any], pack: str) -> KernelRule:
    if not isinstance(data, dict):
        raise RuleError(f"pack {pack}: every rule must be a mapping")
    data = dict(data)
    pid = data.pop("pid", None)
    rule = make_rule(data, pack)
    if pid is None:
        return KernelRule(rule)
    if not isinstance(pid, str) or _UNPORTABLE.search(pid):
        raise RuleError(f"rule {rule.id}: pid must be a portable regular expression")
    try:
        rx = re.compile(pid, re.ASCII)
    except re.error as exc:
        raise RuleError(f"rule {rule.id}: pid {pid!r} does not compile: {exc}") from None
    named = set(rx.groupindex)
    if named and (named not in _TASK_GROUPS or rx.groups != len(named)):
        raise RuleError(f"rule {rule.id}: pid's named groups must be `pid` and `comm` (and `pid2`, `comm2`)")
    if not named and rx.groups != 1:
        raise RuleError(f"rule {rule.id}: pid needs exactly one group (the process id)")
    return KernelRule(rule, rx)


def load_kernel_pack() -> Tuple[KernelRule, ...]:
    """The shipped kernel rules, cached (the YAML is read once per process)."""
    if not _PACK_CACHE:
        import yaml

        text = resource_text("watchdog.probes", "kernel.yaml")
        doc = yaml.safe_load(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
            raise RuleError(f"pack {PACK}: expected a mapping with a `rules` list")
        _PACK_CACHE.append(tuple(_make(r, PACK) for r in doc["rules"]))
    return _PACK_CACHE[0]


def kernel_ruleset(disable: Iterable[str] = (), user_rules: Iterable[Dict[str, Any]] = ()) -> Tuple[KernelRule, ...]:
    """Shipped kernel rules minus `disable`, then the user's (ids unique)."""
    shipped = load_kernel_pack()
    known = {k.rule.id for k in shipped}
    disabled = set(disable)
    for rid in sorted(disabled - known):
        raise RuleError(f"disable: {rid!r} is not a shipped kernel rule id")
    out = [k for k in shipped if k.rule.id not in disabled]
    seen = set(known)
    for data in user_rules:
        k = _make(data, "custom")
        if k.rule.id in seen:
            raise RuleError(f"rule {k.rule.id}: id already used by another rule")
        seen.add(k.rule.id)
        out.append(k)
    return tuple(out)


def pid_of(rule: KernelRule, text: str) -> Optional[int]:
    """The process a matching record names, if the rule says how to find it."""
    return task_of(rule, text)[0]


def task_of(rule: KernelRule, text: str) -> Tuple[Optional[int], Optional[str]]:
    """(pid, command name) of the process a matching record names; the name is None when the
    rule does not say where it is. Any user names their processes as they like (`python3[4242] `
    included), so the rule's expression is written to take the kernel's own pid, and a rank is
    named only when the command name is the rank's too."""
    if rule.pid is None:
        return None, None
    m = rule.pid.search(text)
    if m is None:
        return None, None
    groups = rule.pid.groupindex
    if not groups:
        raw, comm = m.group(1), None
    elif "pid2" in groups and m.group("pid") is None:
        raw, comm = m.group("pid2"), m.group("comm2")
    else:
        raw, comm = m.group("pid"), m.group("comm") if "comm" in groups else None
    try:
        pid = int(raw)
    except (TypeError, ValueError):
        return None, None
    return (pid, comm) if 0 < pid < 1 << 32 else (None, None)
