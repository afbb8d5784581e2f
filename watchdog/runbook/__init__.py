"""The runbook the daemon serves itself: one Markdown file per language, one section per rule.

Why here and not only in docs/: training clusters are often air-gapped, so a link in an alert to
a public page (or to a placeholder host) is a dead link at the worst moment. The source is
package data, `watchdog/runbook/<lang>.md` (`en.md`; any other language is another file next to
it), with one `## <rule>` section per rule whose anchor is the rule name. The daemon serves every
file present at `/runbook/<lang>` (`/runbook` is English) as plain, self-contained HTML, and every
message links its rule through `runbook_link`, the one function that builds those links.
docs/runbook.md is generated from `en.md` (`make docs`).

The Markdown is our own, trusted text; the renderer still escapes everything and only emits
`http(s)` and same-page links, so a mistake in a file cannot inject markup or fetch anything.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
#: The language of `/runbook` and of links without one.
DEFAULT_LANGUAGE = "en"
#: In a runbook base URL, replaced by the message's language.
LANG_PLACEHOLDER = "{lang}"
_LANG = re.compile(r"^[a-z]{2,3}(?:-[A-Za-z0-9]{2,8})?$")
_SECTION = re.compile(r"^## +`?([A-Za-z0-9_.-]+)`? *$")


def languages() -> Tuple[str, ...]:
    """The languages shipped (one `<lang>.md` each), English first."""
    found = sorted(p.stem for p in HERE.glob("*.md") if _LANG.match(p.stem))
    return tuple(sorted(found, key=lambda x: (x != DEFAULT_LANGUAGE, x)))


def source(language: str = DEFAULT_LANGUAGE) -> str:
    """The Markdown of one language; KeyError for a language not shipped."""
    if language not in languages():
        raise KeyError(language)
    return (HERE / f"{language}.md").read_text(encoding="utf-8")


def anchors(language: str = DEFAULT_LANGUAGE) -> List[str]:
    """The section anchors (rule names) of one language, in order."""
    return [m.group(1) for m in (_SECTION.match(ln) for ln in source(language).splitlines()) if m]


#: A rule's severity sentence: up to the first full stop followed by a space (a dotted config key
#: such as `trends.hbm_eta_critical` may appear in it).
_SEVERITY = re.compile(r"^\*\*Severity\*\* .*?\.(?:\s+|$)")
_CHECK = "**Check first.**"


@lru_cache(maxsize=None)
def _sections(language: str) -> Dict[str, List[str]]:
    """anchor -> the paragraphs of its section (lines joined), from the Markdown source."""
    out: Dict[str, List[str]] = {}
    current: Optional[List[str]] = None
    for kind, lines in _blocks(source(language)):
        m = _SECTION.match(lines[0]) if kind == "heading" else None
        if m:
            current = out.setdefault(m.group(1), [])
        elif current is not None and kind == "para":
            current.append(" ".join(lines))
    return out


def meaning_and_check(rule: str, language: str = DEFAULT_LANGUAGE) -> Tuple[str, str]:
    """What `rule`'s section says it means (its `**Severity**` paragraph without the severity)
    and what to check first (its `**Check first.**` paragraph); empty where the section lacks
    one. The runbook file is the only place this text lives."""
    paras = _sections(language).get(rule, [])
    meaning = next((_SEVERITY.sub("", p, count=1) for p in paras if _SEVERITY.match(p)), "")
    check = next((p[len(_CHECK):].strip() for p in paras if p.startswith(_CHECK)), "")
    return meaning, check


def runbook_link(base: Optional[str], rule: str, language: str = DEFAULT_LANGUAGE) -> Optional[str]:
    """The link to `rule`'s section: `<base>#<rule>`, with `{lang}` in `base` replaced by
    `language`. Every message and annotation builds its runbook link here. None without a base."""
    if not base:
        return None
    return f"{base.split('#', 1)[0].replace(LANG_PLACEHOLDER, language)}#{rule}"


def own_base(http_enabled: bool, host: str, port: int) -> Optional[str]:
    """The base of the daemon's own runbook, from its HTTP listen address: a wildcard address
    (all interfaces) is reached by the machine's host name. None when HTTP is off."""
    if not http_enabled or not port:
        return None  # no endpoint, or a port only known once bound
    if host in ("", "0.0.0.0", "::"):
        import socket

        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/runbook/{LANG_PLACEHOLDER}"


