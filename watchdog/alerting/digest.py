"""A message's alerts grouped by rule: one entry per rule with the affected ranks and NPUs as a
compact set, the hint and the evidence once, and the text of an entry at a chosen detail level.

Why: one NaN on 8 ranks is one fact, not 8 (or 16) alerts each repeating the same hint, snapshot
and log lines. Channels render the same groups; only the dialect and the size budget differ, and
`fit_groups` trades detail for room in one fixed order so every platform shows the same facts
first and says "and N more" for what it cannot show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from watchdog.alerting.clock import Clock
from watchdog.alerting.wording import compact, headline, phrase
from watchdog.runbook import runbook_link  # the one link builder (channels import it from here too)
from watchdog.steps import find_step
from watchdog.findings import SEVERITY_RANK

MAX_LINE = 300
MAX_HINT = 600
MAX_SUMMARY = 300
#: How long the silence command shown in messages mutes a rule (what a night's sleep needs).
SILENCE_FOR = "2h"


class RuleGroup:
    """The alerts of one rule in one message; what every rendering needs is computed once."""

    def __init__(self, rule: str, severity: str, alerts: Sequence[Dict[str, Any]]):
        self.rule = rule
        self.severity = severity
        self.alerts: Tuple[Dict[str, Any], ...] = tuple(alerts)
        self.labels: List[Dict[str, str]] = [dict(a.get("labels") or {}) for a in self.alerts]
        self.first = self.alerts[0]
        self.step = self._step()
        self.since = _earliest(a.get("since") or a.get("starts_at") for a in self.alerts)
        ends = [a.get("ends_at") for a in self.alerts if isinstance(a.get("ends_at"), (int, float))]
        self.ended: Optional[float] = max(ends) if ends else None
        counts = [a["count"] for a in self.alerts if isinstance(a.get("count"), int)]
        #: Matching lines behind the group (log rules; None when no alert counts lines).
        self.lines: Optional[int] = sum(counts) if counts else None
        self.headline = headline(rule, self.labels, self.step, self.lines)
        self.hint = next((str(a["hint"]) for a in self.alerts if a.get("hint")), "")
        self.evidence = self._evidence()
        self.snapshots = [str(a["snapshot"]) for a in self.alerts if a.get("snapshot")]

    def _step(self) -> Optional[tuple]:
        """The earliest step/iteration any alert names (in its summary, value or log lines)."""
        found = []
        for a in self.alerts:
            s = find_step([a.get("summary", ""), a.get("value") or ""] + list(a.get("evidence") or [])[-3:])
            if s:
                found.append(s)
        return min(found, key=lambda s: s[1]) if found else None

    def _evidence(self) -> Tuple[str, List[str]]:
        """(whose, lines): the log lines of the first alert that has any, said once."""
        for a in self.alerts:
            ev = [str(x) for x in (a.get("evidence") or [])]
            if ev:
                lb = a.get("labels") or {}
                whose = " ".join(f"{k} {lb[k]}" for k in ("rank", "npu") if lb.get(k) not in (None, ""))
                return whose, ev
        return "", []


def _earliest(times: Iterable[Any]) -> Optional[float]:
    ok = [t for t in times if isinstance(t, (int, float)) and t > 0]
    return min(ok) if ok else None


def group_alerts(alerts: Sequence[Dict[str, Any]]) -> List[RuleGroup]:
    """Alerts -> one group per rule, most severe rule first, then as the engine ordered them."""
    order: List[str] = []
    by_rule: Dict[str, List[Dict[str, Any]]] = {}
    for a in alerts:
        rule = str(a.get("rule") or "?")
        if rule not in by_rule:
            order.append(rule)
            by_rule[rule] = []
        by_rule[rule].append(a)
    groups = []
    for rule in order:
        items = by_rule[rule]
        sev = max((str(a.get("severity", "info")) for a in items), key=lambda s: SEVERITY_RANK.get(s, 0))
        groups.append(RuleGroup(rule, sev, tuple(items)))
    groups.sort(key=lambda g: -SEVERITY_RANK.get(g.severity, 0))
    return groups


def silence_command(rule: str) -> str:
    return f"npu-watchdog silence add --match rule={rule} --for {SILENCE_FOR}"




@dataclass(frozen=True)
class Detail:
    """How much of each group to show: log lines, the hint, the first summary, the actions."""

    lines: int
    hint: bool = True
    summary: bool = True
    actions: bool = True


def detail_levels(max_lines: int) -> List[Detail]:
    """Richest first: N, N/2, ... 1, 0 log lines; then no hint; then no summary; then headline only."""
    out = []
    n = max_lines
    while n > 0:
        out.append(Detail(n))
        n //= 2
    return out + [Detail(0), Detail(0, hint=False), Detail(0, hint=False, summary=False),
                  Detail(0, hint=False, summary=False, actions=False)]


@dataclass(frozen=True)
class Style:
    """A dialect: its escaping and the few marks a group needs (render.MARKDOWN, SLACK, PLAIN)."""

    escape: Callable[[Any], str]
    bold: Callable[[str], str]
    link: Callable[[str, str], str]
    code: Callable[[List[str]], str]
    inline: Callable[[str], str]


def _one_line(text: Any, limit: int) -> str:
    from watchdog.alerting.render import one_line

    return one_line(text, limit)


def group_text(g: RuleGroup, st: Style, d: Detail, clock: Clock, runbook: Optional[str],
               resolved: bool) -> str:
    """One rule of a message as text; untrusted parts (summaries, hints, log lines, label
    values in the headline) pass through the dialect's `escape` exactly once."""
    e = st.escape
    n = len(g.alerts)
    head = st.bold(f"{g.severity.upper()} · {e(g.headline)}")
    head += f" ({n} alerts)" if n > 1 else ""
    if resolved:
        head += f" · resolved {clock.since(g.ended)}" if g.ended else " · resolved"
    else:
        head += f" · since {clock.since(g.since)}"
    out = [head]
    if d.summary:
        out.append(e(_one_line(g.first.get("summary", ""), MAX_SUMMARY)))
        if g.first.get("value") not in (None, "") and n == 1:
            out[-1] += f" ({e(_one_line(g.first.get('value'), 120))})"
    if d.hint and not resolved and g.hint:
        out.append(f"{st.bold('Hint')}: {e(_one_line(g.hint, MAX_HINT))}")
    whose, ev = g.evidence
    if d.lines > 0 and ev and not resolved:
        out.append(st.bold("Log lines" + (f" ({e(whose)})" if whose else "")) + ":")
        out.append(st.code([e(_one_line(x, MAX_LINE)) for x in ev[-d.lines:]]))
    link = runbook_link(runbook, g.rule)
    acts = []
    if link:
        acts.append(st.link("Runbook", link))
    if d.actions and not resolved:
        acts.append("silence: " + st.inline(silence_command(g.rule)))
    if acts:
        out.append(" · ".join(acts))
    return "\n".join(out)


