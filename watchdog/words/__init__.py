"""The words of messages and of the runbook, per language, as data (`<lang>.yaml` beside this file).

Why data: the text a person reads at 3 a.m. should be in the language their team works in, and a
translation is easier to review, extend and keep complete as a file of templates than as strings
spread over the detectors. Every template has named fields (`{iteration}`, `{where}`, `{n}`...);
numbers, labels, times, paths and commands are filled in unchanged, so only the words differ.

Two parts per language:
- `ui`: the words every message shares (severity names, "since", "Hint", buttons, footer...).
- `rules`: per alert rule its title, summary, meaning, first checks and hint. English rule words
  live beside each rule where it is produced (the rule's `title` in its declaration, its meaning
  and first check in the English runbook `watchdog/runbook/en.md`, the summary and hint in the
  finding the detector builds); `watchdog.docsgen.runbooks.rule_words` gathers them. Other languages come from here.
- `other_alerts`: the runbook words of alerts that are not catalog rules: `test_alert` (sent by
  hand) and the fleet alerts of the shipped Prometheus rules. English has them in the hand-written
  `watchdog/runbook/en.md`; the generated runbook of another language takes them from here.

A missing template never breaks a message: it falls back to English (a test fails instead).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

#: The languages messages and the runbook can be written in (`alerting.language`).
LANGUAGES: Tuple[str, ...] = ("en", "zh")
DEFAULT_LANGUAGE = "en"
#: The fields of a rule's words (every language must have each one for every rule).
RULE_FIELDS: Tuple[str, ...] = ("title", "summary", "meaning", "first_check", "hint")
#: Fields a rule's summary template may name: the alert's place in words, its identity labels and
#: its value (a bare count, for rules whose English value would otherwise be shown untranslated).
SUMMARY_FIELDS = frozenset({"where", "rank", "npu", "chip", "device_id", "probe", "source", "check",
                            "log_rule", "host", "training_job", "file", "cause", "value", "channel"})

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class RuleWords:
    """One rule in one language. `summary` and `hint` empty: the finding's own text (English)."""

    title: str = ""
    summary: str = ""
    meaning: str = ""
    first_check: str = ""
    hint: str = ""
    #: Whether the finding's `value` is shown after the summary (off where the value is English
    #: words rather than a number, a duration or an error text).
    show_value: bool = True
    #: Whether a hint the user wrote in the config (a command check's, a custom log rule's) is
    #: shown as written instead of `hint`: it is already in the team's own words.
    own_hint: bool = False


#: Where an alert outside the rule catalog comes from (`other_alerts.<name>.source`).
ALERT_SOURCES: Tuple[str, ...] = ("cli", "prometheus")


@dataclass(frozen=True)
class AlertWords:
    """The runbook words of an alert the daemon's catalog does not declare: `test_alert` (source
    `cli`) or a fleet alert of the shipped Prometheus rules (source `prometheus`, with the rule's
    severity, which a test holds equal to the rules file)."""

    title: str = ""
    meaning: str = ""
    first_check: str = ""
    source: str = "prometheus"
    severity: str = ""


#: The fields of an `AlertWords` every language must write.
ALERT_FIELDS: Tuple[str, ...] = ("title", "meaning", "first_check")


class _Blank(dict):
    """Template fields: a field the caller did not give renders as `?`, never an exception."""

    def __missing__(self, key: str) -> str:
        return "?"


def template_fields(template: str) -> Tuple[str, ...]:
    """The named fields a template uses (`{where}` -> `where`)."""
    return tuple(f for _, f, _, _ in string.Formatter().parse(template) if f)


def fill(template: str, fields: Dict[str, Any]) -> str:
    """`template` with its named fields filled; a malformed template is returned as it is."""
    try:
        return template.format_map(_Blank({k: "" if v is None else v for k, v in fields.items()}))
    except (ValueError, IndexError, AttributeError, KeyError):
        return template


@dataclass(frozen=True)
class Words:
    """Everything written in one language."""

    language: str
    ui: Dict[str, str] = field(default_factory=dict)
    rules: Dict[str, RuleWords] = field(default_factory=dict)
    #: Runbook words of alerts outside the catalog (test alert, Prometheus fleet alerts), in order.
    alerts: Dict[str, AlertWords] = field(default_factory=dict)

    def t(self, name: str, **fields: Any) -> str:
        """The shared text `name` filled with `fields` (English when this language lacks it).
        (No text has a `{name}` field: `name` cannot be positional-only, which 3.7 lacks.)"""
        text = self.ui.get(name)
        if text is None:
            text = _load(DEFAULT_LANGUAGE).ui.get(name, name) if self.language != DEFAULT_LANGUAGE else name
        return fill(text, fields)

    def n(self, name: str, n: int, **fields: Any) -> str:
        """`name_one` for a count of one, else `name_many`, filled with `n` and `fields`."""
        return self.t(f"{name}_{'one' if n == 1 else 'many'}", n=n, **fields)

    def duration(self, seconds: float) -> str:
        """A duration in this language's units: `1h5m` in English (as the config writes it),
        `1 小时 5 分钟` in Chinese. Whole seconds (milliseconds below one second)."""
        if 0 < seconds < 1:
            return f"{int(round(seconds * 1000))}{self.t('dur_ms')}"
        left = int(round(max(seconds, 0.0)))
        parts: List[str] = []
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
            if left >= size or (unit == "s" and not parts):
                parts.append(f"{left // size}{self.t('dur_' + unit)}")
                left %= size
        return self.t("dur_sep").join(parts) if "dur_sep" in self.ui else "".join(parts)

    def severity(self, severity: str) -> str:
        """`CRITICAL` / `严重`: a severity as messages print it."""
        return self.ui.get(f"sev_{severity}") or severity.upper()

    def rule(self, name: str) -> Optional[RuleWords]:
        return self.rules.get(name)


def _rule_words(data: Any) -> RuleWords:
    data = data if isinstance(data, dict) else {}
    text = {k: " ".join(str(data.get(k) or "").split()) for k in RULE_FIELDS}
    return RuleWords(**text, show_value=bool(data.get("show_value", True)),
                     own_hint=bool(data.get("own_hint", False)))


def _alert_words(name: str, data: Any) -> AlertWords:
    data = data if isinstance(data, dict) else {}
    text = {k: " ".join(str(data.get(k) or "").split()) for k in ALERT_FIELDS}
    source = str(data.get("source") or "prometheus")
    if source not in ALERT_SOURCES:
        raise ValueError(f"other_alerts.{name}.source must be one of {ALERT_SOURCES}, not {source!r}")
    return AlertWords(**text, source=source, severity=str(data.get("severity") or ""))


@lru_cache(maxsize=None)
def _load(language: str) -> Words:
    path = _HERE / f"{language}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    ui = {str(k): str(v) for k, v in (data.get("ui") or {}).items()}
    rules = {str(k): _rule_words(v) for k, v in (data.get("rules") or {}).items()}
    alerts = {str(k): _alert_words(str(k), v) for k, v in (data.get("other_alerts") or {}).items()}
    return Words(language, ui, rules, alerts)


def words(language: Optional[str] = None) -> Words:
    """The words of `language` (the default language for None or one not shipped)."""
    lang = language if language in LANGUAGES else DEFAULT_LANGUAGE
    return _load(lang)


EN = words(DEFAULT_LANGUAGE)
