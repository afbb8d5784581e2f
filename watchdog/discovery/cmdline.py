"""A launcher's command line as discovery shows it: secret-looking arguments redacted.

Works argument by argument (no regex over the joined text, so its cost is linear): `--token=x`
and `--api-key x` lose their value, URLs lose their user info and query string.
"""

from __future__ import annotations

from typing import List, Sequence

from watchdog.privacy.redact import REDACTED, is_secret_name

#: Characters shown at most (a launcher line is shown, not archived).
MAX_CHARS = 1000


def _url(arg: str) -> str:
    scheme, sep, rest = arg.partition("://")
    host, slash, path = rest.partition("/")
    if "@" in host:
        host = REDACTED + "@" + host.rpartition("@")[2]
    path, q, _ = path.partition("?")
    return f"{scheme}{sep}{host}{slash}{path}" + (f"?{REDACTED}" if q else "")


def redact_argv(argv: Sequence[str]) -> str:
    out: List[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if arg.startswith("-"):
            name, eq, _value = arg.partition("=")
            if is_secret_name(name.lstrip("-")):
                if eq:
                    arg = f"{name}={REDACTED}"
                else:
                    hide_next = True
        elif "=" in arg and is_secret_name(arg.partition("=")[0]):
            arg = f"{arg.partition('=')[0]}={REDACTED}"
        if "://" in arg:
            arg = _url(arg)
        out.append(arg)
    return " ".join(out)[:MAX_CHARS]
