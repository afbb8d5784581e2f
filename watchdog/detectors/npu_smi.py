"""npu-smi health: is the tool that shows us the NPUs itself working?

A hanging npu-smi usually means the driver or a device is wedged, which is exactly when the job is
in trouble; a failing one (`dcmi ... ret is -8020`, non-zero exits, output we cannot read) leaves
the watchdog blind to the devices. Both are findings of their own, distinct from "a card is gone".
Pure over the state view: the probe's status (its last error starts with the reason prefix the
runner gives it, see `watchdog.npusmi.run.PREFIX`) is all this needs.
"""

from __future__ import annotations

from typing import List

from watchdog.config.schema import Config
from watchdog.core.findings import Finding
from watchdog.core.rulecatalog import JOB_LABELS, Inhibits, Rule, probe_wait
from watchdog.core.state import ProbeStatus, StateView
from watchdog.probes.npu import SECTION as NPU_CONFIG

HUNG_HINT = (
    "npu-smi did not answer within probes.npu.command_timeout and was killed. A hanging npu-smi "
    "usually means the driver or a device is wedged: check `dmesg | tail`, the device logs "
    "(/var/log/npu/slog or ~/ascend/log/debug/device-*), and whether `npu-smi info` answers by hand."
)
FAILING_HINT = (
    "npu-smi keeps failing, so the NPUs cannot be seen. `dcmi ... ret is -80xx` means the driver "
    "cannot be used from here (container without the devices/driver mounts, or devices held by "
    "another process); a non-zero exit or unreadable output: run `npu-smi info` by hand and compare."
)
MISSING_HINT = (
    "npu-smi is not installed where the config says (probes.npu.npu_smi). Install the Ascend driver "
    "(npu-smi is usually /usr/local/bin/npu-smi) or set the absolute path; on a node without NPUs "
    "disable probes.npu."
)


def _detail(message: str) -> str:
    """The error text without its `npu-smi <reason>:` prefix."""
    return message.split(":", 1)[1].strip() if ":" in message else message


#: Failure reasons this module reports itself; the generic `probe_down` leaves them alone.
EXPLAINED = ("timeout", "missing", "exit", "unavailable", "parse")


def explains(status: ProbeStatus) -> bool:
    """Whether a down NPU probe is npu-smi's own failure (reported here, not as `probe_down`):
    one fault, one rule, whatever the order in which the detectors see it."""
    return bool(status.hung) or (status.reason is not None and status.reason.value in EXPLAINED)


def detect(view: StateView, config: Config) -> List[Finding]:
    cfg = NPU_CONFIG.of(config)
    st = view.status("npu")
    if not cfg.enabled or st is None or st.up or st.runs_total == 0:
        return []
    base = {**config.base_labels, "probe": "npu"}
    since = st.last_success or view.started_at
    reason = "timeout" if st.hung else (st.reason.value if st.reason is not None else None)
    details = {"reason": reason, "errors_total": st.errors_total, "timeouts_total": st.timeouts_total,
               "npu_smi": cfg.npu_smi}
    if reason == "timeout":
        return [Finding(
            rule="npu_smi_hung", severity="critical",
            summary=f"npu-smi hangs (no answer within {cfg.command_timeout:g}s, killed)", labels=base, hint=HUNG_HINT,
            value=st.last_error, since=since, details=details)]
    if reason == "missing":
        return [Finding(
            rule="npu_smi_missing", severity="critical",
            summary=f"npu-smi not found ({cfg.npu_smi})", labels=base, hint=MISSING_HINT,
            value=st.last_error, since=since, details=details)]
    if reason in ("exit", "unavailable", "parse") and view.now - since >= cfg.failing_after:
        return [Finding(
            rule="npu_smi_failing", severity="critical",
            summary=f"npu-smi failing ({reason}): {_detail(st.last_error or '')}", labels=base,
            hint=FAILING_HINT, value=st.last_error, since=since, details=details)]
    return []

TRIGGERS = ("npu",)

#: A broken npu-smi is the root cause of the NPU probe being down and of the job-level symptoms
#: it blinds or explains: one page for one fault.
_NPU_SMI_SYMPTOMS = (
    Inhibits(("probe_down",), JOB_LABELS + ("probe",)),
    Inhibits(("stall", "npu_idle", "npu_busy_hang", "npu_low_util")),
)

RULES = (
    Rule("npu_smi_hung", "critical",
         inhibits=_NPU_SMI_SYMPTOMS,
         subject="watchdog", warmup=lambda c, f: probe_wait(c, "npu") + float(NPU_CONFIG.of(c).command_timeout),
         title="npu-smi hangs"),
    Rule("npu_smi_failing", "critical",
         inhibits=_NPU_SMI_SYMPTOMS,
         subject="watchdog", warmup=lambda c, f: probe_wait(c, "npu") + float(NPU_CONFIG.of(c).failing_after), title="npu-smi failing"),
    Rule("npu_smi_missing", "critical",
         inhibits=_NPU_SMI_SYMPTOMS, subject="watchdog", warmup=lambda c, f: probe_wait(c, "npu"), title="npu-smi not found"),
)
