"""A second, unprivileged user for tests of hostile processes and files (issue: nothing on the
node may blind or steer the root daemon).

`OTHER_UID` is `nobody` (65534), present on every Debian system; `as_other_user` is a
`preexec_fn` that drops a child to it, so the test's own processes play the other user.
"""

from __future__ import annotations

import os
from pathlib import Path

OTHER_UID = 65534
OTHER_GID = 65534


def as_other_user() -> None:
    """preexec_fn: the child runs as the unprivileged user (groups dropped first)."""
    os.setgroups([])
    os.setgid(OTHER_GID)
    os.setuid(OTHER_UID)


def other_users_dir(path: Path) -> Path:
    """A folder the other user owns (where its job writes heartbeats and logs)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, OTHER_UID, OTHER_GID)
    parent = path.parent
    while True:  # every ancestor must be searchable by the other user (tmp_path is 0700)
        mode = parent.stat().st_mode
        if not mode & 0o001:
            os.chmod(parent, mode | 0o011)
        if parent == parent.parent or str(parent) in ("/tmp", "/"):
            break
        parent = parent.parent
    return path


def write_as_other_user(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    os.chown(path, OTHER_UID, OTHER_GID)


def root_only_secret(path: Path, text: str) -> Path:
    """A root-owned 0600 JSON file: what a hostile job wants the daemon to show it."""
    path.write_text(text)
    os.chmod(path, 0o600)
    return path
