"""Relative links and anchors in Markdown, resolved by GitHub's rules (used by the docs tests)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

from tests.helpers import REPO

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r'<a\s+(?:name|id)="([^"]+)"')
FENCE = re.compile(r"^\s*(```|~~~)")


def pages() -> List[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _prose_lines(text: str) -> Iterator[str]:
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path, cache: Dict[Path, Set[str]] = {}) -> Set[str]:
    if path not in cache:
        found: Set[str] = set()
        counts: Dict[str, int] = {}
        for line in _prose_lines(path.read_text(encoding="utf-8")):
            found.update(EXPLICIT_ANCHOR.findall(line))
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = counts.get(base, 0)
                counts[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def broken_links(docs: List[Path], root: Path = REPO) -> List[Tuple[str, str, str]]:
    bad = []
    for page in docs:
        for line in _prose_lines(page.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (page.parent / file_part).resolve() if file_part else page
                if not dest.exists():
                    bad.append((str(page.relative_to(root)), target, "no such file"))
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    bad.append((str(page.relative_to(root)), target, "no such anchor"))
    return bad
