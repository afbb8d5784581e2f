"""Placeholder values left in a config: a channel URL on a reserved example host or with a token
such as `replace-me` validates fine and then pages nobody.

Why its own check: the shipped example ends in `.../hook/replace-me` so that it validates and the
daemon starts; `check-config` and `doctor` must then say that this channel cannot work, naming the
key path. A URL is a credential (the token is in its path or query), so what is reported is the
key path and which placeholder was found, never the URL itself.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from pydantic import SecretStr

#: Host names reserved for documentation and tests (RFC 2606, RFC 6761): never a real receiver.
_RESERVED_HOST = re.compile(r"(?:^|\.)(?:example(?:\.com|\.org|\.net)?|invalid|test)$")
#: Words people put where a token goes.
_TOKEN = re.compile(r"(?i)(?:replace[-_]?me|change[-_]?me|your[-_][a-z_-]*(?:token|key|secret|hook|id)|"
                    r"<[^>]*>|^x{4,}$|^placeholder$|^todo$)")


@dataclass(frozen=True)
class Placeholder:
    """One value that looks like a placeholder: where it is and what gave it away."""

    path: str
    what: str
    #: True for a channel URL (nothing would be delivered), False for a link in messages.
    channel: bool

    def line(self) -> str:
        kind = "alerts sent there go nowhere" if self.channel else "the link in every message is dead"
        return f"{self.path}: {self.what}: {kind}; set the real value"


def why_placeholder(url: str) -> Optional[str]:
    """What makes `url` a placeholder (said without its secret parts), else None."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError:
        return None
    reserved = _RESERVED_HOST.search(host) if host else None
    if reserved:
        return f"the host is in the reserved example domain {reserved.group(0).lstrip('.')!r}"
    pieces = [p for p in re.split(r"[/?&=#]", f"{parts.path}?{parts.query}") if p]
    for p in pieces:
        m = _TOKEN.search(urllib.parse.unquote(p))
        if m:
            word = m.group(0) if len(m.group(0)) <= 24 and not m.group(0).startswith("<") else "<...>"
            return f"its path or query holds the placeholder {word!r}"
    return None


def secret_text(v: Any) -> Optional[str]:
    """The plain value of a config secret (a URL), for checking it; never printed."""
    return _secret(v)


def _secret(v: Any) -> Optional[str]:
    if v is None:
        return None
    return v.get_secret_value() if isinstance(v, SecretStr) else str(v)


def placeholders(config: Any) -> List[Placeholder]:
    """Every placeholder among the channel URLs, the dead-man URL and the links in messages."""
    al = config.alerting
    checks: List[Tuple[str, Optional[str], bool]] = []
    for i, ch in enumerate(al.channels):
        checks.append((f"alerting.channels[{i}].url ({ch.name})", _secret(ch.url), True))
    checks.append(("alerting.deadman_url", _secret(al.deadman_url), True))
    checks.append(("alerting.dashboard_url", al.dashboard_url, False))
    checks.append(("alerting.runbook_url", al.runbook_url, False))
    out = []
    for path, url, channel in checks:
        why = why_placeholder(url) if url else None
        if why:
            out.append(Placeholder(path, why, channel))
    return out


def unusable_channels(config: Any) -> List[Placeholder]:
    """The placeholders that would page nobody: channel URLs and the dead-man URL. The daemon
    refuses to start (and a reload is refused) while any is left, so an install that was started
    before its config was edited never sends to the example's URL."""
    return [p for p in placeholders(config) if p.channel]


def refusal(config: Any) -> Optional[str]:
    """One line saying which keys still hold a placeholder and what to do, or None."""
    found = unusable_channels(config)
    if not found:
        return None
    return ("placeholder URL, not starting to send: " + "; ".join(p.line() for p in found)
            + " (or remove the channel; `npu-watchdog check-config` lists every placeholder)")
