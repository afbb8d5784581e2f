"""What happened, in words: the phrase of each rule (its title, declared with the rule), the step or iteration a finding names, and
compact sets of ranks and NPUs ("ranks 0-7", "NPU 2, 5").

Why: a title made of a raw log line (or of rule names) makes the reader parse it at 3 a.m.; a
title made of a phrase, the training step and the affected ranks says it at a glance. Everything
here is pure and works on trusted parts (rule names, numbers) or on untrusted text only through
linear-time regular expressions that extract digits.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence

from watchdog.core import rulecatalog
from watchdog.words import EN, Words


def phrase(rule: str, w: Words = EN) -> str:
    """The rule's title in `w`'s language (English when it has none)."""
    own = w.rule(rule)
    if own is not None and own.title:
        return own.title
    return rulecatalog.title(rule)


def _int_or_none(v: str) -> Optional[int]:
    return int(v) if v.isdigit() and len(v) < 10 else None


def compact(values: Iterable[str], limit: int = 8, w: Words = EN) -> str:
    """`0-7, 9, 12-15`: numbers as ranges, others sorted; past `limit` parts, `and N more`."""
    vals = sorted(set(values), key=lambda v: (_int_or_none(v) is None, _int_or_none(v) or 0, v))
    parts: List[str] = []
    i = 0
    while i < len(vals):
        n = _int_or_none(vals[i])
        j = i
        while n is not None and j + 1 < len(vals) and _int_or_none(vals[j + 1]) == n + (j + 1 - i):
            j += 1
        parts.append(vals[i] if j == i else f"{vals[i]}-{vals[j]}")
        i = j + 1
    if len(parts) > limit:
        rest = len(parts) - limit
        return w.t("compact_more", parts=", ".join(parts[:limit]), n=rest)
    return ", ".join(parts)


#: Labels that name where an alert is, in the order they are told (their words: `<label>_one/_many`).
_SCOPE = ("rank", "npu", "chip", "device_id")
#: Labels that are the message's own header (host, training job) or the rule itself, and the
#: verdict's labels, which the hint's verdict line says in the message's language.
_SILENT = {"host", "training_job", "job", "domain", "restart"}


def scope(labels_list: Sequence[Dict[str, str]], w: Words = EN) -> str:
    """`on ranks 0-7`, `on NPU 2, 5`, `on NPU 3 (probe npu)`: where a rule's alerts are."""
    parts: List[str] = []
    told = set(_SILENT)
    for key in _SCOPE:
        vals = {str(lb[key]) for lb in labels_list if lb.get(key) not in (None, "")}
        told.add(key)
        if key in ("chip", "device_id") and parts:
            continue  # "NPU 2" already says where; chip and device ids only matter alone
        if vals:
            parts.append(f"{w.t(key + ('_one' if len(vals) == 1 else '_many'))} {compact(vals, w=w)}")
    extra: Dict[str, set] = {}
    for lb in labels_list:
        for k, v in lb.items():
            if k not in told and v not in (None, ""):
                extra.setdefault(k, set()).add(str(v))
    tail = ", ".join(f"{k} {compact(v, 4, w)}" for k, v in sorted(extra.items()))
    text = w.t("scope_on", parts=" ".join(parts)) if parts else ""
    if tail:
        text = w.t("scope_extra", text=text, tail=tail) if text else w.t("scope_extra_only", tail=tail)
    return text


def headline(rule: str, labels_list: Sequence[Dict[str, str]], step: Optional[tuple],
             lines: Optional[int] = None, w: Words = EN) -> str:
    """`NaN loss at iteration 5426 on ranks 0-7`; with several matching lines, where they began
    and how many: `NaN loss from iteration 5426 on ranks 0-7, 3 lines` (in `w`'s language: only
    the words change)."""
    out = phrase(rule, w)
    if rule != "log_custom":  # the log rule's own name only tells something for custom rules
        labels_list = [{k: v for k, v in lb.items() if k != "log_rule"} for lb in labels_list]
    many = lines is not None and lines > 1
    if step:
        out = w.t("headline_from" if many else "headline_step", what=out, word=w.t(f"step_{step[0]}"), n=step[1])
    where = scope(labels_list, w)
    out = w.t("headline_where", what=out, where=where) if where else out
    return w.t("headline_lines", what=out, n=lines) if many else out
