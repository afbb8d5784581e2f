"""Keep secrets out of snapshots.

A snapshot is meant to be handed around (attached to a ticket, copied to a laptop), so everything
that goes into the archive passes through one Redactor at the end: the configured secrets (every
`Secret` field of the config, found by walking it, so a channel added later is covered without
touching this file), secret-looking environment values discovered in the job's processes, and
`NAME=value` pairs whose name looks like a token, key, secret or password.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, List, Set
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, SecretStr

REDACTED = "[REDACTED]"

#: Secrets shorter than this are not searched for in text (they would mangle ordinary words).
MIN_SECRET_LEN = 4
#: Pieces of a secret URL (path segments, query values) this long are secrets on their own.
MIN_PIECE_LEN = 8

_SECRET_NAME = re.compile(
    # The lookahead keeps TOKENIZERS_PARALLELISM or max_tokens from counting as secrets.
    r"((TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|APIKEY|ACCESSKEY|WEBHOOK|COOKIE|SESSION)(?![A-Z])"
    r"|(^|_)(KEY|KEYS|PASS|PWD|AUTH|SIGN|SIGNATURE)($|_))",
    re.IGNORECASE,
)
# NAME=value / NAME: value / --name=value with a secret-looking NAME, in free text.
_ASSIGNMENT = re.compile(
    r"(?P<name>[A-Za-z0-9_.-]*(?:token|secret|password|passwd|passphrase|credential|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|webhook)(?![A-Za-z])[A-Za-z0-9_.-]*)(?P<sep>[\"']?\s*[=:]\s*[\"']?)(?P<value>[^\s\"',;&]+)",
    re.IGNORECASE,
)
# scheme://user:password@host
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:@]+):(?P<pw>[^/\s@]+)@")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable (or key) name looks like it holds a credential."""
    return bool(_SECRET_NAME.search(name.replace("-", "_").upper()))


def config_secrets(node: Any) -> Set[str]:
    """Every Secret value in a config, found by walking models, dicts and lists generically."""
    out: Set[str] = set()

    def walk(n: Any) -> None:
        if isinstance(n, SecretStr):
            value = n.get_secret_value()
            if value:
                out.add(value)
        elif isinstance(n, BaseModel):
            for name in type(n).model_fields:
                walk(getattr(n, name, None))
        elif isinstance(n, dict):
            for v in n.values():
                walk(v)
        elif isinstance(n, (list, tuple, set, frozenset)):
            for v in n:
                walk(v)

    walk(node)
    return out


def secret_pieces(secret: str) -> Set[str]:
    """The secret itself plus the parts of a secret URL that leak it on their own.

    A webhook URL often shows up in logs cut into pieces (a client logs the path, or the token
    query parameter), so its long path segments, query values and password are redacted too.
    """
    pieces = {secret}
    if "://" in secret:
        try:
            parts = urlsplit(secret)
        except ValueError:
            return pieces
        if parts.password:
            pieces.add(parts.password)
        for seg in parts.path.split("/"):
            if len(seg) >= MIN_PIECE_LEN:
                pieces.add(seg)
        for _k, v in parse_qsl(parts.query, keep_blank_values=False):
            if len(v) >= MIN_PIECE_LEN:
                pieces.add(v)
        if parts.query and len(parts.query) >= MIN_PIECE_LEN:
            pieces.add(parts.query)
    return pieces


class Redactor:
    """Replaces known secret values and secret-looking assignments in text."""

    def __init__(self, secrets: Iterable[str] = ()):
        self._secrets: Set[str] = set()
        for s in secrets:
            self.add(s)

    def add(self, secret: str) -> None:
        for piece in secret_pieces(secret):
            if len(piece) >= MIN_SECRET_LEN:
                self._secrets.add(piece)

    def _ordered(self) -> List[str]:
        # Longest first, so a URL is replaced whole before its pieces are looked for.
        return sorted(self._secrets, key=len, reverse=True)

    def text(self, text: str) -> str:
        for s in self._ordered():
            if s in text:
                text = text.replace(s, REDACTED)
        text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{REDACTED}@", text)
        text = _ASSIGNMENT.sub(
            lambda m: m.group(0) if m.group("value") == REDACTED
            else f"{m.group('name')}{m.group('sep')}{REDACTED}", text)
        return text

    def data(self, data: bytes) -> bytes:
        """Redact bytes of unknown encoding without corrupting the rest (surrogateescape round-trip)."""
        return self.text(data.decode("utf-8", errors="surrogateescape")).encode("utf-8", errors="surrogateescape")