def more_rules_line(rest: Sequence[RuleGroup], st: Style, names: bool = True) -> str:
    """What did not fit, said explicitly: `... and 3 more rules: npu_idle (NPU 0-15), ...`."""
    if not rest:
        return ""
    n_alerts = sum(len(g.alerts) for g in rest)
    line = f"… and {len(rest)} more rule{'s' if len(rest) > 1 else ''} ({n_alerts} alert{'s' if n_alerts > 1 else ''})"
    if names:
        line += ": " + ", ".join(st.escape(f"{g.rule} ({phrase(g.rule)})") for g in rest)
    return line + "; npu-watchdog status on the node lists every alert"


def snapshot_line(groups: Sequence[RuleGroup], st: Style) -> str:
    """The snapshot once per message (the first one taken; the count of the others)."""
    snaps: List[str] = []
    for g in groups:
        for s in g.snapshots:
            if s not in snaps:
                snaps.append(s)
    if not snaps:
        return ""
    more = f" (+{len(snaps) - 1} more: npu-watchdog status)" if len(snaps) > 1 else ""
    return f"{st.bold('Snapshot')}: {st.escape(snaps[0])}{more}"


def scope_counts(groups: Sequence[RuleGroup]) -> str:
    """`8 alerts, 2 rules, ranks 0-7`: a summary for a footer."""
    ranks = {str(lb["rank"]) for g in groups for lb in g.labels if lb.get("rank") not in (None, "")}
    n = sum(len(g.alerts) for g in groups)
    text = f"{n} alert{'s' if n != 1 else ''}, {len(groups)} rule{'s' if len(groups) != 1 else ''}"
    return text + (f", ranks {compact(ranks)}" if ranks else "")


def fit_groups(groups: Sequence[RuleGroup], build: Callable[[List[RuleGroup], Detail, bool], Any],
               ok: Callable[[Any], bool], max_lines: int) -> Any:
    """The richest rendering `ok` accepts: every rule at the most detail that fits; failing that,
    the most rules that fit at the least detail (the rest named in the "and N more" line, and
    only counted when even their names do not fit). About 20 renderings at most."""
    groups = list(groups)
    levels = detail_levels(max_lines)
    for d in levels:
        out = build(groups, d, True)
        if ok(out):
            return out
    least = levels[-1]
    for names in (True, False):
        lo, hi, best = 1, len(groups) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            out = build(groups[:mid], least, names)
            if ok(out):
                best, lo = out, mid + 1
            else:
                hi = mid - 1
        if best is not None:
            return best
    return build(groups[:1], least, False)
