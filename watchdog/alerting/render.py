"""Pure rendering: a notification (plain data from the outbox) -> text in a channel's dialect.

Why pure: the same functions serve the daemon, `test-alert` and the tests, and every untrusted
string (log lines, summaries with file or process names) passes through exactly one `escape` per
dialect before it reaches a payload. Size limits are met by dropping log lines first, then whole
alerts (with an "and N more" line), never the title.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from watchdog.config.types import format_duration
from watchdog.findings import JOB_LABEL, LEGACY_JOB_LABEL, SEVERITY_RANK

ZWSP = "\u200b"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_MENTION_WORDS = re.compile(r"@(?=(all|here|channel|everyone|所有人)\b)", re.IGNORECASE)
_AT_WORD = re.compile(r"@(?=[\w\u4e00-\u9fff])")
MAX_LINE = 300
MAX_HINT = 1000
MAX_SUMMARY = 300


def clean(text: Any) -> str:
    """Drop ANSI colours and control characters (keeps tabs and newlines)."""
    s = "" if text is None else str(text)
    return _CONTROL.sub("", _ANSI.sub("", s))


def one_line(text: Any, limit: int) -> str:
    s = " ".join(clean(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


# -- escaping per dialect --------------------------------------------------------------------
def escape_plain(text: Any) -> str:
    """JSON consumers (webhook, Alertmanager): defuse mentions, links and tags, keep the text."""
    s = clean(text)
    s = s.replace("<", "＜").replace(">", "＞")
    s = s.replace("](", "］(")
    return _MENTION_WORDS.sub("@" + ZWSP, s)


def escape_md(text: Any) -> str:
    """Feishu lark_md, DingTalk and WeCom markdown: no tags (`<at ...>`, `<@id>`, `<font>`, HTML),
    no links, no @-mentions, no headings or quotes at line start."""
    s = clean(text)
    s = s.replace("<", "＜").replace(">", "＞").replace("[", "［").replace("]", "］")
    s = _AT_WORD.sub("@" + ZWSP, s)
    s = s.replace("`", "'").replace("*", "∗").replace("~~", "~" + ZWSP + "~")
    return re.sub(r"(?m)^([#>\-+=|])", "\\\\\\1", s)


def escape_slack(text: Any) -> str:
    """Slack mrkdwn: the three control characters are entities (this defuses `<!here>`, `<@U1>`,
    `<url|label>`), markdown-style links are broken (rendered by newer clients and by anything
    the message is forwarded to), and plain-text `@channel`-style words get a zero-width space."""
    s = clean(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("](", "］(")
    return _MENTION_WORDS.sub("@" + ZWSP, s)


@dataclass(frozen=True)
class Dialect:
    name: str
    escape: Callable[[Any], str]
    bold: Callable[[str], str]
    link: Callable[[str, str], str]
    code: Callable[[List[str]], str]


def _md_code(lines: List[str]) -> str:
    return "\n".join("> " + ln if ln else ">" for ln in lines)


def _slack_code(lines: List[str]) -> str:
    return "```\n" + "\n".join(ln.replace("```", "'''") for ln in lines) + "\n```"


MARKDOWN = Dialect("markdown", escape_md, lambda s: f"**{s}**", lambda t, u: f"[{t}]({u})", _md_code)
SLACK = Dialect("slack", escape_slack, lambda s: f"*{s}*", lambda t, u: f"<{u}|{t}>", _slack_code)
PLAIN = Dialect("plain", escape_plain, lambda s: s, lambda t, u: f"{t}: {u}", lambda ls: "\n".join("  " + x for x in ls))


def safe_url(url: Optional[str]) -> Optional[str]:
    """Only http(s) links without characters that could break out of a link syntax."""
    if not url or not re.match(r"^https?://[^\s<>|\[\]()`\"']+$", url):
        return None
    return url


# -- the message -----------------------------------------------------------------------------
class Message:
    """Read-only view of a notification body (see engine.Notification for the writer)."""

    def __init__(self, body: Dict[str, Any]):
        self.body = body
        self.kind: str = body.get("kind", "firing")
        self.status: str = body.get("status", "firing")
        self.alerts: List[Dict[str, Any]] = list(body.get("alerts", []))
        self.group: Dict[str, str] = dict(body.get("group", {}))
        self.ikey: str = body.get("ikey", "")
        self.test: bool = self.kind == "test"
        #: A fleet incident (from `npu-watchdog relay`): counts over every node of the job.
        self.incident: Dict[str, Any] = dict(body.get("incident") or {})

    @property
    def severity(self) -> str:
        sevs = [a.get("severity", "info") for a in self.alerts] or ["info"]
        return max(sevs, key=lambda s: SEVERITY_RANK.get(s, 0))

    @property
    def host(self) -> str:
        return self.group.get("host", "")

    @property
    def job(self) -> str:
        # An outbox entry queued by an older version still says `job`.
        return self.group.get(JOB_LABEL, self.group.get(LEGACY_JOB_LABEL, ""))

    def title(self, esc: Callable[[Any], str] = str) -> str:
        """One line: what, where, how bad. Built from trusted parts (severity, host, job, rule
        names) plus the capped summary, which alone passes through the dialect's `esc`."""
        prefix = {"resolved": "RESOLVED", "reminder": "STILL FIRING", "test": "TEST"}.get(self.kind, "")
        sev = self.severity.upper()
        head = f"[{sev}]" + (f" {prefix}" if prefix else "")
        if self.incident and self.alerts:
            return f"{head} {self._incident_line(esc)}"
        where = f"{self.host}/{self.job}"
        if len(self.alerts) == 1:
            what = esc(one_line(self.alerts[0].get("summary", ""), 160))
        else:
            counts: Dict[str, int] = {}
            for a in self.alerts:
                counts[a.get("rule", "?")] = counts.get(a.get("rule", "?"), 0) + 1
            parts = [f"{r} x{n}" if n > 1 else r for r, n in sorted(counts.items(), key=lambda kv: -kv[1])]
            what = f"{len(self.alerts)} alerts: " + ", ".join(parts[:4]) + (", ..." if len(parts) > 4 else "")
        return f"{head} {where}: {what}"


    def _incident_line(self, esc: Callable[[Any], str]) -> str:
        """The culprit first (the earliest root alert: node, rank, NPU, rule), then the counts."""
        inc = self.incident
        first = self.alerts[0]
        what = "first failure" if inc.get("culprit_root") else "no root cause reported; earliest"
        labels = dict(first.get("labels", {}))
        where = " ".join(x for x in (labels.pop("node", self.host), where_labels(labels)) if x)
        line = f"{esc(self.job)}: {what} {esc(first.get('rule', '?'))} on {esc(where)}"

        def n(key: str, word: str) -> str:
            k = int(inc.get(key, 0))
            return f"{k} {word}" + ("" if k == 1 else "s")

        return f"{line} | {n('nodes', 'node')}, {n('ranks', 'rank')} affected, {n('symptoms', 'symptom alert')}"


