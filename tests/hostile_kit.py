"""A second, unprivileged user for tests of hostile processes and files (issue: nothing on the
node may blind or steer the root daemon).

`OTHER_UID` is `nobody` (65534), present on every Debian system; `as_other_user` is a
`preexec_fn` that drops a child to it, so the test's own processes play the other user; the
`other_root` fixture (conftest) is a folder it can reach.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

OTHER_UID = 65534
OTHER_GID = 65534


def as_other_user() -> None:
    """preexec_fn: the child runs as the unprivileged user (groups dropped first)."""
    os.setgroups([])
    os.setgid(OTHER_GID)
    os.setuid(OTHER_UID)


@contextlib.contextmanager
def other_users_root() -> Iterator[Path]:
    """A folder the other user can reach, outside pytest's temporary root (which is 0700, and
    which another pytest run on the machine may set back to 0700 at any moment)."""
    root = Path(tempfile.mkdtemp(prefix="npu-watchdog-test-"))
    os.chmod(root, 0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def other_users_dir(path: Path) -> Path:
    """A folder the other user owns (where its job writes heartbeats and logs); `path` lies in
    `other_root`."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, OTHER_UID, OTHER_GID)
    return path


def write_as_other_user(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    os.chown(path, OTHER_UID, OTHER_GID)


def root_only_secret(path: Path, text: str) -> Path:
    """A root-owned 0600 JSON file: what a hostile job wants the daemon to show it."""
    path.write_text(text)
    os.chmod(path, 0o600)
    return path
