"""Releases ops can track: the version is semantic and CHANGELOG.md has a section for it, and the
commit a copy was built from is read from its COMMIT file or its checkout (plain clone, worktree,
packed refs), never guessed: `unknown` where neither says."""

from __future__ import annotations

import re

import pytest

from tests.helpers import REPO
from watchdog import __version__, release

SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?")
SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def test_the_version_is_semantic_and_the_changelog_has_its_section():
    assert SEMVER.fullmatch(__version__), __version__
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "keepachangelog.com" in text and "semver.org" in text
    sections = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert __version__ in sections, sections
    # newest first, and every released section carries its date
    released = [s for s in sections if s != "Unreleased"]
    assert released == sorted(released, key=lambda v: tuple(int(x) for x in v.split(".")), reverse=True)
    for v in released:
        assert re.search(rf"^## \[{re.escape(v)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.MULTILINE), v
    # the heartbeat package is released with the daemon, at the same version
    hb = (REPO / "contrib" / "heartbeat" / "npu_watchdog_heartbeat" / "__init__.py").read_text(encoding="utf-8")
    assert f'__version__ = "{__version__}"' in hb


def _clone(top, head_text):
    git = top / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head_text)
    return git


def test_the_commit_of_a_plain_clone(tmp_path):
    git = _clone(tmp_path, "ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text(SHA + "\n")
    assert release._from_checkout(tmp_path) == SHA


def test_the_commit_of_a_detached_head_and_of_packed_refs(tmp_path):
    _clone(tmp_path / "a", SHA + "\n")
    assert release._from_checkout(tmp_path / "a") == SHA
    git = _clone(tmp_path / "b", "ref: refs/heads/rel\n")
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{OTHER} refs/heads/x\n{SHA} refs/heads/rel\n")
    assert release._from_checkout(tmp_path / "b") == SHA


def test_the_commit_of_a_worktree(tmp_path):
    main = _clone(tmp_path / "main", "ref: refs/heads/main\n")
    (main / "refs" / "heads" / "feature").write_text(OTHER + "\n")
    wt_git = main / "worktrees" / "wt"
    wt_git.mkdir(parents=True)
    (wt_git / "HEAD").write_text("ref: refs/heads/feature\n")
    (wt_git / "commondir").write_text("../..\n")
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {wt_git}\n")
    assert release._from_checkout(tmp_path / "wt") == OTHER


@pytest.mark.parametrize("head", ["", "garbage\n", "ref: refs/heads/missing\n"])
def test_no_commit_where_the_checkout_does_not_say(tmp_path, head):
    _clone(tmp_path, head)
    assert release._from_checkout(tmp_path) is None
    assert release._from_checkout(tmp_path / "nowhere") is None


def test_the_commit_file_wins_and_a_bad_one_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setattr(release, "COMMIT_FILE", tmp_path / "COMMIT")
    (tmp_path / "COMMIT").write_text(SHA + "\n")
    assert release._from_file() == SHA
    (tmp_path / "COMMIT").write_text("$(rm -rf /)\n")
    assert release._from_file() is None
    monkeypatch.setattr(release, "_cached", None)
    monkeypatch.setattr(release, "_from_checkout", lambda top: None)
    assert release.commit() == "unknown" and release.version_line() == f"npu-watchdog {__version__} (commit unknown)"
