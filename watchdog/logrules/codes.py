"""Vendor code tables as data: a line that carries a known code is that code's finding.

Why: the rule packs name the wordings seen in samples, but a runtime return code (`error code is
507057`), an HCCL result (`HcclAllreduce, error code is 6`), a CANN error code (`EL0003`), an
Ascend chip fault event (`event_id=0x80e01801`) or an NVIDIA Xid that no sample showed still has a
documented meaning. Each table
(`watchdog/logrules/tables/<table>.yaml`) is generated from the vendor's public table and records
its source, version and entries: code, name, the log category a line carrying it is filed under,
whether the vendor's table says it is about hardware or software, and the meaning in English and
Chinese. `code_rules()` turns the tables into ordinary log rules (one per table and category, after
the shipped packs, see `watchdog.logrules.model.build_ruleset`, so a shipped rule of the same category that matches a line wins and the code
rule fills only the gaps); `describe()` names the code a matched line carries, for the message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import yaml

from watchdog.compat import resource_text


TABLES = ("acl", "hccl", "ecode", "xid", "torch_npu", "cuda", "chipfault", "ts", "aclnn")


class CodeTableError(ValueError):
    """A shipped code table is malformed (names the table and the entry)."""
KINDS = ("hardware", "software")
#: The handling levels of MindCluster's device plugin (its `faultCode.json`), mildest first: what the
#: vendor's own scheduler does when a chip raises the code. An entry may carry one (`chipfault`).
HANDLING_LEVELS = ("NotHandleFault", "SubHealthFault", "RestartRequest", "RestartBusiness", "FreeRestartNPU",
          "RestartNPU", "PreSeparateNPU", "SeparateNPU")
_CODE_GROUP = "(?P<code>CODES)"
#: A context whose code is printed in hexadecimal, four digits (HCCL's `errNo[0x0000000005010001]`:
#: the low 16 bits are the HcclResult): `HEXCODES` stands for the table's codes written that way.
HEX = "HEXCODES"


def _hex4(code: str) -> str:
    """A decimal code as the four hex digits a line prints, either case (`11` -> `000[Bb]`)."""
    return "".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in f"{int(code):04x}")


def _fill(context: str, codes: str, hex_codes: str) -> str:
    """A context pattern with its placeholder replaced (hex first: `HEXCODES` contains `CODES`)."""
    return context.replace(HEX, hex_codes) if HEX in context else context.replace("CODES", codes)


@dataclass(frozen=True)
class CodeEntry:
    table: str
    code: str
    name: str
    category: str
    kind: str
    en: str
    zh: str
    #: The vendor's handling level (one of HANDLING_LEVELS), "" when the table has none for the code.
    level: str = ""

    def render(self, lang: str = "en") -> str:
        """`507057 ACL_ERROR_RT_SUSPECT_REMOTE_ERROR: ... (hardware)` in English or Chinese; a
        chip fault code also names the vendor's handling level (`(hardware; vendor level RestartNPU)`)."""
        if lang == "zh":
            kind = "硬件" if self.kind == "hardware" else "软件"
            level = f"；厂商处理级别：{self.level}" if self.level else ""
            return f"{self.code} {self.name}：{self.zh}（{kind}{level}）"
        level = f"; vendor level {self.level}" if self.level else ""
        return f"{self.code} {self.name}: {self.en} ({self.kind}{level})"


@dataclass(frozen=True)
class CodeTable:
    table: str
    title: str
    source: str
    version: str
    contexts: Tuple[str, ...]
    literals: Tuple[str, ...]
    entries: Tuple[CodeEntry, ...]
    #: The text a framework prints for a code where the number may be missing (torch_npu's
    #: `[Error]: The aicore execution times out.`): (code, text) pairs, each text naming one code,
    #: found by `printed_contexts` (`TEXTS` stands for the texts of a category).
    printed: Tuple[Tuple[str, str], ...] = ()
    printed_contexts: Tuple[str, ...] = ()
    #: Lower-case prefilter strings of the printed contexts (one of them is on every such line).
    printed_literals: Tuple[str, ...] = ()

    def families(self) -> Tuple[CodeEntry, ...]:
        """Entries that stand for a prefix (`EI`): any code of that family."""
        return tuple(e for e in self.entries if self.table == "ecode" and len(e.code) == 2)


