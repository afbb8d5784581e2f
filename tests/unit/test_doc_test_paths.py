"""Every test file and kit the docs name exists where they say (tests moved into tier folders
once, and six paths in the docs went stale)."""

from __future__ import annotations

import re

from tests.doclinks import pages
from tests.helpers import REPO

PATH = re.compile(r"(?<![\w/.-])tests/[A-Za-z0-9_/.-]+\.(?:py|ya?ml|json|md)\b")


def test_every_test_path_named_in_the_docs_exists():
    named = {(p.relative_to(REPO).as_posix(), m) for p in pages() for m in PATH.findall(p.read_text(encoding="utf-8"))}
    assert len(named) > 30
    missing = sorted((page, path) for page, path in named if not (REPO / path).exists())
    assert not missing, missing
