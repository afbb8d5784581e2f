"""The rule catalog: every alert rule the daemon can raise, declared where it is produced.

Each detector module declares a `RULES` tuple of `Rule` next to the code that builds its findings:
severity, default `for`, which symptoms it inhibits, how long its detector needs fresh evidence
after a (re)start, and its runbook anchor. This module only gathers those declarations; it is the
one list the engine (default `for`, default inhibitions, restart warm-up), the metrics (series that
start at zero) and the docs (`render_markdown`) read. A test checks that every rule a detector can
emit is declared and that every declared rule has a runbook section, so the lists cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from watchdog.core.findings import JOB_LABEL
from watchdog.core.plugins import Slot

#: Labels that identify one training job on one node: the default `equal` of an inhibition and
#: the grouping key of messages.
JOB_LABELS: Tuple[str, ...] = ("host", JOB_LABEL)

#: Where each rule's runbook section lives (anchors are the rule names).
RUNBOOK = "docs/runbook.md"



@dataclass(frozen=True)
class Inhibits:
    """While the declaring rule fires, `targets` with equal values for every `equal` label are
    not sent: they are its symptoms."""

    targets: Tuple[str, ...]
    equal: Tuple[str, ...] = JOB_LABELS


def _no_warmup(_config: Any, _finding: Dict[str, Any]) -> float:
    return 0.0


def probe_wait(config: Any, *probes: str) -> float:
    """Three rounds of the slowest of `probes` plus the jitter: fresh evidence after a start (the
    warm-up counts from the first complete round of every probe)."""
    intervals = [float(getattr(config.probes, p).interval) for p in probes] or [0.0]
    return 3 * max(intervals) + float(config.probes.jitter)


#: The probes a job's symptoms are read from, for a rule that names none (`Rule.observes`).
JOB_PROBES = ("heartbeat", "logs", "npu", "process")


def release_hold(name: str, config: Any) -> float:
    """How long a symptom released by its cleared cause waits before it may page on its own: two
    rounds of the probes its evidence comes from plus the jitter. A round that began before the
    cause cleared may still read the fault (a heartbeat file not yet rewritten when the logs
    already show progress); the next round reads the present. A symptom still there then
    outlives its cause and pages."""
    r = catalog().get(name)
    probes = (r.observes if r is not None and r.observes else JOB_PROBES)
    try:
        rounds = [float(getattr(config.probes, p).interval) for p in probes if getattr(config.probes, p, None)]
        return 2 * max(rounds, default=0.0) + float(config.probes.jitter)
    except (AttributeError, TypeError, ValueError):  # never break the engine: no hold
        return 0.0


def detail(finding: Dict[str, Any], key: str, default: float = 0.0) -> float:
    """A number from a restored finding's details (its threshold when it fired), else `default`."""
    v = (finding.get("details") or {}).get(key)
    return float(v) if isinstance(v, (int, float)) else default


@dataclass(frozen=True)
class Rule:
    """One alert rule, as on-call sees it."""

    name: str
    #: The highest severity the rule raises (some rules also raise a lower one).
    severity: str
    # What the alert means and what to check first live in the runbook only
    # (watchdog/runbook/en.md, `rule_words`), not here: one source for that text.
    #: How long the finding must hold before it fires, seconds (config `alerting.for` overrides).
    default_for: float = 0.0
    inhibits: Tuple[Inhibits, ...] = ()
    #: Rules that report the same event through another probe (NaN seen in the heartbeat and in a
    #: log line): whichever fires first pages; the others are folded into it.
    same_event: Tuple[str, ...] = ()
    #: Seconds of fresh evidence the detector needs after a start before its silence means "gone"
    #: (an alert restored from disk is held that long). Called with the config and the restored
    #: finding (its details carry the threshold it fired with).
    warmup: Callable[[Any, Dict[str, Any]], float] = field(default=_no_warmup, compare=False)
    #: The probes all of the rule's evidence comes from. While one of them cannot see (down, its
    #: program hung or failing), the rule's firing alerts are held: the finding's absence then is
    #: the probe's blindness, not the fault clearing (a lost card's alert once resolved while
    #: npu-smi hung and paged again when it answered). Absence counts from when it sees again.
    observes: Tuple[str, ...] = ()
    #: What the alert is about: `job` (the training job or its node) or `watchdog` (the watchdog's
    #: own ability to watch: a probe down, npu-smi failing, offsets or state it cannot keep). The
    #: two never share a message, so they never wait for each other to resolve.
    subject: str = "job"
    #: Declaring module (filled in by the catalog).
    module: str = ""
    #: Its English title: the phrase a message's headline starts with ("NaN loss at iteration
    #: 5426 on ranks 0-7"); other languages' titles are in `watchdog/words/<lang>.yaml`.
    title: str = ""
    #: Every severity the rule raises, highest first, where it raises more than `severity`: both
    #: runbooks name exactly these (their severity lines are checked against it, and the Chinese
    #: one is written from it), so the two never disagree about a rule's severity.
    severities: Tuple[str, ...] = ()
    #: The config key that chooses the severity per item (a command check, a custom log rule).
    severity_key: str = ""
    #: The finding reports an end (the job or a rank is gone). A cause that paged at its severity
    #: and mutes it explains it for good: it is never paged on its own, not even when the cause
    #: clears first (a card back after the job it killed was replaced: the end is old news).
    ends: bool = False

    @property
    def raised(self) -> Tuple[str, ...]:
        """The severities the rule raises, highest first."""
        return self.severities or (self.severity,)

    @property
    def anchor(self) -> str:
        return f"{RUNBOOK}#{self.name}"