# -- Markdown to HTML ---------------------------------------------------------------------------
_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")


def escape_html(text: str, quote: bool = True) -> str:
    """`html.escape`, character for character: the `html` package imports its 2,231-entry entity
    table (0.7 MB resident) to unescape, which nothing here does."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;").replace("'", "&#x27;") if quote else text


def _inline(text: str) -> str:
    """Escaped text with `code`, **bold** and [links](url); a link that is neither http(s) nor
    on this page (another docs page) keeps its text only."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(escape_html(text[pos:m.start()]))
        code, bold, label, url = m.groups()
        if code is not None:
            out.append(f"<code>{escape_html(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{_inline(bold)}</strong>")
        elif re.match(r"^(https?://|#)[^\s\"'<>]*$", url):
            out.append(f'<a href="{escape_html(url, quote=True)}">{_inline(label)}</a>')
        else:
            out.append(_inline(label))
        pos = m.end()
    out.append(escape_html(text[pos:]))
    return "".join(out)


def _blocks(md: str) -> List[Tuple[str, List[str]]]:
    """(kind, lines) blocks: heading, code (indented after a blank line), list-item, para."""
    blocks: List[Tuple[str, List[str]]] = []
    prev = "blank"
    for raw in md.splitlines():
        line = raw.rstrip()
        if not line.strip():
            prev = "blank"
            continue
        if raw.startswith("    ") and prev in ("blank", "code"):
            kind, text = "code", raw[4:]
        elif line.startswith("#"):
            kind, text = "heading", line
        elif re.match(r"^[-*] ", line):
            kind, text = "list-item", line[2:]
        else:
            kind, text = "para", line.strip()
        same = blocks and prev != "blank" and (
            (kind == "code" and prev == "code") or
            (kind == "para" and blocks[-1][0] in ("para", "list-item")))
        if same or (kind == "code" and blocks and blocks[-1][0] == "code" and prev == "blank"):
            blocks[-1][1].append(text)
        else:
            blocks.append((kind, [text]))
        prev = kind
    return blocks


def to_html(md: str, title: str, lang: str) -> str:
    """A whole page: headings (`##` sections get their rule name as id), paragraphs, lists,
    code blocks; no script, no style sheet, nothing fetched from elsewhere."""
    body: List[str] = []
    in_list = False
    for kind, lines in _blocks(md):
        if kind != "list-item" and in_list:
            body.append("</ul>")
            in_list = False
        if kind == "heading":
            level = min(len(lines[0]) - len(lines[0].lstrip("#")), 6)
            text = lines[0][level:].strip()
            m = _SECTION.match(lines[0])
            ident = f' id="{escape_html(m.group(1), quote=True)}"' if m and level == 2 else ""
            body.append(f"<h{level}{ident}>{_inline(text)}</h{level}>")
        elif kind == "code":
            body.append(f"<pre><code>{escape_html(chr(10).join(lines))}</code></pre>")
        elif kind == "list-item":
            if not in_list:
                body.append("<ul>")
                in_list = True
            body.append(f"<li>{_inline(' '.join(lines))}</li>")
        elif kind == "para":
            body.append(f"<p>{_inline(' '.join(lines))}</p>")
    if in_list:
        body.append("</ul>")
    return (f'<!doctype html><html lang="{escape_html(lang, quote=True)}"><head><meta charset="utf-8">'
            f"<title>{escape_html(title)}</title></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


@lru_cache(maxsize=None)
def page(language: str = DEFAULT_LANGUAGE) -> bytes:
    """The served page of one language (rendered once per process)."""
    src = source(language)
    head = src.partition("\n")[0].lstrip("#").strip() if src.startswith("# ") else "runbook"
    return to_html(src, f"npu-watchdog {head}", language).encode("utf-8")


def docs_page() -> str:
    """docs/runbook.md: the English source, with a note that it is generated."""
    src = source(DEFAULT_LANGUAGE)
    head, _, rest = src.partition("\n")
    note = ("\n<!-- Generated from watchdog/runbook/en.md by `make docs`: edit that file, "
            "not this one. -->\n")
    return f"{head}\n{note}{rest}"
