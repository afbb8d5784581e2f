"""Kernel log rules as data: the pack `watchdog/probes/kernel.yaml` plus user rules.

The pack has the log rule format (`watchdog.logrules.model.make_rule` builds and validates each
rule, so the same checks apply: RE2-portable patterns, literals, categories) with one more key,
`pid`: a regular expression whose one group is the process the record is about. Matching goes
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

__all__ = ["KernelRule", "RuleError", "kernel_ruleset", "load_kernel_pack", "pid_of"]


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
    if rx.groups != 1:
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
    if rule.pid is None:
        return None
    m = rule.pid.search(text)
    if m is None:
        return None
    try:
        pid = int(m.group(1))
    except ValueError:
        return None
    return pid if 0 < pid < 1 << 32 else None
