"""Behaviour goldens: what the demo exposes and sends, kept in files under tests/fixtures/golden/.

A refactoring must not change the daemon's behaviour. Two things the on-call side depends on are
pinned here, reduced to what is deterministic across runs:

- the demo's `/metrics` exposition apart from values: every metric family's name, TYPE and HELP
  and, for each sample name, the label sets it is served with. Label values that name a fixed
  vocabulary the daemon serves from the start (probes, log sources, channels, rules, reasons,
  results, severities: `VALUE_LABELS`) are kept, so a renamed probe or a lost series shows; the
  others (ranks, NPUs, pids, paths, versions) and the number of series vary run to run, so only
  their label names are kept;
- the demo's message counts per step and channel (firing and resolved), as `DemoRun.play()`
  counts them.

To regenerate after an intended change, run the golden tests with NPU_WATCHDOG_GOLDEN=update
(`make golden` does that) and review the diff of tests/fixtures/golden/ like code.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Dict, Iterable, List, Set, Tuple

GOLDEN_DIR = Path(__file__).resolve().parent / "fixtures" / "golden"
UPDATE_ENV = "NPU_WATCHDOG_GOLDEN"

# One sample line: name, optional {labels}, value (and an optional timestamp).
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+\S+(?:\s+\S+)?$")
# One label pair inside the braces; the value may hold escaped quotes, commas and braces.
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"\s*,?\s*')
_META = re.compile(r"^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) ?(.*)$")


# Labels whose values are a fixed vocabulary, served (at zero) from the start of every run.
VALUE_LABELS = frozenset({"probe", "source", "channel", "engine", "result", "reason", "severity",
                          "category", "rule"})
# Families with one series per firing alert: which alerts fire at scrape time is timing, so only
# their label names are kept.
PER_ALERT_FAMILIES = frozenset({"npu_watchdog_alert_first_seen_timestamp_seconds"})


class GoldenError(ValueError):
    """A /metrics line the golden cannot read (the exposition format itself changed)."""


def _label_set(body: str, line: str, keep_values: bool) -> Tuple[str, ...]:
    """`name` for most labels, `name="value"` for the VALUE_LABELS (with `keep_values`), sorted."""
    out: List[str] = []
    pos = 0
    while pos < len(body):
        m = _LABEL.match(body, pos)
        if not m:
            raise GoldenError(f"unreadable labels in /metrics line: {line!r}")
        name = m.group(1)
        out.append(m.group(0).rstrip(", ") if keep_values and name in VALUE_LABELS else name)
        pos = m.end()
    return tuple(sorted(out))


def metrics_shape(text: str) -> str:
    """The exposition without values: `# HELP`/`# TYPE` lines and one `name{labels}` line per
    distinct label set (see the module doc), grouped by family and sorted (serving order is not
    behaviour)."""
    meta: Dict[str, Dict[str, str]] = {}
    samples: Dict[str, Set[Tuple[str, Tuple[str, ...]]]] = {}
    family = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _META.match(line)
        if m:
            family = m.group(2)
            meta.setdefault(family, {})[m.group(1)] = m.group(3)
            continue
        if line.startswith("#"):
            continue
        s = _SAMPLE.match(line)
        if not s:
            raise GoldenError(f"unreadable /metrics line: {line!r}")
        name = s.group(1)
        owner = family if name.startswith(family) else name
        labels = _label_set(s.group(2) or "", line, keep_values=owner not in PER_ALERT_FAMILIES)
        samples.setdefault(owner, set()).add((name, labels))
    out: List[str] = []
    for fam in sorted(set(meta) | set(samples)):
        for kind in ("HELP", "TYPE"):
            if kind in meta.get(fam, {}):
                out.append(f"# {kind} {fam} {meta[fam][kind]}".rstrip())
        for name, labels in sorted(samples.get(fam, ())):
            out.append(f"{name}{{{','.join(labels)}}}")
    return "\n".join(out) + "\n"


def step_key(name: str) -> str:
    """A demo step's stable name: its text before any ':' or ' (' (which carry ranks and seconds)."""
    return name.split(":")[0].split(" (")[0]


def message_counts(results: Iterable) -> str:
    """Per demo step: firing messages, resolved messages and the counts per channel, as JSON."""
    doc = {step_key(r.name): {"messages": r.messages, "resolved": r.resolved,
                              "channels": {c: dict(sorted(v.items())) for c, v in sorted(r.channels.items())}}
           for r in results}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def golden_diff(name: str, actual: str) -> str:
    """Compares `actual` with tests/fixtures/golden/<name>; returns a unified diff ('' when equal).
    With NPU_WATCHDOG_GOLDEN=update it writes `actual` as the new golden and returns ''."""
    path = GOLDEN_DIR / name
    if os.environ.get(UPDATE_ENV) == "update":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return ""
    if not path.exists():
        return f"no golden file {path.name}: run the test with {UPDATE_ENV}=update (make golden)\n"
    expected = path.read_text()
    return "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                        f"golden/{name}", "this run"))
