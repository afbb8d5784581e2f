"""What happened, in words: the phrase of each rule, the step or iteration a finding names, and
compact sets of ranks and NPUs ("ranks 0-7", "NPU 2, 5").

Why: a title made of a raw log line (or of rule names) makes the reader parse it at 3 a.m.; a
title made of a phrase, the training step and the affected ranks says it at a glance. Everything
here is pure and works on trusted parts (rule names, numbers) or on untrusted text only through
linear-time regular expressions that extract digits.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence


#: The phrase of each rule of the rule table (tests check every known rule has one). A rule not
#: listed (a newer detector) falls back to its name with spaces.
RULE_PHRASES: Dict[str, str] = {
    "process_not_started": "Training process not started",
    "rank_missing": "Rank process gone",
    "job_gone": "Training job gone",
    "job_finished": "Training job finished cleanly",
    "rank_zombie": "Rank process is a zombie",
    "rank_stopped": "Rank process stopped",
    "rank_disk_sleep": "Rank stuck in disk wait",
    "heartbeat_stale": "Heartbeat stale",
    "heartbeat_no_progress": "No training progress",
    "heartbeat_clock_skew": "Heartbeat clock skew",
    "heartbeat_unreadable": "Heartbeat file unreadable",
    "loss_nan": "NaN loss",
    "loss_scale_collapse": "Loss scale collapsed",
    "throughput_drop": "Throughput dropped",
    "rank_straggler": "Straggling rank",
    "npu_smi_hung": "npu-smi hangs",
    "npu_smi_failing": "npu-smi failing",
    "npu_smi_missing": "npu-smi not found",
    "npu_idle": "NPU idle",
    "npu_busy_hang": "NPU busy but no progress",
    "npu_low_util": "Low NPU utilisation",
    "hbm_growth": "NPU memory growing",
    "npu_unhealthy": "NPU unhealthy",
    "npu_missing": "NPU card lost",
    "npu_temperature": "NPU too hot",
    "stall": "Training stalled",
    "log_nan": "NaN loss",
    "log_oom": "NPU out of memory",
    "log_hccl": "HCCL error",
    "log_device": "NPU device error",
    "log_traceback": "Python traceback",
    "log_custom": "Log rule matched",
    "log_crash": "Process crashed",
    "log_unreadable": "Log file unreadable",
    "log_offsets_unsaved": "Log positions not saved",
    "probe_down": "Watchdog probe failing",
    "command_check": "Command check failed",
    "path_unmatched": "Watched path matches nothing",
    "state_damaged": "Watchdog state damaged",
}

def phrase(rule: str) -> str:
    return RULE_PHRASES.get(rule) or rule.replace("_", " ").capitalize()


def _int_or_none(v: str) -> Optional[int]:
    return int(v) if v.isdigit() and len(v) < 10 else None


def compact(values: Iterable[str], limit: int = 8) -> str:
    """`0-7, 9, 12-15`: numbers as ranges, others sorted; past `limit` parts, `and N more`."""
    vals = sorted(set(values), key=lambda v: (_int_or_none(v) is None, _int_or_none(v) or 0, v))
    parts: List[str] = []
    i = 0
    while i < len(vals):
        n = _int_or_none(vals[i])
        j = i
        while n is not None and j + 1 < len(vals) and _int_or_none(vals[j + 1]) == n + (j + 1 - i):
            j += 1
        parts.append(vals[i] if j == i else f"{vals[i]}-{vals[j]}")
        i = j + 1
    if len(parts) > limit:
        rest = len(parts) - limit
        return ", ".join(parts[:limit]) + f" and {rest} more"
    return ", ".join(parts)


#: Labels that name where an alert is, in the order they are told, with their words.
_SCOPE = (("rank", "rank", "ranks"), ("npu", "NPU", "NPU"), ("chip", "chip", "chips"),
          ("device_id", "device", "devices"))
#: Labels that are the message's own header (host, training job) or the rule itself.
_SILENT = {"host", "training_job", "job"}


def scope(labels_list: Sequence[Dict[str, str]]) -> str:
    """`on ranks 0-7`, `on NPU 2, 5`, `on NPU 3 (probe npu)`: where a rule's alerts are."""
    parts: List[str] = []
    told = set(_SILENT)
    for key, one, many in _SCOPE:
        vals = {str(lb[key]) for lb in labels_list if lb.get(key) not in (None, "")}
        told.add(key)
        if key in ("chip", "device_id") and parts:
            continue  # "NPU 2" already says where; chip and device ids only matter alone
        if vals:
            parts.append(f"{one if len(vals) == 1 else many} {compact(vals)}")
    extra: Dict[str, set] = {}
    for lb in labels_list:
        for k, v in lb.items():
            if k not in told and v not in (None, ""):
                extra.setdefault(k, set()).add(str(v))
    tail = ", ".join(f"{k} {compact(v, 4)}" for k, v in sorted(extra.items()))
    text = ("on " + " ".join(parts)) if parts else ""
    if tail:
        text = f"{text} ({tail})" if text else f"({tail})"
    return text


def headline(rule: str, labels_list: Sequence[Dict[str, str]], step: Optional[tuple]) -> str:
    """`NaN loss at iteration 5426 on ranks 0-7`."""
    out = phrase(rule)
    if rule != "log_custom":  # the log rule's own name only tells something for custom rules
        labels_list = [{k: v for k, v in lb.items() if k != "log_rule"} for lb in labels_list]
    if step:
        out += f" at {step[0]} {step[1]}"
    where = scope(labels_list)
    return f"{out} {where}" if where else out