#: (module name, its `RULES`) of every detector module, in the composition root's order.
DECLARED: Slot[Tuple[Tuple[str, Tuple[Rule, ...]], ...]] = Slot("the rule catalog")


def install(declared: Sequence[Tuple[str, Sequence[Rule]]]) -> None:
    """The detector modules' declarations, handed down by the composition root
    (`watchdog.plugins_list`): the catalog is gathered from these."""
    DECLARED.fill(tuple((mod, tuple(rules)) for mod, rules in declared))
    catalog.cache_clear()


@lru_cache(maxsize=1)
def catalog() -> Dict[str, Rule]:
    """name -> Rule, gathered from the producing modules in declaration order."""
    out: Dict[str, Rule] = {}
    for mod, rules in DECLARED.get():  # the modules that produce findings
        for r in rules:
            if r.name in out:
                raise ValueError(f"rule {r.name} declared twice ({out[r.name].module} and {mod})")
            if r.subject not in SUBJECTS:
                raise ValueError(f"rule {r.name}: subject must be one of {SUBJECTS}, not {r.subject!r}")
            out[r.name] = Rule(**{**r.__dict__, "module": mod})
    return out


def rule(name: str) -> Optional[Rule]:
    return catalog().get(name)


def names() -> Tuple[str, ...]:
    return tuple(catalog())


SUBJECTS = ("job", "watchdog")


def subject(name: str) -> str:
    """`watchdog` for a rule about the watchdog itself, else `job` (unknown rules too)."""
    r = catalog().get(name)
    return r.subject if r is not None else "job"


def is_end(name: str) -> bool:
    """Whether the rule reports an end (`Rule.ends`)."""
    r = catalog().get(name)
    return r is not None and r.ends


def default_for(name: str) -> float:
    r = catalog().get(name)
    return r.default_for if r is not None else 0.0


def inhibited_by(name: str) -> Tuple[str, ...]:
    """Rules whose firing mutes `name` (the inverse of the `inhibits` declarations)."""
    return tuple(r.name for r in catalog().values() for i in r.inhibits if name in i.targets)


def default_inhibitions() -> List[Dict[str, List[str]]]:
    """The declared inhibitions as config-shaped rules (source, target, equal), one per declaration."""
    out = []
    for r in catalog().values():
        for i in r.inhibits:
            out.append({"source": [r.name], "target": list(i.targets), "equal": list(i.equal)})
        if r.same_event:
            out.append({"source": [r.name], "target": list(r.same_event), "equal": list(JOB_LABELS)})
    return out


def same_event(a: str, b: str) -> bool:
    ra, rb = catalog().get(a), catalog().get(b)
    return bool(ra and b in ra.same_event) or bool(rb and a in rb.same_event)


def warmup(name: str, config: Any, finding: Optional[Dict[str, Any]] = None) -> float:
    r = catalog().get(name)
    try:
        return float(r.warmup(config, finding or {})) if r is not None else 0.0
    except Exception:  # a warm-up must never break the engine: fall back to none
        return 0.0


def _dur(seconds: float) -> str:
    if seconds <= 0:
        return "0s"
    s = int(seconds)
    return f"{s // 60}m" if s % 60 == 0 and s >= 60 else f"{s}s"


def render_markdown() -> str:
    """The catalog as a Markdown table (the detection reference is generated from it)."""
    rows = ["| rule | severity | default `for` | inhibits | inhibited by | runbook |",
            "|---|---|---|---|---|---|"]
    for r in catalog().values():
        inh = sorted({t for i in r.inhibits for t in i.targets} | set(r.same_event))
        by = sorted(set(inhibited_by(r.name)))
        cell = lambda xs: ", ".join(f"`{x}`" for x in xs) or "-"  # noqa: E731
        rows.append(f"| `{r.name}` | {r.severity} | {_dur(r.default_for)} | {cell(inh)} | {cell(by)} | "
                    f"[{r.name}](runbook.md#{r.name}) |")
    return "\n".join(rows) + "\n"


def title(name: str) -> str:
    """The English title of rule `name` (its declaration's; a name the catalog does not know,
    e.g. a newer detector's, falls back to the name with spaces)."""
    r = catalog().get(name)
    return (r.title if r is not None else "") or name.replace("_", " ").capitalize()



if __name__ == "__main__":  # pragma: no cover - `python -m watchdog.core.rulecatalog` (the rule table)
    print(render_markdown(), end="")
