"""The English and the Chinese runbook say the same about every rule: the severities it raises
(one source, `Rule.raised` in the rule catalog, which the log and kernel rule packs may not
exceed), and every config key either names exists in the config schema."""

from __future__ import annotations

import re
import types
from typing import Annotated, Any, Dict, Iterable, List, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from watchdog.config.schema import Config
from watchdog.core.rulecatalog import catalog
from watchdog.docsgen.runbooks import render_runbook_in
from watchdog.runbook import HERE, source
from watchdog.words import words

SEVERITIES = ("critical", "warning", "info")
EN_SEVERITY = re.compile(r"^\*\*Severity\*\* (.*?)\.(?:\s|$)", re.M | re.S)
ZH_SEVERITY = re.compile(r"^- 级别：([^；\n]*)", re.M)
KEY = re.compile(r"`([a-z][a-z0-9_]*(?:\[\])?(?:\.[a-z0-9_<>{}]+(?:\[\])?)+)`")
#: A backticked word right after "config"/"配置": a key even without a dot (`checks` was not one).
NAMED_KEY = re.compile(r"(?:配置文件|配置|config(?:uration)?(?: key)?)\s*`([^`\s]+)`")


def sections(markdown: str) -> Dict[str, str]:
    """`## name` -> the section's text."""
    out: Dict[str, str] = {}
    for part in re.split(r"^## ", markdown, flags=re.M)[1:]:
        name, _, body = part.partition("\n")
        out[name.strip().strip("`")] = body
    return out


EN = sections(source("en"))
ZH = sections(render_runbook_in("zh"))
ZH_NAMES = {words("zh").severity(s): s for s in SEVERITIES}


def en_severities(rule: str) -> set:
    m = EN_SEVERITY.search(EN[rule])
    assert m, f"{rule}: the English runbook has no **Severity** sentence"
    return set(re.findall(r"\b(critical|warning|info)\b", m.group(1)))


def zh_severities(rule: str) -> set:
    m = ZH_SEVERITY.search(ZH[rule])
    assert m, f"{rule}: the Chinese runbook has no 级别 line"
    return {en for zh, en in ZH_NAMES.items() if zh in m.group(1)}


@pytest.mark.parametrize("rule", list(catalog()))
def test_both_runbooks_name_the_severities_the_rule_raises(rule):
    r = catalog()[rule]
    assert r.severity == r.raised[0], f"{rule}: `severity` is the highest of `severities`"
    assert list(r.raised) == sorted(r.raised, key=SEVERITIES.index), rule
    assert en_severities(rule) == set(r.raised), (rule, EN_SEVERITY.search(EN[rule]).group(1))
    assert zh_severities(rule) == set(r.raised), (rule, ZH_SEVERITY.search(ZH[rule]).group(1))
    if r.severity_key:
        assert "default warning" in EN_SEVERITY.search(EN[rule]).group(1), rule
        assert f"`{r.severity_key}`" in ZH[rule], rule


def _pack_rules(path) -> Iterable[dict]:
    data = yaml.safe_load(path.read_text())
    rules = data.get("rules", data) if isinstance(data, dict) else data
    return [r for r in rules if isinstance(r, dict)]


def test_the_rule_packs_raise_no_severity_the_catalog_does_not_declare():
    """A pack rule at a severity its catalog rule does not list would page at a severity neither
    runbook mentions."""
    import watchdog.logrules as logrules

    packs = sorted((HERE.parent / "logrules" / "packs").glob("*.yaml"))
    assert packs and logrules
    kernel = {"oom": "kernel_oom", "crash": "kernel_crash", "device": "kernel_device"}
    checked = 0
    for pack in packs:
        for pr in _pack_rules(pack):
            rule = f"log_{pr['category']}"
            assert pr.get("severity", "warning") in catalog()[rule].raised, (pack.name, pr.get("id"), rule)
            checked += 1
    for pr in _pack_rules(HERE.parent / "probes" / "kernel.yaml"):
        rule = kernel.get(pr.get("category"), "kernel_event")
        assert pr.get("severity", "warning") in catalog()[rule].raised, ("kernel.yaml", pr.get("id"), rule)
        checked += 1
    assert checked > 40


# -- config keys ---------------------------------------------------------------------------------
def _expand(tp: Any) -> List[Any]:
    origin = get_origin(tp)
    if origin is Annotated:
        return _expand(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return [t for a in get_args(tp) if a is not type(None) for t in _expand(a)]
    return [tp]


def _step(tp: Any, part: str) -> List[Any]:
    """The types `part` leads to from `tp` (empty: no such key)."""
    out: List[Any] = []
    for t in _expand(tp):
        if isinstance(t, type) and issubclass(t, BaseModel):
            for name, f in t.model_fields.items():
                if part in (name, f.alias):
                    out.append(f.annotation)
        elif get_origin(t) in (dict, Dict):
            out.append(get_args(t)[1])
    return out


def _items(tp: Any) -> List[Any]:
    return [get_args(t)[0] for t in _expand(tp) if get_origin(t) in (list, tuple, List) and get_args(t)]


def key_exists(key: str) -> bool:
    current: List[Any] = [Config]
    for part in key.split("."):
        many = part.endswith("[]")
        part = part[:-2] if many else part
        current = [n for t in current for n in _step(t, part)]
        if many:
            current = [n for t in current for n in _items(t)]
        if not current:
            return False
    return True


def config_keys(text: str) -> List[str]:
    dotted = {k for k in KEY.findall(text) if k.split(".")[0].rstrip("[]") in Config.model_fields}
    return sorted(dotted | set(NAMED_KEY.findall(text)))


def test_the_key_checker_tells_a_real_key_from_a_made_up_one():
    for real in ("trends.temperature_warning_c", "probes.commands[].severity", "alerting.for.stall",
                 "probes.logs.rules[].severity", "probes.kernel.rules[].severity", "probes.process.start_grace"):
        assert key_exists(real), real
    for fake in ("trends.temperature", "probes.checks", "alerting.channel.url", "probes.commands.severity.x", "checks"):
        assert not key_exists(fake), fake
    assert config_keys("检查的参数在配置文件 `checks` 中") == ["checks"]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_every_config_key_a_runbook_names_exists(language):
    """The runbook and, in Chinese, every rule's words (the hint a message carries too)."""
    text = source("en") if language == "en" else render_runbook_in("zh") + (HERE.parent / "words" / "zh.yaml").read_text()
    keys = config_keys(text)
    assert len(keys) >= 10, keys
    missing = [k for k in keys if not key_exists(k)]
    assert not missing, f"config keys named in the {language} runbook that do not exist: {missing}"


# -- what to check first -------------------------------------------------------------------------
#: A backticked command a person runs on the node (what both languages must tell them to run).
COMMAND = re.compile(r"`((?:npu-smi|npu-watchdog|dmesg|journalctl|py-spy|hccn_tool|grep|cat|ls|df|mount|"
                     r"chronyc|ps|top|systemctl|lspci|msnpureport)(?: [^`]*)?)`")


@pytest.mark.parametrize("rule", list(catalog()))
def test_both_runbooks_name_the_same_commands_to_check_first(rule):
    from watchdog.runbook import meaning_and_check

    en = set(COMMAND.findall(meaning_and_check(rule, "en")[1]))
    zh = set(COMMAND.findall(words("zh").rule(rule).first_check))
    assert en == zh, f"{rule}: only in English {sorted(en - zh)}, only in Chinese {sorted(zh - en)}"