def _entry(table: str, row: object) -> CodeEntry:
    if not (isinstance(row, list) and len(row) in (6, 7) and all(isinstance(v, (str, int)) for v in row)):
        raise CodeTableError(f"code table {table}: every entry is [code, name, category, kind, en, zh] "
                             f"and optionally the vendor's handling level, got {row!r}")
    code, name, category, kind, en, zh = (str(v) for v in row[:6])
    level = str(row[6]) if len(row) == 7 else ""
    if kind not in KINDS:
        raise CodeTableError(f"code table {table}: {code}: kind must be hardware or software, got {kind!r}")
    if not en.strip() or not zh.strip():
        raise CodeTableError(f"code table {table}: {code}: the meaning is needed in English and Chinese")
    if level and level not in HANDLING_LEVELS:
        raise CodeTableError(f"code table {table}: {code}: unknown handling level {level!r} "
                             f"(known: {', '.join(HANDLING_LEVELS)})")
    return CodeEntry(table, code, name, category, kind, en, zh, level)


_CACHE: Dict[str, CodeTable] = {}


def load_table(name: str) -> CodeTable:
    """One shipped table, validated (unique codes, both languages), cached."""
    if name not in TABLES:
        raise CodeTableError(f"unknown code table {name!r} (known: {', '.join(TABLES)})")
    if name not in _CACHE:
        text = resource_text("watchdog.logrules", "tables", f"{name}.yaml")
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        entries = tuple(_entry(name, row) for row in doc.get("entries", []))
        codes = [e.code for e in entries]
        if len(set(codes)) != len(codes):
            raise CodeTableError(f"code table {name}: duplicate codes")
        _CACHE[name] = CodeTable(
            table=name, title=str(doc["title"]), source=" ".join(str(doc["source"]).split()),
            version=str(doc["version"]), contexts=tuple(doc["contexts"]),
            literals=tuple(str(s).lower() for s in doc["literals"]), entries=entries,
            printed=_printed(name, doc, set(codes)), printed_contexts=tuple(doc.get("printed_contexts", ())),
            printed_literals=tuple(str(s).lower() for s in doc.get("printed_literals", ())))
    return _CACHE[name]


def _printed(name: str, doc: Dict[str, object], codes: Set[str]) -> Tuple[Tuple[str, str], ...]:
    """The table's printed texts, checked: each names a code of the table, and no two codes share
    a text (a shared text could not say which code it was)."""
    raw = doc.get("printed") or {}
    if not isinstance(raw, dict):
        raise CodeTableError(f"code table {name}: printed must map codes to texts")
    pairs = tuple((str(c), str(text)) for c, text in raw.items())
    unknown = [c for c, _ in pairs if c not in codes]
    if unknown:
        raise CodeTableError(f"code table {name}: printed texts for codes not in the table: {', '.join(unknown)}")
    texts = [text for _, text in pairs]
    if len(set(texts)) != len(texts):
        raise CodeTableError(f"code table {name}: two codes share a printed text")
    raw_contexts = doc.get("printed_contexts") or ()
    if not isinstance(raw_contexts, (list, tuple)):
        raise CodeTableError(f"code table {name}: printed_contexts must be a list of patterns")
    contexts = [str(c) for c in raw_contexts]
    if pairs and not contexts:
        raise CodeTableError(f"code table {name}: printed texts need printed_contexts")
    for ctx in contexts:  # the text found is looked up as written: one named group, case kept
        if "(?P<text>TEXTS)" not in ctx or "(?i)" in ctx:
            raise CodeTableError(f"code table {name}: a printed context needs (?P<text>TEXTS) and no (?i): {ctx}")
    if pairs and not doc.get("printed_literals"):  # the matcher's prefilter would skip every such line
        raise CodeTableError(f"code table {name}: printed texts need printed_literals")
    return pairs


def _digits_except(excluded: Sequence[str], width: int) -> str:
    """A regex for any `width` digits except the `excluded` strings (RE2 has no look-ahead)."""
    if not excluded:
        return rf"\d{{{width}}}"
    if width == 1:
        rest = "".join(d for d in "0123456789" if d not in excluded)
        if not rest:
            raise CodeTableError("a code family cannot exclude all of its codes")
        return f"[{rest}]"
    heads: Dict[str, List[str]] = {}
    for code in excluded:
        heads.setdefault(code[0], []).append(code[1:])
    free = "".join(d for d in "0123456789" if d not in heads)
    parts = [f"[{free}]\\d{{{width - 1}}}"] if free else []
    parts += [d + _digits_except(tails, width - 1) for d, tails in sorted(heads.items())]
    return "(?:" + "|".join(parts) + ")"


def _hex_alternation(table: CodeTable, category: Optional[str]) -> str:
    """The numeric codes of `table` (of `category`, or all) as hex alternatives, for `HEXCODES`."""
    return "|".join(_hex4(e.code) for e in table.entries
                    if e.code.isdigit() and int(e.code) < 0x10000 and category in (None, e.category))


