"""Which release this copy of the daemon is: its semantic version (CHANGELOG.md lists what each one
changed) and the commit it was built from, so an ops team rolling out to many nodes can tell what
runs where (`--version`, `/metrics` build info, the bundle's name).

The commit comes from `watchdog/COMMIT`, which the bundle build and `install.sh` write into the
copy they package; in a source checkout (an editable install) it is read from `.git` directly,
without running git. Anything else says `unknown`, never fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from watchdog import __version__

#: Written into the packaged copy by scripts/bundle.py and scripts/install.sh (never in the tree).
COMMIT_FILE = Path(__file__).with_name("COMMIT")
UNKNOWN = "unknown"
_HEX = re.compile(r"[0-9a-f]{7,40}")
_cached: Optional[str] = None


def commit() -> str:
    """The full commit id this package was built from, or `unknown`."""
    global _cached
    if _cached is None:
        _cached = _from_file() or _from_checkout(Path(__file__).resolve().parent.parent) or UNKNOWN
    return _cached


def short_commit() -> str:
    """The first 12 hex digits of `commit()` (or `unknown`): what the version line prints."""
    full = commit()
    return full[:12] if full != UNKNOWN else full


def version_line() -> str:
    """`npu-watchdog 0.2.0 (commit 1a2b3c4d5e6f)`: what `--version` prints."""
    return f"npu-watchdog {__version__} (commit {short_commit()})"


def _from_file() -> Optional[str]:
    try:
        text = COMMIT_FILE.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _HEX.fullmatch(text) else None


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _from_checkout(top: Path) -> Optional[str]:
    """HEAD of the git checkout at `top` (a plain clone or a worktree), read from its files."""
    git = top / ".git"
    if git.is_file():  # a worktree: `gitdir: <path>`
        text = _read(git) or ""
        if not text.startswith("gitdir:"):
            return None
        git = (top / text.split(":", 1)[1].strip()).resolve()
    head = _read(git / "HEAD") if git.is_dir() else None
    if not head:
        return None
    if _HEX.fullmatch(head):
        return head
    if not head.startswith("ref:"):
        return None
    ref = head.split(":", 1)[1].strip()
    common = _read(git / "commondir")
    bases = [git] + ([(git / common).resolve()] if common else [])
    for base in bases:
        found = _read(base / ref)
        if found and _HEX.fullmatch(found):
            return found
    for base in bases:
        for line in (_read(base / "packed-refs") or "").splitlines():
            parts = line.split(" ", 1)
            if len(parts) == 2 and parts[1] == ref and _HEX.fullmatch(parts[0]):
                return parts[0]
    return None
