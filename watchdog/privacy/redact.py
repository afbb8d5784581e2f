"""Keep secrets out of snapshots.

A snapshot is meant to be handed around (attached to a ticket, copied to a laptop), so everything
that goes into the archive passes through one Redactor at the end: the configured secrets (every
`Secret` field of the config, found by walking it, so a channel added later is covered without
touching this file), secret-looking environment values discovered in the job's processes,
`NAME=value` pairs and URL query parameters (`?access_token=...`) whose name looks like a token,
key, secret or password.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Iterable, List, Optional, Set
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, SecretStr

REDACTED = "[REDACTED]"

#: Secrets shorter than this are not searched for in text (they would mangle ordinary words).
MIN_SECRET_LEN = 4
#: Pieces of a secret URL (path segments, query values) this long are secrets on their own.
MIN_PIECE_LEN = 8

_SECRET_NAME = re.compile(
    # The lookahead keeps TOKENIZERS_PARALLELISM or max_tokens from counting as secrets; plurals
    # and short forms of the other words are secrets (TORCH_NPU_CREDS, AWS_SECRETS, DB_PASSWORDS).
    r"((TOKEN|SECRETS?|PASSWORDS?|PASSWD|PASSPHRASE|CREDENTIALS?|CREDS|PRIVATE|APIKEY|APPKEY|ACCESSKEY|WEBHOOK"
    r"|COOKIE|SESSION|AUTHORIZATION)(?![A-Z])"
    # AK/SK: Huawei Cloud's access and secret keys (HUAWEICLOUD_SDK_AK, OBS_SK) on ModelArts and
    # Ascend nodes; DSN: a Sentry DSN carries its key in the URL.
    r"|(^|_)(KEY|KEYS|PASS|PWD|AUTH|SIGN|SIGNATURE|AK|SK|DSN)($|_))",
    re.IGNORECASE,
)
# Every pattern below runs on untrusted text (log tails, command lines, dmesg), so each one is
# written to run in linear time: a leading lookbehind lets a match start only at the beginning of a
# run of name characters, so the engine never rescans one long run from each of its positions (the
# old form took 20 s on a 20 KB hex line, holding the GIL).
_NAME_CHARS = "A-Za-z0-9_.-"
# NAME=value / NAME: value / --name=value; whether NAME looks secret is decided on the match.
_ASSIGNMENT = re.compile(
    rf"(?<![{_NAME_CHARS}])(?P<name>[{_NAME_CHARS}]+)(?P<sep>[\"']?\s*[=:]\s*[\"']?)(?P<value>[^\s\"',;&]+)")
_SECRET_WORD = re.compile(
    r"(?:token|secret|password|passwd|passphrase|credential|api[_-]?key|access[_-]?key|private[_-]?key|webhook)"
    r"(?![A-Za-z])", re.IGNORECASE)
# scheme://user:password@host
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:@]+):(?P<pw>[^/\s@]+)@")
# ?name=value / &name=value in a URL: the assignment pattern above takes `https://...` as one
# assignment named `https`, so a token in a URL's query would never be looked at. Only after `?`
# or `&`, so a match starts at a handful of places per URL.
_URL_QUERY = re.compile(r"(?<=[?&])(?P<name>[A-Za-z0-9_.-]{1,64})=(?P<value>[^\s&#\"'<>]+)")
#: Lines longer than this are cut before the patterns run (known secrets are replaced first, on
#: the whole line): the cost of a snapshot is bounded per line, whatever a log holds.
MAX_LINE_CHARS = 16384
_LONG_LINE = re.compile(rf"(?m)^[^\n]{{{MAX_LINE_CHARS + 1},}}")
#: Text is redacted in pieces of about this size, so the GIL is released between pieces and a
#: stop request is seen within one piece.
CHUNK_CHARS = 1 << 20


class Cancelled(Exception):
    """Redaction stopped because the daemon is stopping (the caller must not keep the text)."""


def _cut_line(m: "re.Match[str]") -> str:
    line = m.group(0)
    return f"{line[:MAX_LINE_CHARS]}[... {len(line) - MAX_LINE_CHARS} characters of this line cut by the snapshot]"


def _assignment(m: "re.Match[str]") -> str:
    if m.group("value") == REDACTED or not _SECRET_WORD.search(m.group("name")):
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{REDACTED}"


def _query(m: "re.Match[str]") -> str:
    if m.group("value") == REDACTED or not is_secret_name(m.group("name")):
        return m.group(0)
    return f"{m.group('name')}={REDACTED}"


def _chunks(text: str, size: int) -> List[str]:
    """`text` in pieces of about `size` characters, each made of whole lines (a longer line is one
    piece of its own, so a secret is never split between two pieces)."""
    out: List[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            nl = text.rfind("\n", start, end)
            if nl < start:
                nl = text.find("\n", end)
            end = nl + 1 if nl >= 0 else len(text)
        out.append(text[start:end])
        start = end
    return out


#: Environment variables (exact, case-sensitive names) the patterns above match whose values are
#: never credentials: the shell's working directory (`PWD`: taken for a password, the job's
#: folder became [REDACTED] everywhere in its snapshot, every path under it too) and the SSH
#: agent's socket path. An option `--pwd`, a URL's `pwd=` and `DB_PWD` stay secrets.
SHELL_VARIABLES = frozenset({"PWD", "SSH_AUTH_SOCK"})


def is_secret_name(name: str) -> bool:
    """Whether an environment variable (or key) name looks like it holds a credential."""
    return bool(_SECRET_NAME.search(name.replace("-", "_").upper()))


def is_secret_variable(name: str) -> bool:
    """Whether an environment variable holds a credential: a secret name that is not one of the
    shell's own variables (SHELL_VARIABLES)."""
    return name not in SHELL_VARIABLES and is_secret_name(name)


