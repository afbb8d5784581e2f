"""Device verdicts from one `npu-smi info` observation (pure).

A card that is present, healthy, mostly free and held by no process is ready for a new job.
Leftover processes matter most: a previous run that did not exit still holds its HBM and the
device, and the new job dies at start with `EJ0001 ... Maybe the last training process is running`.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Tuple

from watchdog.doctor.model import FAIL, PASS, SKIPPED, WARN, CheckResult
from watchdog.observations import NpuObservation

GROUP = "devices"
#: Health strings (npu-smi) -> verdict. Anything else (UNKNOWN, new words) is a warning.
HEALTH_STATUS = {"OK": PASS, "WARNING": WARN, "ALARM": FAIL, "CRITICAL": FAIL}


def cards_summary(obs: NpuObservation) -> List[Dict[str, object]]:
    """The per-device facts worth recording next to a checkpoint."""
    out = []
    for c in obs.chips:
        out.append({"npu": c.npu, "chip": c.chip, "device_id": c.device_id, "name": c.name,
                    "health": c.health, "bus_id": c.bus_id, "hbm_used_mb": c.hbm_used_mb,
                    "hbm_total_mb": c.hbm_total_mb, "memory_used_mb": c.memory_used_mb,
                    "memory_total_mb": c.memory_total_mb})
    return out


def check_devices(
    obs: NpuObservation,
    expected: Optional[int],
    min_free_hbm_ratio: float,
    health_codes: Optional[Dict[Tuple[int, int], List[str]]] = None,
    job_pids: Iterable[int] = (),
    pid_alive: Optional[Callable[[int], Optional[bool]]] = None,
) -> List[CheckResult]:
    """Count, health, free HBM and leftover processes.

    `job_pids`: processes of the job being checked (`--pid` and its relatives): holding a card is
    expected for them. `pid_alive(pid)` answers True/False, or None when it cannot tell (the pid
    lives in another container's namespace).
    """
    codes = dict(obs.health_codes)
    codes.update(health_codes or {})
    out: List[CheckResult] = []
    chips = list(obs.chips)
    n = len(chips)
    npus = sorted({c.npu for c in chips})

    # Count.
    if expected is None:
        out.append(CheckResult(GROUP, "count", PASS if n else WARN,
                               f"{n} device(s) on {len(npus)} card(s); no expected count configured",
                               "" if n else "npu-smi lists no device: check the driver (lsmod | grep drv_davinci)",
                               details={"seen": n, "cards": npus}))
    elif n < expected:
        out.append(CheckResult(GROUP, "count", FAIL, f"{n} of {expected} expected devices present",
                               "a card dropped off the bus or its driver failed: check dmesg, "
                               "`npu-smi info -m`, and reseat/replace before starting the job",
                               details={"seen": n, "expected": expected, "cards": npus}))
    elif n > expected:
        out.append(CheckResult(GROUP, "count", WARN, f"{n} devices present, {expected} expected",
                               "update doctor.expected_devices (or --expect) to this node's device count",
                               details={"seen": n, "expected": expected}))
    else:
        out.append(CheckResult(GROUP, "count", PASS, f"all {expected} expected devices present",
                               details={"seen": n, "expected": expected}))

    # Health.
    bad = []
    worst = PASS
    for c in chips:
        status = HEALTH_STATUS.get((c.health or "").upper(), WARN)
        if status == PASS:
            continue
        chip_codes = codes.get((c.npu, c.chip), [])
        bad.append({"npu": c.npu, "chip": c.chip, "health": c.health, "codes": chip_codes})
        if status == FAIL or worst == PASS:
            worst = status
    if not chips:
        out.append(CheckResult(GROUP, "health", SKIPPED, "no devices to check"))
    elif not bad:
        out.append(CheckResult(GROUP, "health", PASS, f"all {n} devices report health OK"))
    else:
        parts = []
        for b in bad:
            code_text = f" codes {' '.join(b['codes'])}" if b["codes"] else ""
            parts.append(f"NPU {b['npu']} chip {b['chip']} {b['health']}{code_text}")
        out.append(CheckResult(GROUP, "health", worst, "; ".join(parts),
                               "look the codes up in the health manual (`npu-smi info -t health -i <npu> -c <chip>`); "
                               "an Alarm card should be fixed or excluded (ASCEND_RT_VISIBLE_DEVICES) before the run",
                               details={"unhealthy": bad}))

    # Free HBM.
    low = []
    measured = 0
    for c in chips:
        if c.hbm_total_mb:
            used, total = c.hbm_used_mb or 0, c.hbm_total_mb
        elif c.memory_total_mb:
            # 310/310P have no HBM column; their DDR is the device memory.
            used, total = c.memory_used_mb or 0, c.memory_total_mb
        else:
            continue
        measured += 1
        free_ratio = max(0.0, 1.0 - used / total)
        if free_ratio < min_free_hbm_ratio:
            low.append({"npu": c.npu, "chip": c.chip, "used_mb": used, "total_mb": total,
                        "free_ratio": round(free_ratio, 4)})
    if not measured:
        out.append(CheckResult(GROUP, "free_memory", SKIPPED, "npu-smi reports no device memory figures"))
    elif low:
        text = "; ".join(f"NPU {x['npu']} chip {x['chip']} {x['used_mb']}/{x['total_mb']} MB used" for x in low)
        out.append(CheckResult(GROUP, "free_memory", WARN,
                               f"free memory below {min_free_hbm_ratio:.0%}: {text}",
                               "something still holds device memory: see the process check, or a previous "
                               "job's leftovers; the new job may OOM early", details={"low": low}))
    else:
        out.append(CheckResult(GROUP, "free_memory", PASS,
                               f"all {measured} devices have at least {min_free_hbm_ratio:.0%} memory free"))

    # Leftover processes.
    job = set(job_pids)
    stale = []
    ours = []
    for p in obs.processes:
        alive = pid_alive(p.pid) if pid_alive else None
        entry = {"npu": p.npu, "chip": p.chip, "pid": p.pid, "name": p.name, "memory_mb": p.memory_mb,
                 "alive_here": alive}
        (ours if p.pid in job else stale).append(entry)
    if stale:
        text = "; ".join(
            f"pid {s['pid']}{' (' + s['name'] + ')' if s['name'] else ''} on NPU {s['npu']} chip {s['chip']}"
            f" holds {s['memory_mb']} MB" + (" (not visible here: another container?)" if s["alive_here"] is False else "")
            for s in stale)
        out.append(CheckResult(GROUP, "processes", FAIL, f"leftover process(es): {text}",
                               "a new job on these cards fails with `EJ0001 ... Maybe the last training process "
                               "is running`: stop it (`kill <pid>`, or its container) and re-run doctor",
                               details={"stale": stale, "job": ours}))
    elif ours:
        out.append(CheckResult(GROUP, "processes", PASS,
                               f"only the job's own processes hold devices ({len(ours)})", details={"job": ours}))
    elif not obs.processes_known:
        out.append(CheckResult(GROUP, "processes", SKIPPED, "npu-smi prints no process table "
                               "here: which processes hold the devices is unknown"))
    else:
        out.append(CheckResult(GROUP, "processes", PASS, "no process holds a device"))
    return out
