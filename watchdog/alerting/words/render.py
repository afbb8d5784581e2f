"""Pure rendering: a notification (plain data from the outbox) -> text in a channel's dialect.

Why pure: the same functions serve the daemon, `test-alert` and the tests, and every untrusted
string (log lines, summaries with file or process names) passes through exactly one `escape` per
dialect before it reaches a payload. A message's alerts are grouped by rule (watchdog.alerting.words.digest);
size limits are met by showing less detail per rule first, then fewer rules (with an explicit
"and N more" line), never by dropping the title.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from watchdog.alerting.decide.links import safe_url
from watchdog.alerting.decide.notification import AlertNote, FleetCounts, Notification, from_json
from watchdog.alerting.words.timetext import TimeText
from watchdog.alerting.words.text import clean
from watchdog.alerting.words.digest import (Detail, RuleGroup, Style, group_alerts, group_text, more_rules_line,
                                      runbook_link, scope_counts, snapshot_line)
from watchdog.core.findings import JOB_LABEL, LEGACY_JOB_LABEL, SEVERITY_RANK
from watchdog.words import EN, Words

ZWSP = "\u200b"
#: Plain-text words chat apps turn into a mention of everyone (a zero-width space defuses them).
MENTION_WORDS = re.compile(r"@(?=(all|here|channel|everyone|所有人)\b)", re.IGNORECASE)
_AT_WORD = re.compile(r"@(?=[\w\u4e00-\u9fff])")




# -- escaping per dialect --------------------------------------------------------------------
def escape_plain(text: Any) -> str:
    """JSON consumers (the receivers of structured data): defuse mentions, links and tags, keep
    the text."""
    s = clean(text)
    s = s.replace("<", "＜").replace(">", "＞")
    s = s.replace("](", "］(")
    return MENTION_WORDS.sub("@" + ZWSP, s)


def escape_md(text: Any) -> str:
    """The chat vendors' markdown (the `MARKDOWN` dialect): no tags (`<at ...>`, `<@id>`,
    `<font>`, HTML), no links, no @-mentions, no headings or quotes at line start."""
    s = clean(text)
    s = s.replace("<", "＜").replace(">", "＞").replace("[", "［").replace("]", "］")
    s = _AT_WORD.sub("@" + ZWSP, s)
    s = s.replace("`", "'").replace("*", "∗").replace("~~", "~" + ZWSP + "~")
    return re.sub(r"(?m)^([#>\-+=|])", "\\\\\\1", s)


#: The one markup that still acts inside a markdown code block in chat (`<at id=all>`,
#: `<@userid>`): a mention. A zero-width space after its `<` is the only change to a log line.
_CODE_MENTION = re.compile(r"<(?=at\b|@)", re.IGNORECASE)


def _md_code(lines: List[str]) -> str:
    """Log lines as they are, byte for byte (so a line copied from chat greps in the plog), in a
    fenced block whose fence no line can close: longer than the longest run of backticks in
    them. The block is escaped, not the lines."""
    longest = max((len(run) for ln in lines for run in re.findall(r"`+", ln)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([fence] + [_CODE_MENTION.sub("<" + ZWSP, ln) for ln in lines] + [fence])


def md_inline(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


#: A dialect: how escaped text is marked up (bold, links, code blocks, inline code).
MARKDOWN = Style(escape_md, lambda s: f"**{s}**", lambda t, u: f"[{t}]({u})", _md_code, md_inline)


def _md_escaped_lines(lines: List[str]) -> str:
    """Log lines for a markdown without code blocks (some chat robots': headings, quotes, emphasis,
    links, images, lists, at most inline code on one line), which shows a fence as text and
    renders the lines inside it, so a log line's link, image, `<font>` tag or heading would be
    live. Each line is escaped as text instead (`escape_md`), one per line (a hard break: two
    spaces before the newline)."""
    return "  \n".join(escape_md(ln) or ZWSP for ln in lines)


#: A robot markdown: the `MARKDOWN` dialect without code blocks (the channels that use it say why).
ROBOT_MARKDOWN = Style(escape_md, lambda s: f"**{s}**", lambda t, u: f"[{t}]({u})", _md_escaped_lines, md_inline)

#: The line a chat message carries when it is sent again after a kill interrupted its first
#: attempt: the vendor may already show it, and chat vendors have no key to deduplicate by.
REPEAT_NOTICE = EN.t("repeat_notice")


def repeat_prefix(msg: "Message", w: Words = EN) -> str:
    """Before the text of a notification preview (a fallback text, a card header, a title)."""
    return w.t("repeat_prefix") if msg.repeat else ""


# -- the message -----------------------------------------------------------------------------
class Message:
    """A notification as the renderers read it: the typed record (`Notification`, what the
    outbox hands the channel) and what every rendering of it needs, computed once. A plain JSON
    body (a test's, the docs' example) is read into the record first (`from_json`)."""

    def __init__(self, note: Union[Notification, Mapping[str, Any]]):
        self.note = from_json(note)
        self.kind: str = self.note.kind
        self.status: str = self.note.status
        self.alerts: Tuple[AlertNote, ...] = self.note.alerts
        self.group: Mapping[str, str] = self.note.group
        self.ikey: str = self.note.ikey
        self.test: bool = self.note.test
        #: Sent again after an interrupted attempt (see `REPEAT_NOTICE`).
        self.repeat: bool = self.note.repeat
        #: A fleet incident (from `npu-watchdog relay`): counts over every node of the job.
        self.incident: Optional[FleetCounts] = self.note.incident
        self._groups: Optional[List[RuleGroup]] = None

    @property
    def severity(self) -> str:
        sevs = [a.severity for a in self.alerts] or ["info"]
        return max(sevs, key=lambda s: SEVERITY_RANK.get(s, 0))

    @property
    def host(self) -> str:
        return self.group.get("host", "")

    @property
    def job(self) -> str:
        # An outbox entry queued by an older version still says `job`.
        return self.group.get(JOB_LABEL, self.group.get(LEGACY_JOB_LABEL, ""))

    def groups(self) -> List[RuleGroup]:
        """The alerts grouped by rule (computed once per message)."""
        if self._groups is None:
            self._groups = group_alerts(self.alerts)
        return self._groups

    def title(self, esc: Callable[[Any], str] = str, w: Words = EN) -> str:
        """One line in words: `[CRITICAL] node-01/llama: NaN loss at iteration 5426 on ranks 0-7
        (+2 more rules)`, in `w`'s language. Built from trusted parts (severity, host, training
        job, the rule's phrase, numbers); label values in the scope pass through the dialect's `esc`."""
        prefix = w.t(f"kind_{self.kind}") if self.kind in ("resolved", "reminder", "test") else ""
        head = f"[{w.severity(self.severity)}]" + (f" {prefix}" if prefix else "")
        if self.incident and self.alerts:
            return f"{head} {self._incident_line(esc, w)}"
        groups = self.groups()
        what = esc(groups[0].headline_in(w)) if groups else w.t("no_alerts")
        if len(groups) > 1:
            what = w.n("title_more", len(groups) - 1, what=what)
        if not self.job:  # a node finding (a chip no job holds, the watcher itself): the host only
            return w.t("title_node", head=head, host=esc(self.host), what=what)
        return w.t("title", head=head, host=esc(self.host), job=esc(self.job), what=what)

    def dashboard(self) -> Optional[str]:
        """The first alert's dashboard link (one per message: it is filled per host and job)."""
        return next((u for u in (safe_url(a.dashboard) for a in self.alerts) if u), None)

    def _incident_line(self, esc: Callable[[Any], str], w: Words = EN) -> str:
        """The culprit first (the earliest root alert: node, rank, NPU, rule), then the counts."""
        inc = self.incident
        assert inc is not None
        first = self.alerts[0]
        what = w.t("incident_first") if inc.culprit_root else w.t("incident_earliest")
        labels = dict(first.labels)
        where = " ".join(x for x in (labels.pop("node", self.host), where_labels(labels)) if x)
        line = w.t("incident_line", job=esc(self.job), what=what, rule=esc(first.rule or "?"), where=esc(where))
        return w.t("incident_counts", line=line, nodes=w.n("nodes", inc.nodes),
                   ranks=w.n("ranks", inc.ranks), symptoms=w.n("symptoms", inc.symptoms))