def config_secrets(node: Any) -> Set[str]:
    """Every Secret value in a config, found by walking models, dicts and lists generically, and
    the values of credential-named `${NAME}` references (watchdog.config.load)."""
    out: Set[str] = set()

    def walk(n: Any) -> None:
        if isinstance(n, SecretStr):
            value = n.get_secret_value()
            if value:
                out.add(value)
        elif isinstance(n, BaseModel):
            # A credential given as `${NAME}` outside a Secret field (the config keeps those).
            out.update(v for v in getattr(n, "_env_secrets", ()) or () if v)
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


def replace_any_case(text: str, secret: str, replacement: str) -> str:
    """`text` with `secret` replaced in any letter case (an endpoint or a library may echo a
    token or a URL upper- or lower-cased); linear in the text's length."""
    low, key = text.lower(), secret.lower()
    if len(low) != len(text):  # (a character whose lower case is longer: exact only)
        return text.replace(secret, replacement)
    if key not in low:
        return text
    out: List[str] = []
    at = 0
    while True:
        hit = low.find(key, at)
        if hit < 0:
            break
        out.append(text[at:hit])
        out.append(replacement)
        at = hit + len(key)
    out.append(text[at:])
    return "".join(out)


def secrets_out(text: str, secrets: Iterable[str], replacement: str = REDACTED) -> str:
    """`text` with each of `secrets` (longest first, so a URL goes whole before its pieces)
    replaced in any letter case, and nothing else changed: nothing guessed from names."""
    low = text.lower()
    for s in secrets:
        if s and s.lower() in low:
            text = replace_any_case(text, s, replacement)
    return text


def token_like(piece: str) -> bool:
    """A piece of a secret URL (or a credential-named variable's value) that is a credential on
    its own: long enough, and with a digit or 16 characters or more. A vendor's path words
    (Slack's `services`, Feishu's `open-apis`) are not: as pieces they turned the word wherever a
    log line said it into [REDACTED]; nor are `none`, `8080` or `true`."""
    return len(piece) >= MIN_PIECE_LEN and (len(piece) >= 16 or any(c.isdigit() for c in piece))


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
            if token_like(seg):
                pieces.add(seg)
        for _k, v in parse_qsl(parts.query, keep_blank_values=False):
            if token_like(v):
                pieces.add(v)
        if parts.query and len(parts.query) >= MIN_PIECE_LEN:
            pieces.add(parts.query)
    return pieces


#: The run of token characters a text starts or ends with, where a cut may have split a secret.
_LEADING_RUN = re.compile(r"^[A-Za-z0-9_~%+=-]{4,}")
_TRAILING_RUN = re.compile(r"[A-Za-z0-9_~%+=-]{4,}(?=(?:\.\.\.)?\s*$)")


def _cut_secret_ends(text: str, secrets: List[str]) -> str:
    """A text cut to its display length before it was redacted (a matched line clipped to 400
    characters) may end with the first part of a secret, or start with its last part: that part
    is no longer the whole secret and escaped the replacement. A run of 4 or more token characters
    at either end that a known secret starts (ends) with is replaced too."""
    if not secrets:
        return text
    base = max(0, len(text) - 256)
    m = _TRAILING_RUN.search(text, base)
    if m is not None:
        run = m.group(0)
        if any(s != run and s.startswith(run) for s in secrets):
            text = text[:m.start()] + REDACTED + text[m.end():]
    m = _LEADING_RUN.match(text)
    if m is not None:
        run = m.group(0)
        if any(s != run and s.endswith(run) for s in secrets):
            text = REDACTED + text[len(run):]
    return text


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

    def text(self, text: str, cancel: Optional[threading.Event] = None, cut: bool = True) -> str:
        """Redact `text`; linear in its length. Raises Cancelled when `cancel` is set meanwhile.
        `cut`: the text may have been cut to a display length (`_cut_secret_ends`); a command
        line's argument was not, and one that a secret merely starts or ends with (`http`,
        `webhook`) is shown as written."""
        secrets = self._ordered()
        out: List[str] = []
        for piece in _chunks(text, CHUNK_CHARS):
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            piece = secrets_out(piece, secrets)
            piece = _LONG_LINE.sub(_cut_line, piece)
            piece = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{REDACTED}@", piece)
            piece = _URL_QUERY.sub(_query, piece)
            out.append(_ASSIGNMENT.sub(_assignment, piece))
        return _cut_secret_ends("".join(out), secrets) if cut else "".join(out)

    def known(self, text: str) -> str:
        """Only the known secrets taken out (in any letter case), nothing guessed: for the
        daemon's own log, whose words (`no bearer_token: any local user can post`) would read as
        assignments to the name-based guesses of `text`."""
        return secrets_out(text, self._ordered())

    def data(self, data: bytes, cancel: Optional[threading.Event] = None) -> bytes:
        """Redact bytes of unknown encoding without corrupting the rest (surrogateescape round-trip)."""
        text = data.decode("utf-8", errors="surrogateescape")
        return self.text(text, cancel).encode("utf-8", errors="surrogateescape")
