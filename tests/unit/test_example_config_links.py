"""The shipped example config points its readers at pages and sections that exist: every
`docs/<page>.md#<anchor>` it names resolves (GitHub's anchor rules), and it names no README
section by title (the README's sections moved to docs/ once; such a pointer went stale)."""

from __future__ import annotations

import re

from tests.doclinks import anchors
from tests.helpers import REPO

EXAMPLE = REPO / "watchdog" / "config" / "npu-watchdog.example.yaml"
REF = re.compile(r"\b(docs/[\w./-]+\.md|README\.md)(?:#([\w-]+))?")


def test_every_page_and_section_the_example_names_exists():
    text = EXAMPLE.read_text(encoding="utf-8")
    refs = REF.findall(text)
    assert len(refs) >= 9, refs
    bad = [(page, anchor) for page, anchor in refs
           if not (REPO / page).exists() or (anchor and anchor not in anchors(REPO / page))]
    assert not bad, bad


def test_no_pointer_to_a_readme_section_by_its_title():
    text = EXAMPLE.read_text(encoding="utf-8")
    assert not re.findall(r'README "[^"]+"', text)
