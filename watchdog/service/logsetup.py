"""Logging to stderr for journald: no timestamps in text mode (journald adds them), JSON on request.

Under systemd (stderr is the journal stream named by `$JOURNAL_STREAM`), every line starts with
its syslog priority, `<3>` for errors, `<4>` warnings, `<6>` info, `<7>` debug: journald takes the
prefix as the entry's priority (SyslogLevelPrefix=yes is the default), so `journalctl -p err -u
npu-watchdog` finds the errors. Written to a terminal or a file, lines carry no prefix.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Callable, List, Optional, TextIO

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_STD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra=` fields are included under their own names."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for k, v in record.__dict__.items():
            if k not in _STD_ATTRS and not k.startswith("_"):
                out[k] = v
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


#: Python level -> syslog priority (sd-daemon's `<N>` prefixes).
_PRIORITY = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))


def syslog_priority(levelno: int) -> int:
    return next((p for lvl, p in _PRIORITY if levelno >= lvl), 7)


def is_journal_stream(stream: object, env: Optional[dict] = None) -> bool:
    """Whether `stream` is the journal: its device and inode are the ones systemd put in
    `$JOURNAL_STREAM` (a redirected or inherited stderr is not, even with the variable set)."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(x) for x in value.split(":"))
        st = os.fstat(stream.fileno())  # type: ignore[attr-defined]
    except (ValueError, OSError, AttributeError, TypeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


class PriorityPrefix(logging.Formatter):
    """Prefix each line of a record (tracebacks too) with its syslog priority."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        tag = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(tag + line for line in self.inner.format(record).split("\n"))


#: What takes the config's secrets out of a logged line (see `Redacting`); set by `redact_with`.
_REDACT: List[Optional[Callable[[str], str]]] = [None]


def redact_with(redact: Optional[Callable[[str], str]]) -> None:
    """Pass every logged line through `redact` from now on (the config's secrets' redactor, set
    at start and at each reload by the commands that load a config)."""
    _REDACT[0] = redact


class Redacting(logging.Formatter):
    """The last step of every line the daemon logs: its own messages never hold a secret, but a
    library's may (urllib3 logs `Failed to parse headers (url=<the webhook URL>)` when an endpoint
    answers with a malformed header), so the whole formatted line, traceback included, passes the
    config's secrets' redaction."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record)
        redact = _REDACT[0]
        return redact(text) if redact is not None else text


def setup_logging(level: str = "info", fmt: str = "text", stream: Optional[TextIO] = None) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    out = stream or sys.stderr
    handler = logging.StreamHandler(out)
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter()
    else:
        # journald timestamps each line; when run by hand, the time still helps.
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    formatter = Redacting(formatter)
    handler.setFormatter(PriorityPrefix(formatter) if is_journal_stream(out) else formatter)
    root.addHandler(handler)
    set_level(level)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)


def set_level(level: str) -> None:
    logging.getLogger().setLevel(_LEVELS.get(level, logging.INFO))
