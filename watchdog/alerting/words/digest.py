"""A message's alerts grouped by rule: one entry per rule with the affected ranks and NPUs as a
compact set, the hint and the evidence once, and the text of an entry at a chosen detail level.

Why: one NaN on 8 ranks is one fact, not 8 (or 16) alerts each repeating the same hint, snapshot
and log lines. Channels render the same groups; only the dialect and the size budget differ, and
`fit_groups` trades detail for room in one fixed order so every platform shows the same facts
first and says "and N more" for what it cannot show.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from watchdog.alerting.decide.notification import AlertNote
from watchdog.alerting.words.timetext import TimeText
from watchdog.alerting.words.text import code_line, one_line
from watchdog.alerting.words.wording import compact, headline, phrase, scope
from watchdog.runbook import runbook_link  # the one link builder (channels import it from here too)
from watchdog.parse.steps import find_step
from watchdog.core.findings import SEVERITY_RANK
from watchdog.words import EN, Words, fill

MAX_LINE = 300
MAX_HINT = 600
MAX_SUMMARY = 300
#: How long the silence command shown in messages mutes a rule (what a night's sleep needs).
SILENCE_FOR = "2h"
#: The command that lists every alert on the node (named where a message cannot show them all).
STATUS_COMMAND = "npu-watchdog status"


class RuleGroup:
    """The alerts of one rule in one message; what every rendering needs is computed once."""

    def __init__(self, rule: str, severity: str, alerts: Sequence[AlertNote]):
        self.rule = rule
        self.severity = severity
        self.alerts: Tuple[AlertNote, ...] = tuple(alerts)
        self.labels: List[Dict[str, str]] = [dict(a.labels) for a in self.alerts]
        self.first = self.alerts[0]
        self.step = self._step()
        self.since = _earliest(a.since or a.starts_at for a in self.alerts)
        ends = [a.ends_at for a in self.alerts if a.ends_at is not None]
        self.ended: Optional[float] = max(ends) if ends else None
        counts = [a.count for a in self.alerts if a.count is not None]
        #: Matching lines behind the group (log rules; None when no alert counts lines).
        self.lines: Optional[int] = sum(counts) if counts else None
        self.headline = headline(rule, self.labels, self.step, self.lines)
        self._headlines: Dict[str, str] = {EN.language: self.headline}
        self.hint = next((a.hint for a in self.alerts if a.hint), "")
        self.evidence = self._evidence()
        self.snapshots = [a.snapshot for a in self.alerts if a.snapshot]

    def headline_in(self, w: Words) -> str:
        """The headline in `w`'s language (computed once per language)."""
        if w.language not in self._headlines:
            self._headlines[w.language] = headline(self.rule, self.labels, self.step, self.lines, w)
        return self._headlines[w.language]

    def summary_in(self, w: Words) -> str:
        """The first alert's summary: the finding's own (English), or the rule's summary template
        in `w`'s language filled with the alert's labels and place, then the facts the finding
        said in that language (`said`: a job's first exit, its goodput)."""
        own = self.first.summary
        rw = w.rule(self.rule) if w.language != EN.language else None
        if rw is None or not rw.summary:
            return own
        labels = dict(self.first.labels)
        where = scope([{k: v for k, v in labels.items() if k != "log_rule"}], w) or w.t("where_node")
        extra = self.first.said.get(w.language, "")
        return fill(rw.summary, {**labels, "where": where, "value": str(self.first.value or "")}) + extra

    def value_in(self, w: Words) -> Any:
        """The first alert's value, unless `w` says the rule's value is not worth showing; a
        duration (`8s`, `1h5m`) in `w`'s own units."""
        rw = w.rule(self.rule) if w.language != EN.language else None
        value = None if rw is not None and not rw.show_value else self.first.value
        seconds = duration_seconds(value) if w.language != EN.language else None
        return w.duration(seconds) if seconds is not None else value

    def hint_in(self, w: Words) -> str:
        """The hint: the finding's own in English, or the rule's hint in `w`'s language (a hint
        the user wrote in the config, for their own checks and log rules, is kept as written)."""
        rw = w.rule(self.rule) if w.language != EN.language else None
        if rw is None or not rw.hint or (rw.own_hint and self.hint):
            hint = self.hint
        else:
            hint = rw.hint
        return f"{hint} {self.verdict_in(w)}".strip() if self.verdict_in(w) else hint

    def verdict_in(self, w: Words) -> str:
        """The verdict (watchdog.core.verdict) in `w`'s language: the interruption's domain and
        whether a restart helps, from the first alert's `domain` and `restart` labels."""
        labels = self.first.labels
        domain, restart = labels.get("domain"), labels.get("restart")
        if not domain or not restart:
            return ""
        return w.t("verdict_line", domain=w.t(f"domain_{domain}"), restart=w.t(f"restart_{restart}"))

    def _step(self) -> Optional[tuple]:
        """The earliest step/iteration any alert names (in its summary, value or log lines)."""
        found = []
        for a in self.alerts:
            s = find_step([a.summary, a.value or ""] + list(a.evidence[-3:]))
            if s:
                found.append(s)
        return min(found, key=lambda s: s[1]) if found else None

    def _evidence(self) -> Tuple[Dict[str, str], List[str]]:
        """(whose, lines): the log lines of the first alert that has any, said once; `whose` are
        the rank and NPU labels of that alert."""
        for a in self.alerts:
            ev = list(a.evidence)
            if ev:
                lb = a.labels
                return {k: lb[k] for k in ("rank", "npu") if lb.get(k)}, ev
        return {}, []