def when(ts: Optional[float], now: Optional[float] = None) -> str:
    if not ts:
        return "unknown"
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
    return f"{stamp} ({format_duration(max(0.0, now - ts))} ago)"


def where_labels(labels: Dict[str, str]) -> str:
    """The identity beyond host/training job: rank, device, chip, probe, check, log rule..."""
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items())
                    if k not in ("host", JOB_LABEL, LEGACY_JOB_LABEL))


def dashboard_link(template: Optional[str], labels: Dict[str, str], rule: str) -> Optional[str]:
    """Fill `{label}` placeholders (URL-encoded; unknown names empty) and vet the result."""
    if not template:
        return None

    class _Vals(dict):
        def __missing__(self, key: str) -> str:
            return ""

    vals = _Vals({k: urllib.parse.quote(str(v), safe="") for k, v in labels.items()})
    vals["rule"] = urllib.parse.quote(rule, safe="")
    # Templates written before the label rename say `{job}`: keep filling it.
    vals.setdefault(LEGACY_JOB_LABEL, vals.get(JOB_LABEL, ""))
    try:
        return safe_url(template.format_map(vals))
    except (ValueError, IndexError, AttributeError):
        return None


def alert_text(a: Dict[str, Any], d: Dialect, n_lines: int, now: Optional[float] = None,
               resolved: bool = False) -> str:
    """One alert as text in dialect `d`; `n_lines` caps the log excerpt."""
    e = d.escape
    out = []
    ident = where_labels(a.get("labels", {}))
    head = d.bold(f"{a.get('severity', '').upper()} {e(a.get('rule', ''))}") + (f" {e(ident)}" if ident else "")
    if resolved or a.get("status") == "resolved":
        head += " (resolved)"
    out.append(head)
    out.append(e(one_line(a.get("summary", ""), MAX_SUMMARY)))
    line = f"{d.bold('Since')}: {when(a.get('since') or a.get('starts_at'), now)}"
    if a.get("value") not in (None, ""):
        line += f" | {d.bold('Value')}: {e(one_line(a.get('value'), 200))}"
    out.append(line)
    if a.get("status") == "resolved" and a.get("ends_at"):
        out.append(f"{d.bold('Resolved')}: {when(a.get('ends_at'), now)}")
    if a.get("hint") and not resolved:
        out.append(f"{d.bold('Hint')}: {e(one_line(a['hint'], MAX_HINT))}")
    ev = [one_line(x, MAX_LINE) for x in (a.get("evidence") or [])][-n_lines:] if n_lines > 0 else []
    if ev and not resolved:
        out.append(f"{d.bold('Recent log lines')}:")
        out.append(d.code([e(x) for x in ev]))
    if a.get("snapshot"):
        out.append(f"{d.bold('Snapshot')}: {e(a['snapshot'])}")
    link = safe_url(a.get("dashboard"))
    if link:
        out.append(d.link("Dashboard", link))
    return "\n".join(out)


def evidence_steps(max_lines: int) -> List[int]:
    """Log-line budgets to try, largest first: N, N/2, ... 1, 0."""
    steps = []
    n = max_lines
    while n > 0:
        steps.append(n)
        n //= 2
    return steps + [0]


def alert_counts(n: int) -> List[int]:
    out = []
    while n > 1:
        out.append(n)
        n = (n + 1) // 2 if n > 2 else 1
    return out + [1]


def fit(build: Callable[[int, int], Any], ok: Callable[[Any], bool], max_lines: int, n_alerts: int) -> Any:
    """Try richer renderings first; the first that `ok` accepts wins (the smallest otherwise)."""
    last = None
    for shown in alert_counts(max(1, n_alerts)):
        for lines in evidence_steps(max_lines):
            last = build(lines, shown)
            if ok(last):
                return last
    return last


def more_line(total: int, shown: int) -> str:
    return f"... and {total - shown} more alert(s) in this group (see npu-watchdog status)" if total > shown else ""


def mentions_for(msg: Message, mentions: Dict[str, Sequence[str]]) -> List[str]:
    """Mentions only for firing messages, chosen by the most severe alert."""
    if msg.status != "firing" or msg.kind in ("refresh",):
        return []
    return list(mentions.get(msg.severity, []))