def where_labels(labels: Dict[str, str]) -> str:
    """The identity beyond host/training job: rank, device, chip, probe, check, log rule..."""
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items())
                    if k not in ("host", JOB_LABEL, LEGACY_JOB_LABEL, "domain", "restart"))


def mentions_for(msg: Message, mentions: Mapping[Any, Sequence[str]]) -> List[str]:
    """Mentions only for firing messages, chosen by the most severe alert."""
    if msg.status != "firing" or msg.kind in ("refresh",):
        return []
    return list(mentions.get(msg.severity, []))


# -- the parts every chat channel shows ------------------------------------------------------
@dataclass(frozen=True)
class Parts:
    """A message rendered at one detail level: the rule texts and what follows them."""

    groups: List[str]
    more: str
    snapshot: str
    footer: str
    #: `REPEAT_NOTICE` (as the dialect's bold text) for a possible repeat, else "": shown first.
    notice: str = ""


def time_text_of(alerting: Any, now: Optional[float] = None) -> TimeText:
    return TimeText.named(getattr(alerting, "display_timezone", "UTC"), now)


def runbook_of(alerting: Any) -> Optional[str]:
    """The runbook base of the messages: configured, else the daemon's own (see AlertingConfig)."""
    base = alerting.runbook_base() if hasattr(alerting, "runbook_base") else getattr(alerting, "runbook_url", None)
    return safe_url(base)


def compose(msg: Message, st: Style, shown: List[RuleGroup], d: Detail, names: bool, alerting: Any,
            now: Optional[float] = None, w: Words = EN) -> Parts:
    """The rule texts of `shown`, the "and N more" line for the rest, the snapshot once, a footer;
    in `w`'s language."""
    groups = msg.groups()
    times = time_text_of(alerting, now)
    resolved = msg.status == "resolved"
    texts = [group_text(g, st, d, times, runbook_of(alerting), resolved, w) for g in shown]
    more = more_rules_line(groups[len(shown):], st, names, w)
    snap = "" if resolved else snapshot_line(groups, st, w)
    footer = w.t("footer", kind=w.t(f"footer_{msg.kind}") if f"footer_{msg.kind}" in w.ui else msg.kind,
                 counts=scope_counts(groups, w), ikey=msg.ikey)
    notice = st.bold(st.escape(w.t("repeat_notice")) + f" (id {msg.ikey}).") if msg.repeat else ""
    return Parts(texts, more, snap, footer, notice)


def first_runbook(msg: Message, alerting: Any, w: Words = EN) -> Optional[str]:
    groups = msg.groups()
    return runbook_link(runbook_of(alerting), groups[0].rule, w.language) if groups else None


def buttons(msg: Message, alerting: Any, w: Words = EN) -> List[tuple]:
    """(label, url) of the message's link buttons (dashboard, runbook) in `w`'s language."""
    return [(label, url) for label, url in ((w.t("dashboard"), msg.dashboard()),
                                            (w.t("runbook"), first_runbook(msg, alerting, w))) if url]
