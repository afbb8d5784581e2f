"""Collectors of node-level evidence: watched logs, heartbeat files, npu-smi, versions, findings, dmesg.

Each collector fills one manifest Item and writes into the bundle; failures are recorded on the
item (permission denied, timeout, tool absent...) rather than raised, so one missing piece never
costs the rest of the snapshot.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional, Set

from watchdog.parse import flight_recorder as fr
from watchdog.observations import NpuObservation
from watchdog.snapshots.bundle import NOT_FOUND, Item, oserror_reason, outcome_problem
from watchdog.snapshots.context import CaptureContext
from watchdog.snapshots.files import expand, member_name, tail_file
from watchdog.host.subproc import run_command

_NPU_SMI_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")


def tail_paths(ctx: CaptureContext, item: Item, patterns: List[str], prefix: str) -> None:
    """Tails of every file matching `patterns` into `<prefix>/<absolute path>`. A file that is not
    a regular file of its rank's user (a FIFO, a link, another user's) is listed as skipped with
    the reason and never read; the files after it are still taken."""
    scfg = ctx.scfg
    owners = rank_owners(ctx)
    for pattern in patterns:
        paths = expand(pattern)
        if not paths:
            item.fail(NOT_FOUND, f"no file matches {pattern}", what=pattern)
            continue
        for path in paths:
            if os.path.isdir(path) and not os.path.islink(path):
                continue
            try:
                data, size, cut = tail_file(path, scfg.log_tail_size, scfg.log_tail_lines, owners.get(path))
            except OSError as exc:
                item.fail(oserror_reason(exc), f"{path}: {exc.strerror or exc}", what=path)
                continue
            name = member_name(prefix, path)
            ctx.bundle.add(name, data)
            item.files.append(name)


def _discovered(ctx: CaptureContext) -> Any:
    """The daemon's latest discovery result, when discovery feeds the probes."""
    feed = ctx.runtime.discovery if ctx.runtime is not None else None
    return feed.latest() if feed is not None else None


def rank_owners(ctx: CaptureContext) -> Dict[str, int]:
    """path -> the user of the discovered rank that names it (its logs, heartbeat, ring): those
    files are copied only when they belong to that user."""
    found = _discovered(ctx)
    out: Dict[str, int] = {}
    for job in found.jobs if found is not None else ():
        for r in job.ranks:
            if r.uid is None:
                continue
            for p in r.logs + ((r.heartbeat, fr.ring_path(r.heartbeat)) if r.heartbeat else ()):
                out.setdefault(p, r.uid)
    return out


def log_tasks(ctx: CaptureContext) -> List[tuple]:
    """(item name, fn) per configured log source, or the discovered rank logs."""
    out = []
    sources = [(s.name, list(s.paths)) for s in ctx.config.probes.logs.sources]
    found = _discovered(ctx) if ctx.config.fed_by_discovery("logs") else None
    if found is not None:
        sources = [(f"{j.name}", sorted({p for r in j.ranks for p in r.logs})) for j in found.jobs]
    for name, paths in sources:
        def fn(item: Item, paths: List[str] = paths, name: str = name) -> None:
            tail_paths(ctx, item, paths, f"logs/{_safe(name)}")
        out.append((f"logs:{name}", fn))
    return out


def collect_heartbeats(ctx: CaptureContext, item: Item) -> None:
    paths = list(ctx.config.probes.heartbeat.paths)
    found = _discovered(ctx) if ctx.config.fed_by_discovery("heartbeat") else None
    if found is not None:
        paths = [p for j in found.jobs for p in j.heartbeats]
    if not paths:
        item.note = "no heartbeat paths configured"
        return
    tail_paths(ctx, item, paths, "heartbeat")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "_"


# -- npu-smi ---------------------------------------------------------------------------------------

def _latest_npu(ctx: CaptureContext) -> Optional[NpuObservation]:
    sample = ctx.runtime.state.latest("npu") if ctx.runtime is not None else None
    return sample.value if sample is not None and isinstance(sample.value, NpuObservation) else None


