"""Every relative link and anchor in README.md and docs/ resolves (GitHub's anchor rules)."""

from __future__ import annotations

from tests.doclinks import broken_links, pages
from tests.helpers import REPO


def test_every_relative_link_and_anchor_resolves():
    bad = broken_links(pages())
    assert not bad, "broken links:\n" + "\n".join(f"{p}: ({t}) {why}" for p, t, why in bad)


def test_the_checker_sees_a_broken_link_and_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title `x`\n\n## Two words\n\n```\n[e](#in-a-fence)\n```\n"
                    "[a](#two-words) [b](#missing) [c](nowhere.md) [d](#title-x) [f](https://example.org/#x)\n")
    bad = broken_links([page], tmp_path)
    assert [(t, why) for _, t, why in bad] == [("#missing", "no such anchor"), ("nowhere.md", "no such file")]


def test_readme_is_a_front_door():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 210, f"README.md has {len(lines)} lines; move reference text to docs/"
