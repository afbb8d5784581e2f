"""A verdict on every page: which domain the interruption belongs to and whether a restart helps.

Why: the on-call person's first decision is "restart or call someone", and the fleet's first
question is "how much of what stops our jobs do we not understand". The verdict is derived from
the cause the finding already names (its log rule, the kernel rule, the clean-end row and its
evidence), never guessed from free text: a cause with no domain is `unknown`, and the share of
unknown is measured (`npu_watchdog_interruptions_total{domain="unknown"}`, `scan --report`).
Pure: a finding's rule, labels and details in, a record out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional

#: hardware/driver, network/collective, memory, numerics, user code, unknown.
DOMAINS = ("hardware", "network", "memory", "numerics", "user_code", "unknown")
#: Whether a restart of the job (from its last checkpoint) is likely to get past the interruption.
RESTART = ("helps", "may_help", "no")

#: Log and code categories -> (domain, restart).
_CATEGORY = {
    "oom": ("memory", "no"), "device": ("hardware", "may_help"), "crash": ("user_code", "may_help"),
    "hccl": ("network", "helps"), "nan": ("numerics", "no"), "traceback": ("user_code", "no"),
    "custom": ("unknown", "may_help"),
}
#: Rules whose domain is not their category's.
_RULE = {
    "device_aicore_exception": ("user_code", "no"),       # mostly an operator bug or bad input
    "device_cuda_assert": ("user_code", "no"),            # a kernel's check of its input (a label out of range)
    "hccl_collective_mismatch": ("user_code", "no"),      # ranks took different code paths
    "launcher_killed": ("unknown", "may_help"),          # killed by whom: the kernel would have said OOM
    "launcher_exit_report": ("unknown", "may_help"),     # the worker's own log holds the cause
    "launcher_failure_report": ("unknown", "may_help"),
    "kernel_oom": ("memory", "no"), "kernel_crash": ("user_code", "may_help"),
    "kernel_device": ("hardware", "may_help"),
    "loss_nan": ("numerics", "no"), "loss_scale_collapse": ("numerics", "no"),
}
#: The vendor's handling level of an Ascend chip fault code on the line (the `chipfault` table's
#: levels, from MindCluster's device plugin) -> whether a restart helps. RestartBusiness: the
#: vendor's own scheduler restarts the job, so a restart gets past it. RestartRequest, RestartNPU,
#: FreeRestartNPU, PreSeparateNPU: a re-run after the request is retried or the chip is reset, which
#: the level does not promise. SeparateNPU: the chip leaves service; a restart on it does not help.
#: NotHandleFault and SubHealthFault say nothing about the job: the rule's own verdict stands.
_LEVEL_RESTART = {"RestartBusiness": "helps", "RestartRequest": "may_help", "RestartNPU": "may_help",
                  "FreeRestartNPU": "may_help", "PreSeparateNPU": "may_help", "SeparateNPU": "no"}
#: Finding rules (not log rules) whose domain is fixed.
_FINDING = {"kernel_oom": "kernel_oom", "kernel_crash": "kernel_crash", "kernel_device": "kernel_device",
            "loss_nan": "loss_nan", "loss_scale_collapse": "loss_scale_collapse"}


@dataclass(frozen=True)
class Verdict:
    domain: str
    restart: str
    #: What decided it: a log rule id, a kernel rule, a clean-end row.
    cause: str

    def to_dict(self) -> Dict[str, str]:
        return {"domain": self.domain, "restart": self.restart, "cause": self.cause}


def _of_rule(rule_id: str, category: Optional[str]) -> Optional[Verdict]:
    if rule_id in _RULE:
        d, r = _RULE[rule_id]
        return Verdict(d, r, rule_id)
    if category in _CATEGORY:
        d, r = _CATEGORY[category]
        return Verdict(d, r, rule_id)
    return None


def _category_of_log_rule(rule_id: str) -> Optional[str]:
    for prefix, cat in (("oom_", "oom"), ("device_", "device"), ("crash_", "crash"), ("hccl_", "hccl"),
                        ("nan_", "nan"), ("fp16_", "nan"), ("loss_scale", "nan"), ("skipped_", "nan"),
                        ("launcher_", "traceback"), ("python_traceback", "traceback"), ("cpp_", "traceback"),
                        ("traceback_", "traceback"),
                        ("cann_", "device")):
        if rule_id.startswith(prefix):
            return cat
    if rule_id.startswith("code_"):
        return rule_id.rsplit("_", 1)[-1]
    return None


def _of_end(details: Mapping[str, Any]) -> Verdict:
    """job_gone / rank_missing: the clean-end row and its evidence."""
    row = str((details.get("verdict") or {}).get("row", ""))
    ev = details.get("evidence") or {}
    if row == "kernel_kill":
        text = str(ev.get("kernel_kill") or "").lower()
        return Verdict("memory", "no", row) if "memory" in text or "oom" in text else Verdict("user_code", "may_help", row)
    if row == "failure_line":
        rule_id = str(ev.get("failure_line", "")).split(":", 1)[0].strip()
        return _of_rule(rule_id, _category_of_log_rule(rule_id)) or Verdict("unknown", "may_help", row)
    if row == "exit_status":
        first = str(ev.get("first_exit", ""))
        if "killed" in first:
            return Verdict("unknown", "may_help", "killed")
        if "signal" in first:
            return Verdict("user_code", "may_help", "crash_signal")
        return Verdict("unknown", "may_help", "exit_status")
    return Verdict("unknown", "may_help", row or "gone")


def _with_level(v: Verdict, code: Any) -> Verdict:
    """A documented vendor code on the line whose table gives a handling level decides the restart."""
    level = code.get("level") if isinstance(code, Mapping) else None
    if level in _LEVEL_RESTART:
        return replace(v, restart=_LEVEL_RESTART[level])
    return v


def verdict_of(rule: str, labels: Mapping[str, str], details: Mapping[str, Any]) -> Verdict:
    """The verdict on a finding (every finding has one; `unknown` when nothing says)."""
    if rule.startswith("log_") and labels.get("log_rule"):
        got = _of_rule(labels["log_rule"], rule[4:])
        if got is not None:
            return _with_level(got, details.get("code"))
    if rule in _FINDING:
        return _of_rule(_FINDING[rule], None) or Verdict("unknown", "may_help", rule)
    if rule in ("job_gone", "rank_missing"):
        cause = details.get("cause") or {}
        if cause.get("kind") == "kernel" and "memory" in str(cause.get("reason", "")).lower():
            return Verdict("memory", "no", "kernel")
        return _of_end(details)
    if rule.startswith("npu_") or rule.startswith("link_") or rule.startswith("hccs"):
        return Verdict("hardware", "may_help", rule)
    if rule.startswith("hccl"):
        return Verdict("network", "helps", rule)
    return Verdict("unknown", "may_help", rule)


def is_interruption(rule: str) -> bool:
    """Findings that say a job was (or is being) interrupted: the log and kernel findings and the
    ranks' departure. They carry the verdict as labels too (`domain`, `restart`) and count in
    `npu_watchdog_interruptions_total`."""
    return rule.startswith("log_") or rule.startswith("kernel_") or rule in ("job_gone", "rank_missing")


def verdict_of_rule(rule_id: str, category: str) -> Verdict:
    """The verdict of a log rule's match (what `scan --report` counts per domain)."""
    return _of_rule(rule_id, category) or Verdict("unknown", "may_help", rule_id)