def _earliest(times: Iterable[Any]) -> Optional[float]:
    ok = [t for t in times if isinstance(t, (int, float)) and t > 0]
    return min(ok) if ok else None


def group_alerts(alerts: Sequence[AlertNote]) -> List[RuleGroup]:
    """Alerts -> one group per rule, most severe rule first, then as the engine ordered them."""
    order: List[str] = []
    by_rule: Dict[str, List[AlertNote]] = {}
    for a in alerts:
        rule = a.rule or "?"
        if rule not in by_rule:
            order.append(rule)
            by_rule[rule] = []
        by_rule[rule].append(a)
    groups = []
    for rule in order:
        items = by_rule[rule]
        sev = max((a.severity for a in items), key=lambda s: SEVERITY_RANK.get(s, 0))
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
    """A dialect: its escaping and the few marks a group needs (render.MARKDOWN; a channel may declare its own)."""

    escape: Callable[[Any], str]
    bold: Callable[[str], str]
    link: Callable[[str, str], str]
    code: Callable[[List[str]], str]
    inline: Callable[[str], str]


_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def duration_seconds(value: Any) -> Optional[float]:
    """Seconds of a value written as a duration (`8s`, `1h5m`, `250ms`), else None."""
    if not isinstance(value, str) or not value or len(value) > 24:
        return None
    if value.endswith("ms") and value[:-2].isdigit():
        return int(value[:-2]) / 1000.0
    m = _DURATION.fullmatch(value)
    if m is None:
        return None
    d, h, mi, s = (int(x or 0) for x in m.groups())
    return d * 86400.0 + h * 3600 + mi * 60 + s


def since_text(times: TimeText, ts: Optional[float], w: Words = EN) -> str:
    """`2026-11-30 22:16:40 +08:00 (3m ago)` in `w`'s words (the time itself is unchanged)."""
    if not ts:
        return w.t("unknown_time")
    seconds = max(0.0, times._now() - ts)
    if seconds < 1:
        ago = w.t("just_now")
    else:
        ago = w.t("ago", d=w.duration(seconds - seconds % 60 if seconds >= 600 else seconds))
    return w.t("since_at", stamp=times.stamp(ts), ago=ago)