def _alternation(table: CodeTable, category: str) -> str:
    """The codes of `table` filed under `category`, as one alternation for the context patterns."""
    singles = [re.escape(e.code) for e in table.entries if e.category == category and e not in table.families()]
    fams = []
    for fam in table.families():
        if fam.category != category:
            continue
        # A listed code of this family that belongs to another category is left to its own rule.
        others = [e.code[2:] for e in table.entries if len(e.code) == 6 and e.code.startswith(fam.code)
                  and e.category != category]
        fams.append(re.escape(fam.code) + _digits_except(others, 4))
    return "|".join(sorted(singles, key=len, reverse=True) + fams)


def code_rule_data(packs: Sequence[str]) -> Tuple[Dict[str, object], ...]:
    """One rule mapping per table and category (only categories among `packs`), named
    `code_<table>_<category>`; the rule loader validates and compiles them like pack entries."""
    out: List[Dict[str, object]] = []
    for name in TABLES:
        table = load_table(name)
        for category in sorted({e.category for e in table.entries}):
            if category not in packs:
                continue
            codes, hex_codes = _alternation(table, category), _hex_alternation(table, category)
            printed = _printed_patterns(table, category)
            out.append({
                "id": f"code_{name}_{category}", "category": category, "severity": "critical",
                "patterns": [_fill(c, codes, hex_codes) for c in table.contexts if HEX not in c or hex_codes] + printed,
                "literals": list(table.literals) + (list(table.printed_literals) if printed else []),
                "title": f"{table.title} ({category})",
                "hint": f"The line carries a documented {table.title}; its meaning is in the message "
                        f"(table: {table.source}, {table.version}).",
            })
    return tuple(out)


#: How a context's match gives the code it carries.
_CodeOf = Callable[["re.Match[str]"], str]
#: Every table's contexts with any of its codes (and its printed texts), compiled once, in the order
#: `describe` tries them: the numbered contexts of every table first, then the printed texts.
_DESCRIBERS: Optional[Tuple[Tuple["re.Pattern[str]", str, _CodeOf], ...]] = None


def _code_group(m: "re.Match[str]") -> str:
    return m.group("code")


def _hex_code_group(m: "re.Match[str]") -> str:
    return str(int(m.group("code"), 16))


def _text_group(code_of_text: Dict[str, str], m: "re.Match[str]") -> str:
    return code_of_text[m.group("text")]


def _describers() -> Tuple[Tuple["re.Pattern[str]", str, _CodeOf], ...]:
    global _DESCRIBERS
    if _DESCRIBERS is None:
        numbered: List[Tuple["re.Pattern[str]", str, _CodeOf]] = []
        printed: List[Tuple["re.Pattern[str]", str, _CodeOf]] = []
        for name in TABLES:
            table = load_table(name)
            codes, hex_codes = _any_code(table), _hex_alternation(table, None)
            numbered += [(re.compile(_fill(ctx, codes, hex_codes)), name, _hex_code_group if HEX in ctx else _code_group)
                         for ctx in table.contexts if HEX not in ctx or hex_codes]
            code_of_text = {text: code for code, text in table.printed}
            printed += [(re.compile(pattern), name, partial(_text_group, code_of_text))
                        for pattern in _printed_patterns(table, None)]
        _DESCRIBERS = tuple(numbered + printed)
    return _DESCRIBERS


def describe(text: str) -> Optional[CodeEntry]:
    """The documented code a line carries (the first context that matches: a number on the line
    before a printed text, tables in their order), else None."""
    for rx, name, code_of in _describers():
        m = rx.search(text)
        if m is not None:
            found = lookup(name, code_of(m))
            if found is not None:
                return found
    return None


def _printed_patterns(table: CodeTable, category: Optional[str]) -> List[str]:
    """The table's printed contexts with the texts of its codes (of `category`, or all) filled in;
    none where it has no such text."""
    by_code = {e.code: e.category for e in table.entries}
    texts = [re.escape(text) for code, text in table.printed if category in (None, by_code[code])]
    alternation = "|".join(sorted(texts, key=len, reverse=True))
    return [ctx.replace("TEXTS", alternation) for ctx in table.printed_contexts] if texts else []


def _any_code(table: CodeTable) -> str:
    return "|".join(sorted((re.escape(e.code) + (r"\d{4}" if e in table.families() else "") for e in table.entries),
                           key=len, reverse=True))


def lookup(table: str, code: str) -> Optional[CodeEntry]:
    """The entry for `code` in `table`: the exact code, else its family (CANN E-codes). Letters
    compare in upper case: logs print hex codes either way (`event_id=0x80e01801`, `retCode=0x2a`)."""
    t = load_table(table)
    code = code.upper()
    for e in t.entries:
        if e.code.upper() == code:
            return e
    for fam in t.families():
        if code.startswith(fam.code) and len(code) == 6:
            return replace(fam, code=code)
    return None