def collect_npu_smi(ctx: CaptureContext, item: Item) -> None:
    """`npu-smi info` in full, then `-t health -i N` for every card the last observation saw not OK."""
    npu_cfg = ctx.config.probes.npu
    prog = npu_cfg.npu_smi
    timeout = ctx.timeout(npu_cfg.command_timeout)
    out = run_command([prog, "info"], timeout=timeout)
    problem = outcome_problem(out, timeout)
    if out.stdout or out.stderr:
        text = out.stdout + (("\n# stderr:\n" + out.stderr) if out.stderr.strip() else "")
        ctx.bundle.add("npu-smi/info.txt", text)
        item.files.append("npu-smi/info.txt")
        m = _NPU_SMI_VERSION.search(out.stdout)
        if m:
            ctx.set_version("npu_smi", m.group(2))
    if problem is not None:
        item.problems.append(problem)
        if problem.reason == "tool_absent":
            return
    obs = _latest_npu(ctx)
    if obs is None:
        return
    health = [
        {"npu": c.npu, "chip": c.chip, "health": c.health,
         "codes": obs.health_codes.get((c.npu, c.chip), [])}
        for c in obs.chips
    ]
    ctx.bundle.add("npu-smi/last-observation-health.json", json.dumps(health, indent=2))
    item.files.append("npu-smi/last-observation-health.json")
    if obs.version:
        ctx.versions.setdefault("npu_smi", obs.version)
    bad: Set[int] = {c.npu for c in obs.chips if c.health.strip().upper() != "OK"}
    for npu in sorted(bad):
        t = ctx.timeout(npu_cfg.command_timeout)
        res = run_command([prog, "info", "-t", "health", "-i", str(npu)], timeout=t)
        p = outcome_problem(res, t)
        if res.stdout or res.stderr:
            name = f"npu-smi/health-{npu}.txt"
            ctx.bundle.add(name, res.stdout + res.stderr)
            item.files.append(name)
        if p is not None:
            p.what = f"npu {npu}"
            item.problems.append(p)


# -- versions -----------------------------------------------------------------------------------------

def _key_values(text: str) -> Dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip():
            out[k.strip()] = v.strip()
    return out


def collect_version_files(ctx: CaptureContext, item: Item) -> None:
    """Driver version.info and the CANN toolkit version files (copied, and key=value into versions)."""
    scfg = ctx.scfg
    files: Dict[str, Any] = {}
    for pattern in [scfg.driver_version_file] + list(scfg.cann_version_files):
        for path in expand(pattern):
            try:
                with open(path, "rb") as fh:
                    data = fh.read(65536)
            except FileNotFoundError:
                continue  # many candidate locations; absence of one is normal
            except OSError as exc:
                item.fail(oserror_reason(exc), f"{path}: {exc.strerror or exc}", what=path)
                continue
            name = member_name("versions", path)
            ctx.bundle.add(name, data)
            item.files.append(name)
            files[path] = _key_values(data.decode("utf-8", "replace"))
    if files:
        ctx.set_version("files", files)
    else:
        item.note = "no driver or CANN version files found"


# -- the daemon's view, dmesg ----------------------------------------------------------------------

def collect_findings(ctx: CaptureContext, item: Item) -> None:
    """The daemon's findings in force and its probes' status (what it believed at the time)."""
    rt = ctx.runtime
    engine = rt.engine if rt is not None else None
    if engine is not None:
        findings = [f.to_dict() for f in engine.current()]
        ctx.bundle.add("daemon/findings.json", json.dumps(findings, indent=2, default=str))
        item.files.append("daemon/findings.json")
    state = rt.state if rt is not None else None
    if state is not None:
        statuses = [s.__dict__ for s in state.statuses()]
        ctx.bundle.add("daemon/probes.json", json.dumps(statuses, indent=2, default=str))
        item.files.append("daemon/probes.json")
    if not item.files:
        item.note = "taken outside the daemon: no findings or probe state"


def collect_dmesg(ctx: CaptureContext, item: Item) -> None:
    lines = ctx.scfg.dmesg_lines
    if lines <= 0:
        item.note = "disabled (dmesg_lines: 0)"
        return
    timeout = ctx.timeout(5.0)
    out = run_command(["dmesg"], timeout=timeout)
    problem = outcome_problem(out, timeout)
    if problem is not None:
        item.problems.append(problem)
        return
    tail = out.stdout.splitlines()[-lines:]
    ctx.bundle.add("dmesg.txt", "\n".join(tail) + "\n")
    item.files.append("dmesg.txt")
