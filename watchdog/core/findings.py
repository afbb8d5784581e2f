"""Findings: what detectors conclude, and what the alert engine receives.

A finding is idempotent by construction: the same condition on the same labels always yields the
same `key`, so a restart or a repeated detector run never produces a second, different alert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from watchdog.compat import sha256_hex  # not hashlib: see watchdog.compat

SEVERITIES = ("info", "warning", "critical")
SEVERITY_RANK = {name: i for i, name in enumerate(SEVERITIES)}

#: The label naming the training job (the config's `job.name`) on findings, alerts, payloads and
#: metrics. Not `job`: Prometheus sets `job` on every scraped series (ours would become
#: `exported_job`), so a pushed alert and a scraped series of one job could not share a matcher.
JOB_LABEL = "training_job"
#: The context of a finding about a chip's hardware: the job that holds the chip now (see
#: `Finding.context`). The card is what fails; its holder can change while it stays broken.
HOLDER = (JOB_LABEL,)
#: What the label was called before; accepted in matchers and inhibition `equal` lists, and
#: rewritten in state persisted by an older version.
LEGACY_JOB_LABEL = "job"


def upgrade_labels(labels: Mapping[str, str]) -> Dict[str, str]:
    """`labels` with the legacy job label renamed (state written by an older version)."""
    out = dict(labels)
    if LEGACY_JOB_LABEL in out and JOB_LABEL not in out:
        out[JOB_LABEL] = out.pop(LEGACY_JOB_LABEL)
    return out


def fingerprint(rule: str, labels: Mapping[str, str]) -> str:
    """Stable key of a finding: rule plus its identifying labels, order-independent."""
    text = rule + "\x00" + "\x00".join(f"{k}={labels[k]}" for k in sorted(labels))
    return sha256_hex(text.encode("utf-8"))[:16]


def identity(labels: Mapping[str, str], context: Tuple[str, ...]) -> Dict[str, str]:
    """`labels` without the `context` ones (see `Finding.context`)."""
    return {k: v for k, v in labels.items() if k not in context}


@dataclass(frozen=True)
class Finding:
    """One condition that holds now.

    `labels` identify the condition (host, training_job, and where relevant rank, device, probe...): only
    put stable identities there. Values that change from round to round (ages, counts, the current
    reading) belong in `value` and `details`, or the key would change and the alert would flap.
    """

    rule: str
    severity: str
    summary: str
    labels: Dict[str, str]
    hint: str = ""
    value: Optional[str] = None
    #: Epoch seconds when the condition started, as observed (e.g. the last heartbeat time).
    since: Optional[float] = None
    details: Dict[str, Any] = field(default_factory=dict)
    #: Log lines or other evidence to show in the alert (already truncated by the producer).
    evidence: tuple = ()
    #: Whether the engine should request a snapshot when this fires (None: by severity).
    snapshot: Optional[bool] = None
    #: Labels that describe the condition without identifying it: the training job that holds a
    #: chip whose hardware fails. The key leaves them out, so a card fault that outlives its job
    #: (a restart, a moment with no rank on the node) stays one alert, not a page per holder.
    context: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def key(self) -> str:
        return fingerprint(self.rule, self.identity)

    @property
    def identity(self) -> Dict[str, str]:
        """The labels that identify the condition: all but the `context` ones."""
        return identity(self.labels, self.context)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "key": self.key,
            "rule": self.rule,
            "severity": self.severity,
            "summary": self.summary,
            "labels": dict(self.labels),
            "hint": self.hint,
            "value": self.value,
            "since": self.since,
            "details": dict(self.details),
            "evidence": list(self.evidence),
            "context": list(self.context),
        }
