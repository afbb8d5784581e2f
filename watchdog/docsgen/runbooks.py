"""The runbook pages in languages other than English (`watchdog/runbook/<lang>.md`, written by
`make docs`): the sections and anchors of the rule catalog, the words of `watchdog/words/<lang>.yaml`.
Here, above the rule catalog and the runbook source, which it reads.
"""

from __future__ import annotations

from typing import Any

from watchdog.core.rulecatalog import Rule, catalog, inhibited_by, title
from watchdog.runbook import meaning_and_check, source
from watchdog.words import RuleWords, words


def rule_words(name: str, language: str = "en") -> RuleWords:
    """The words of rule `name` in `language`: English from where each is written (its title in its
    declaration, its meaning and first check in the runbook, `watchdog/runbook/en.md`; the summary
    and hint are the finding's own, so empty here), other languages from
    `watchdog/words/<language>.yaml`."""
    w = words(language)
    if w.language != "en":
        own = w.rule(name)
        return own if own is not None else RuleWords()
    meaning, check = meaning_and_check(name, "en")
    return RuleWords(title=title(name), meaning=meaning, first_check=check)


def render_runbook_in(language: str) -> str:
    """The runbook page in `language` (English: the hand-written `watchdog/runbook/en.md` itself); the same sections and anchors
    (the rule names), the words from `watchdog/words/<language>.yaml`. Alerts that are not catalog
    rules have their sections too, from the words' `other_alerts`: the test alert first, the fleet
    alerts of the shipped Prometheus rules last (as in the English runbook)."""
    if language == "en":
        return source("en")
    w = words(language)
    out = [f"# {w.t('runbook_title')}\n\n{w.t('runbook_intro')}\n\n"]
    if any(a.source == "prometheus" for a in w.alerts.values()):
        out.append(w.t("runbook_fleet_intro") + "\n\n")
    out += [_other_section(name, a, w) for name, a in w.alerts.items() if a.source != "prometheus"]
    out += [_rule_section(r, w) for r in catalog().values()]
    out += [_other_section(name, a, w) for name, a in w.alerts.items() if a.source == "prometheus"]
    return "".join(out).rstrip("\n") + "\n"


def severity_text(r: Rule, w: Any) -> str:
    """Every severity the rule raises (`Rule.raised`, the one source both runbooks follow), or
    the config key that chooses it."""
    if r.severity_key:
        return w.t("runbook_severity_configured", key=r.severity_key)
    names = [w.severity(s) for s in r.raised]
    last = names.pop()
    return w.t("runbook_severity_sep").join(names) + w.t("runbook_severity_or") + last if names else last


def _fires(seconds: float, w: Any) -> str:
    """When the rule fires: at once, or after its default `for`, in the language's own units."""
    if seconds <= 0:
        return w.t("runbook_fires_now")
    return w.t("runbook_fires_after", duration=w.duration(seconds))


def _codes(names: Any) -> str:
    return "、".join(f"`{x}`" for x in names)


def _rule_section(r: Rule, w: Any) -> str:
    """One catalog rule's section of a generated (non-English) runbook."""
    rw = rule_words(r.name, w.language)
    inh = sorted({t for i in r.inhibits for t in i.targets})
    by = sorted(set(inhibited_by(r.name)))
    out = [f'<a id="{r.name}"></a>\n\n## {r.name}\n\n**{rw.title}**：{rw.meaning}\n\n']
    out.append("- " + w.t("runbook_severity", severity=severity_text(r, w), fires=_fires(r.default_for, w),
                          rule=r.name) + "\n")
    out.append(f"- {w.t('runbook_check')}{rw.first_check}\n")
    out.append(f"- {w.t('runbook_hint')}{rw.hint}\n")
    if r.same_event:
        out.append("- " + w.t("runbook_same_event", rules=_codes(r.same_event)) + "\n")
    if inh:
        out.append("- " + w.t("runbook_mutes", rules=_codes(inh)) + "\n")
    if by:
        out.append("- " + w.t("runbook_muted_by", rules=_codes(by)) + "\n")
    out.append("- " + w.t("runbook_silence", rule=r.name) + "\n\n")
    return "".join(out)


def _other_section(name: str, a: Any, w: Any) -> str:
    """The section of an alert outside the catalog (`AlertWords`): the test alert, or a fleet alert
    that Prometheus raises and Alertmanager delivers (so it is silenced there, not on the node)."""
    out = [f'<a id="{name}"></a>\n\n## {name}\n\n**{a.title}**：{a.meaning}\n\n']
    if a.source == "prometheus":
        out.append("- " + w.t("runbook_fleet_severity", severity=w.severity(a.severity)) + "\n")
    else:
        out.append("- " + w.t("runbook_test_severity") + "\n")
    out.append(f"- {w.t('runbook_check')}{a.first_check}\n")
    if a.source == "prometheus":
        out.append("- " + w.t("runbook_fleet_silence", rule=name) + "\n")
    return "".join(out) + "\n"
