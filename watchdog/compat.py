"""The few names that moved between the Python versions the daemon runs on (CPython 3.7-3.13).

Ascend training nodes run the interpreter their OS ships: 3.7 on openEuler 20.03, EulerOS 2.x and
Kylin V10, 3.8 on Ubuntu 20.04, 3.9 on openEuler 22.03, 3.10-3.13 elsewhere. The rest of the
package imports these names from here (one line each) instead of testing the version itself, so
dropping an old Python later is an edit of this module alone. Standard library only, plus `typing_extensions` (a dependency of pydantic)
and `python-dateutil` (installed before 3.9 only, pyproject.toml says so).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator, Optional, Tuple

if sys.version_info >= (3, 8):
    from typing import Literal, Protocol, runtime_checkable
else:  # 3.7
    from typing_extensions import Literal, Protocol, runtime_checkable

if sys.version_info >= (3, 9):
    from typing import Annotated, get_args, get_origin
else:  # 3.7, 3.8: typing has neither Annotated nor a get_origin that knows it
    from typing_extensions import Annotated, get_args, get_origin

if sys.version_info >= (3, 9):
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
else:  # 3.7, 3.8: python-dateutil's zones (backports.zoneinfo has no aarch64 wheel to bundle)
    from dateutil import tz as _tz

    class ZoneInfoNotFoundError(KeyError):  # type: ignore[no-redef]
        """No time zone of that name (as zoneinfo's)."""

    def ZoneInfo(key: str) -> datetime.tzinfo:  # type: ignore[no-redef]  # noqa: N802 - zoneinfo's name
        """The zone `key` from the system tz database, else dateutil's own copy of it. Like
        zoneinfo, only a relative IANA key: never a path, never the local zone for ''."""
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"ZoneInfo keys must be normalized relative paths, got: {key!r}")
        zone = _tz.gettz(key)
        if zone is None:
            raise ZoneInfoNotFoundError(f"No time zone found with key {key}")
        return zone

# The SHA digests without `hashlib`: importing `hashlib` loads OpenSSL's libcrypto through `_hashlib`
# (3.7 MB resident, measured by bench/bench_resident.py), for digests of a few hundred bytes that
# name findings, notifications and log files. CPython's own implementations give the same bytes;
# their modules were renamed in 3.12 (`_sha256` -> `_sha2`). `random` loads `_sha512` this way too.
try:  # 3.12+
    from _sha2 import sha256 as _sha256
except ImportError:
    try:  # 3.7-3.11
        from _sha256 import sha256 as _sha256  # type: ignore[no-redef]
    except ImportError:  # an interpreter built without them (never seen): OpenSSL's
        from hashlib import sha256 as _sha256  # type: ignore[no-redef]
try:
    from _sha1 import sha1 as _sha1
except ImportError:
    from hashlib import sha1 as _sha1  # type: ignore[no-redef]

__all__ = ["Annotated", "Literal", "Protocol", "ZoneInfo", "ZoneInfoNotFoundError", "exitcode_of",
           "get_args", "get_origin", "hidden_module", "load_without_openssl", "resource_text", "runtime_checkable", "sha1_hex", "sha256_hex"]


def sha256_hex(data: bytes) -> str:
    """`hashlib.sha256(data).hexdigest()`, without loading libcrypto (see above)."""
    return _sha256(data).hexdigest()


def sha1_hex(data: bytes) -> str:
    """`hashlib.sha1(data).hexdigest()`, without loading libcrypto (see above)."""
    return _sha1(data).hexdigest()


def resource_text(package: str, *parts: str) -> str:
    """The text of a data file shipped inside `package` (`parts` is its path below it).
    `importlib.resources.files` is 3.9+; before it, the file sits beside the package's modules in
    every way this package is installed (wheel, editable, source tree), never in a zip, so its
    folder is found from this module's, without importing anything by name."""
    try:
        from importlib.resources import files  # 3.9+; here because 3.8 has no such name
    except ImportError:
        base = Path(__file__).resolve().parent.parent.joinpath(*package.split("."))
        return base.joinpath(*parts).read_text(encoding="utf-8")
    node = files(package)
    for part in parts:
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def exitcode_of(status: int) -> Optional[int]:
    """`os.waitstatus_to_exitcode` (3.9+): the exit code of a child, or minus the signal that
    killed it; None for a stopped child (not an exit)."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return None


@contextlib.contextmanager
def hidden_module(name: str) -> Iterator[None]:
    """Imports inside the block see `name` as absent (an ImportError, which the standard library's
    optional imports are written for); after it, `name` imports as usual. Nothing when `name` is
    already imported. See `load_without_openssl`."""
    if name in sys.modules:
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not importable"
    try:
        yield
    finally:
        if name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]


def _builtin_digests() -> bool:
    """Whether this interpreter has CPython's own implementation of every digest `hashlib` names
    (a build may leave some to OpenSSL: `--with-builtin-hashlib-hashes`). Without one of them,
    a `hashlib` imported without OpenSSL would log an error for it at import."""
    try:
        import _blake2, _md5, _sha1, _sha3
    except ImportError:
        return False
    del _blake2, _md5, _sha1, _sha3  # only whether they import
    try:
        import _sha2  # 3.12+
        del _sha2
    except ImportError:
        try:
            import _sha256, _sha512  # 3.7-3.11
            del _sha256, _sha512
        except ImportError:
            return False
    return True


def load_without_openssl() -> Tuple[ModuleType, ...]:
    """For the daemon, before pydantic, APScheduler or anything else imports them: `hashlib` and
    `hmac` on CPython's own digests, and pydantic's core without TLS support. OpenSSL's libssl and
    libcrypto (about 5 MB resident, bench/bench_resident.py) are then loaded only by a channel's
    first HTTPS send, through `requests`. Three paths loaded them before: pydantic imports
    `secrets`, which imports `hmac` and `hashlib`, whose `_hashlib` is libcrypto; asyncio imports
    `ssl`, and on older interpreters (3.8) pydantic-core's `typing_extensions.deprecated`
    imports asyncio (APScheduler's import of it takes a stand-in: watchdog.scheduling.aps, so on
    3.9 and later asyncio is not loaded at all); `http.server` imports `http.client`, which
    imports `ssl` (the endpoint speaks its own HTTP: watchdog.http.wire). The digests are the
    same bytes; nothing in the daemon uses asyncio's TLS. Where the interpreter lacks a builtin
    digest, `hashlib` keeps OpenSSL's. Returns the modules it imported (they stay cached for
    every later importer)."""
    loaded: Tuple[ModuleType, ...] = ()
    if _builtin_digests():
        with hidden_module("_hashlib"):
            import hashlib
            import hmac
        loaded = (hashlib, hmac)
    with hidden_module("ssl"):
        import pydantic_core  # (pydantic imports its modules lazily; their core is what asks)
    return loaded + (pydantic_core,)
