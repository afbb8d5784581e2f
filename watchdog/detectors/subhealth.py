"""Sub-health detectors: pure functions over the subhealth probe's latest round.

Rules, each naming what to do (`details.action`: watch, drain_after_job, isolate_now):
`npu_ecc_single_bit_rising` (corrected ECC errors climbing: the memory is wearing; drain after
the job), `npu_ecc_double_bit` (an uncorrectable ECC error: isolate now),
`npu_fault_recurring` (a health code that came back `code_repeat_count` times within
`code_repeat_window`: the vendor's scheduler isolates such a card, so do we), and
`npu_aicore_throttled` (the AI Core clock held below its rating while busy: watch the cooling and
power). A health code seen once is `npu_unhealthy`'s (watchdog.detectors.npu), which names the
code's meaning and action from the vendor's table.

A chip's job is the one `watchdog.detectors.jobs.chip_owners` finds; a chip no job holds gives a
node finding, without a job label.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from watchdog.config.schema import Config
from watchdog.core.findings import HOLDER, JOB_LABEL, Finding
from watchdog.core.rulecatalog import JOB_LABELS, Inhibits, Rule, probe_wait
from watchdog.core.state import StateView
from watchdog.detectors.jobs import latest_chip_owners
from watchdog.detectors.series import blind_reason, fmt_age
from watchdog.detectors.healthcodes import advise_code
from watchdog.npusmi.subhealth import DRAIN, ISOLATE, WATCH
from watchdog.probes.subhealth import SUBHEALTH, ChipSubhealth, SubhealthObservation, SubhealthProbeConfig
from watchdog.probes.subhealth import SECTION as SUBHEALTH_CONFIG

HINT_SBE = (
    "Corrected (single-bit) ECC errors keep appearing on this card's memory: the memory is wearing "
    "and the driver retires pages; uncorrectable errors, which kill the job, tend to follow. Action: "
    "drain after the job - have the card checked before the next long job. First check: "
    "`npu-smi info -t ecc -i <npu>` (counts and isolated pages) and the device logs."
)
HINT_DBE = (
    "An uncorrectable (double-bit) ECC error: data in device memory was lost. The job on this card "
    "is likely already failing or computing on corrupt data. Action: isolate now - take the card out "
    "of service and have it checked. First check: `npu-smi info -t ecc -i <npu>`, `dmesg`, the device logs."
)
HINT_RECUR = (
    "The same health code keeps coming back on this card: the vendor's own scheduler isolates a card "
    "whose fault repeats within a day. Action: isolate now - the next occurrence may take the job "
    "down. First check: `npu-smi info -t health -i <npu>`, the device logs, and the code in the "
    "Ascend fault-code table."
)
HINT_THROTTLE = (
    "The AI Core runs below its rated clock while it is busy: power capping or overheating slows this "
    "rank and with it the whole job. Action: watch - check the cooling (fans, liquid loop, inlet "
    "temperature) and the power supply. First check: `npu-smi info -t common -i <npu>` (Aicore Freq "
    "and curFreq, temperature) and `npu-smi info -t power -i <npu>`."
)


def _labels(config: Config, c: ChipSubhealth, owners: Dict[Tuple[int, int], str]) -> Dict[str, str]:
    labels = {**config.base_labels, "npu": str(c.npu), "chip": str(c.chip)}
    job = owners.get((c.npu, c.chip))
    if job is not None:
        labels[JOB_LABEL] = job
    return labels


def _name(c: ChipSubhealth) -> str:
    return f"NPU {c.npu} chip {c.chip}"


def _ecc(view: StateView, cfg: SubhealthProbeConfig, c: ChipSubhealth, labels: Dict[str, str]) -> List[Finding]:
    if c.ecc is None or c.ecc_base is None:
        return []
    base_at, base = c.ecc_base
    out = []
    dbe = c.ecc.double_bit - base.double_bit
    if dbe > 0 or c.ecc.double_bit_isolated_pages > base.double_bit_isolated_pages:
        out.append(Finding(
            rule="npu_ecc_double_bit", severity="critical",
            summary=f"{_name(c)}: uncorrectable ECC error ({c.ecc.double_bit} double-bit errors, "
                    f"{max(dbe, 0)} new in {fmt_age(view.now - base_at)})",
            labels=labels, hint=HINT_DBE, value=str(c.ecc.double_bit), since=base_at,
            details={"double_bit": c.ecc.double_bit, "new": dbe, "isolated_pages": c.ecc.double_bit_isolated_pages,
                     "action": ISOLATE}))
    sbe = c.ecc.single_bit - base.single_bit
    if sbe >= cfg.ecc_single_bit_rise:
        hours = max(view.now - base_at, 1.0) / 3600
        out.append(Finding(
            rule="npu_ecc_single_bit_rising", severity="warning",
            summary=f"{_name(c)}: {sbe} new single-bit ECC errors in {fmt_age(view.now - base_at)} "
                    f"({c.ecc.single_bit} now, {sbe / hours:.0f}/h)",
            labels=labels, hint=HINT_SBE, value=f"+{sbe}", since=base_at,
            details={"single_bit": c.ecc.single_bit, "new": sbe, "per_hour": round(sbe / hours, 1),
                     "threshold": cfg.ecc_single_bit_rise, "window_seconds": float(cfg.ecc_window),
                     "isolated_pages": c.ecc.single_bit_isolated_pages, "action": DRAIN}))
    return out


def _recurring(view: StateView, cfg: SubhealthProbeConfig, c: ChipSubhealth, labels: Dict[str, str]) -> List[Finding]:
    window = float(cfg.code_repeat_window)
    out = []
    for code, times in c.appearances:
        recent = [t for t in times if t >= view.now - window]
        if len(recent) < cfg.code_repeat_count:
            continue
        adv = advise_code(code, c.health or "")
        out.append(Finding(
            rule="npu_fault_recurring", severity="critical",
            summary=f"{_name(c)}: health code {code} ({adv.meaning}) appeared {len(recent)} times in "
                    f"{fmt_age(window)}",
            labels={**labels, "code": code}, hint=HINT_RECUR, value=f"{len(recent)}x", since=recent[0],
            details={"code": code, "level": adv.level, "meaning": adv.meaning, "appearances": len(recent),
                     "threshold": cfg.code_repeat_count, "window_seconds": window, "present": code in c.codes,
                     "action": ISOLATE}))
    return out


def _throttled(view: StateView, cfg: SubhealthProbeConfig, c: ChipSubhealth, labels: Dict[str, str]) -> Optional[Finding]:
    # Held for `throttle_for` between two reads of the clock: one slow read followed by a long
    # gap (each chip's clock is read every third sub-health round) is not a hold.
    if (c.throttled_since is None or c.throttled_last is None or c.common is None
            or c.throttled_last - c.throttled_since < float(cfg.throttle_for)):
        return None
    r = c.common
    return Finding(
        rule="npu_aicore_throttled", severity="warning",
        summary=f"{_name(c)}: AI Core at {r.aicore_cur_freq_mhz} of {r.aicore_freq_mhz} MHz while "
                f"{r.aicore_util_pct:.0f}% busy for {fmt_age(c.throttled_last - c.throttled_since)}",
        labels=labels, hint=HINT_THROTTLE, value=f"{r.aicore_cur_freq_mhz}MHz", since=c.throttled_since,
        details={"cur_freq_mhz": r.aicore_cur_freq_mhz, "rated_freq_mhz": r.aicore_freq_mhz,
                 "temp_c": r.temp_c, "power_w": r.power_w, "action": WATCH})


def detect(view: StateView, config: Config) -> List[Finding]:
    cfg = SUBHEALTH_CONFIG.of(config)
    if not cfg.enabled or blind_reason(view, "subhealth"):
        return []
    sample = view.latest(SUBHEALTH)
    obs = sample.value if sample is not None else None
    if not isinstance(obs, SubhealthObservation) or obs.absent:
        return []
    owners, _ = latest_chip_owners(view)
    out: List[Finding] = []
    for c in obs.chips:
        labels = _labels(config, c, owners)
        out += _ecc(view, cfg, c, labels)
        out += _recurring(view, cfg, c, labels)
        f = _throttled(view, cfg, c, labels)
        if f is not None:
            out.append(f)
    return [replace(f, context=HOLDER) for f in out]  # the card fails, whoever holds it


TRIGGERS = ("subhealth",)

_SUB = lambda c, f: probe_wait(c, "subhealth")  # noqa: E731
#: A card whose fault keeps coming back or whose memory lost data explains its chip's health word
#: and the job's symptoms.
_CARD = (
    Inhibits(("npu_unhealthy", "npu_ecc_single_bit_rising"), JOB_LABELS + ("npu", "chip")),
    Inhibits(("stall", "log_hccl", "npu_idle", "heartbeat_stale", "heartbeat_no_progress", "throughput_drop")),
)

RULES = (
    Rule("npu_ecc_single_bit_rising", "warning", observes=("subhealth",),
         warmup=lambda c, f: float(SUBHEALTH_CONFIG.of(c).interval) * 3 + _SUB(c, f), title="NPU memory errors rising"),
    Rule("npu_ecc_double_bit", "critical", observes=("subhealth",), inhibits=_CARD,
         warmup=lambda c, f: float(SUBHEALTH_CONFIG.of(c).interval) * 3 + _SUB(c, f), title="NPU uncorrectable memory error"),
    Rule("npu_fault_recurring", "critical", observes=("subhealth",), inhibits=_CARD, warmup=_SUB, title="NPU fault keeps recurring"),
    Rule("npu_aicore_throttled", "warning", observes=("subhealth",),
         warmup=lambda c, f: float(SUBHEALTH_CONFIG.of(c).throttle_for) + _SUB(c, f), title="NPU AI Core throttled"),
)