def group_text(g: RuleGroup, st: Style, d: Detail, times: TimeText, runbook: Optional[str],
               resolved: bool, w: Words = EN) -> str:
    """One rule of a message as text, in `w`'s language; untrusted parts (summaries, hints, log
    lines, label values in the headline) pass through the dialect's `escape` exactly once."""
    e = st.escape
    n = len(g.alerts)
    head = w.t("group_head", sev=w.severity(g.severity), headline=e(g.headline_in(w)))
    head = st.bold(head)
    head = w.t("group_count", head=head, n=n) if n > 1 else head
    if resolved:
        head = w.t("group_resolved_at", head=head, when=since_text(times, g.ended, w)) if g.ended \
            else w.t("group_resolved", head=head)
    else:
        head = w.t("group_since", head=head, when=since_text(times, g.since, w))
    out = [head]
    if d.summary:
        out.append(e(one_line(g.summary_in(w), MAX_SUMMARY)))
        value = g.value_in(w)
        if value not in (None, "") and n == 1:
            out[-1] = w.t("summary_value", summary=out[-1], value=e(one_line(value, 120)))
    hint = g.hint_in(w)
    if d.hint and not resolved and hint:
        out.append(f"{st.bold(w.t('hint'))}{w.t('colon')}{e(one_line(hint, MAX_HINT))}")
    whose, ev = g.evidence
    if d.lines > 0 and ev and not resolved:
        who = " ".join(w.t("evidence_whose", key=w.t(f"{k}_one"), value=v) for k, v in whose.items())
        out.append(st.bold(w.t("log_lines_whose", whose=e(who)) if who else w.t("log_lines")) + w.t("colon").rstrip())
        out.append(st.code([code_line(x, MAX_LINE) for x in ev[-d.lines:]]))  # the style escapes the block
    link = runbook_link(runbook, g.rule, w.language)
    acts = []
    if link:
        acts.append(st.link(w.t("runbook"), link))
    if d.actions and not resolved:
        acts.append(w.t("silence", command=st.inline(silence_command(g.rule))))
    if acts:
        out.append(" · ".join(acts))
    return "\n".join(out)


def more_rules_line(rest: Sequence[RuleGroup], st: Style, names: bool = True, w: Words = EN) -> str:
    """What did not fit, said explicitly: `... and 3 more rules: npu_idle (NPU 0-15), ...`."""
    if not rest:
        return ""
    n_alerts = sum(len(g.alerts) for g in rest)
    line = w.t("more_line", rules=w.n("more_rules", len(rest)), alerts=w.n("alerts", n_alerts))
    if names:
        line = w.t("more_names", line=line, names=", ".join(
            st.escape(w.t("more_name", rule=g.rule, title=phrase(g.rule, w))) for g in rest))
    return w.t("more_tail", line=line, command=st.inline(STATUS_COMMAND))


def snapshot_line(groups: Sequence[RuleGroup], st: Style, w: Words = EN) -> str:
    """The snapshot once per message (the first one taken; the count of the others)."""
    snaps: List[str] = []
    for g in groups:
        for s in g.snapshots:
            if s not in snaps:
                snaps.append(s)
    if not snaps:
        return ""
    text = f"{st.bold(w.t('snapshot'))}{w.t('colon')}{st.escape(snaps[0])}"
    return w.t("snapshot_more", snapshot=text, n=len(snaps) - 1, command=st.inline(STATUS_COMMAND)) \
        if len(snaps) > 1 else text


def scope_counts(groups: Sequence[RuleGroup], w: Words = EN) -> str:
    """`8 alerts, 2 rules, ranks 0-7`: a summary for a footer."""
    ranks = {str(lb["rank"]) for g in groups for lb in g.labels if lb.get("rank") not in (None, "")}
    n = sum(len(g.alerts) for g in groups)
    text = w.t("counts", alerts=w.n("alerts", n), rules=w.n("rules", len(groups)))
    return w.t("counts_ranks", counts=text, ranks=compact(ranks, w=w)) if ranks else text


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
