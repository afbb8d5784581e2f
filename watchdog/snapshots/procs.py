"""Collectors about the job's processes: tree, Python and kernel stacks, environment, plog files.

The job's processes are the ones the process probe last reported (plus pids given on the command
line) and all their descendants. Everything is read from /proc or psutil, or with `py-spy dump`
through run_command (timeout, process-group kill).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sys
from typing import Dict, Iterable, List, Optional, Tuple

import psutil

from watchdog.observations import ProcessObservation
from watchdog.runtime import Runtime
from watchdog.snapshots.bundle import NOT_FOUND, PERMISSION_DENIED, TOOL_ABSENT, Item, Problem, oserror_reason, outcome_problem
from watchdog.snapshots.context import CaptureContext, ProcRecord
from watchdog.host.rankfiles import rank_file
from watchdog.snapshots.files import tail_file
from watchdog.privacy.argv import redact_argv
from watchdog.privacy.redact import MIN_PIECE_LEN, REDACTED, is_secret_variable
from watchdog.host.subproc import run_command

_VERSION_ASSIGN = re.compile(r"""^\s*__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


def job_roots(runtime: Optional[Runtime], extra_pids: Iterable[int] = ()) -> Dict[int, Optional[int]]:
    """pid -> rank of the job's processes: the latest `process` observation plus explicit pids."""
    roots: Dict[int, Optional[int]] = {}
    sample = runtime.state.latest("process") if runtime is not None else None
    if sample is not None and isinstance(sample.value, ProcessObservation):
        for p in sample.value.processes:
            roots[p.pid] = p.rank
    for pid in extra_pids:
        roots.setdefault(int(pid), None)
    return roots


def _record(proc: psutil.Process, root: bool, rank: Optional[int]) -> ProcRecord:
    rec = ProcRecord(pid=proc.pid, ppid=None, root=root, rank=rank)
    try:
        with proc.oneshot():
            rec.ppid = proc.ppid()
            rec.name = proc.name()
            rec.state = proc.status()
            rec.create_time = proc.create_time()
            t = proc.cpu_times()
            rec.cpu_user_seconds, rec.cpu_system_seconds = t.user, t.system
            rec.rss_bytes = proc.memory_info().rss
            rec.threads = proc.num_threads()
            rec.uid = proc.uids().real
            try:
                rec.username = proc.username()
            except (KeyError, psutil.Error):
                rec.username = None
            try:
                rec.cmdline = proc.cmdline()
            except psutil.AccessDenied:
                rec.error = "command line: permission denied"
            try:
                rec.open_files = proc.num_fds()
            except psutil.AccessDenied:
                rec.error = "open files: permission denied"
    except psutil.NoSuchProcess:
        rec.error = "process exited while being recorded"
    except psutil.AccessDenied:
        rec.error = "permission denied"
    return rec


def collect_tree(ctx: CaptureContext, item: Item) -> None:
    """processes/tree.json and a readable processes/tree.txt; fills ctx.tree for the other collectors."""
    seen = set()
    records: List[ProcRecord] = []
    if not ctx.roots:
        item.note = "no job processes known (process probe not reporting, no --pid given)"
    for pid, rank in sorted(ctx.roots.items()):
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            item.fail(NOT_FOUND, f"process {pid} no longer exists", what=str(pid))
            continue
        except psutil.AccessDenied:
            item.fail(PERMISSION_DENIED, f"process {pid}: permission denied", what=str(pid))
            continue
        if pid not in seen:
            seen.add(pid)
            records.append(_record(proc, True, rank))
        try:
            children = proc.children(recursive=True)
        except psutil.Error as exc:
            item.fail(oserror_reason(exc) if isinstance(exc, OSError) else "error",
                      f"children of {pid}: {exc}", what=str(pid))
            children = []
        for child in children:
            if child.pid not in seen:
                seen.add(child.pid)
                records.append(_record(child, False, None))
    for r in records:
        if r.error:
            item.fail(PERMISSION_DENIED if "permission" in r.error else NOT_FOUND, f"process {r.pid}: {r.error}",
                      what=str(r.pid))
    for r in records:
        # `--token VALUE` on a job's command line: hidden here, and the value wherever else it shows.
        cmd, found = redact_argv(r.cmdline or ())
        r.cmdline = list(cmd)
        for value in found:
            ctx.bundle.add_secret(value)
    ctx.tree = records
    ctx.bundle.add("processes/tree.json", json.dumps([r.__dict__ for r in records], indent=2, default=str))
    lines = [f"{'PID':>8} {'PPID':>8} {'RANK':>4} {'STATE':<10} {'CPU_S':>10} {'RSS_MB':>9} {'THR':>4} {'FDS':>5}  COMMAND"]
    for r in records:
        cpu = (r.cpu_user_seconds or 0.0) + (r.cpu_system_seconds or 0.0)
        rss = (r.rss_bytes or 0) / 2**20
        command = " ".join(r.cmdline) or f"[{r.name}]"
        lines.append(f"{r.pid:>8} {r.ppid if r.ppid is not None else '-':>8} {r.rank if r.rank is not None else '-':>4} "
                     f"{r.state:<10} {cpu:>10.1f} {rss:>9.1f} {r.threads or 0:>4} "
                     f"{r.open_files if r.open_files is not None else '-':>5}  {command}")
    ctx.bundle.add("processes/tree.txt", "\n".join(lines) + "\n")
    item.files += ["processes/tree.json", "processes/tree.txt"]


# -- Python stacks ---------------------------------------------------------------------------------

def resolve_py_spy(program: str) -> Optional[str]:
    """Absolute path of py-spy: as configured, on PATH, or next to this interpreter (a venv's bin/)."""
    if os.sep in program:
        return program if os.access(program, os.X_OK) else None
    found = shutil.which(program)
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), program)
    return beside if os.access(beside, os.X_OK) else None


def stack_targets(ctx: CaptureContext) -> List[ProcRecord]:
    """Processes whose Python stacks we take: the roots first, then Python descendants, capped."""
    roots = [r for r in ctx.tree if r.root and not r.error]
    others = [r for r in ctx.tree if not r.root and r.looks_python and not r.error]
    return (roots + others)[: ctx.scfg.max_stack_processes]


def py_spy_task(ctx: CaptureContext, rec: ProcRecord, item: Item) -> None:
    scfg = ctx.scfg
    prog = resolve_py_spy(scfg.py_spy)
    if prog is None:
        item.fail(TOOL_ABSENT, f"py-spy ({scfg.py_spy}) is not installed: pip install 'npu-watchdog[stacks]'",
                  what=str(rec.pid))
        return
    base = [prog, "dump", "--pid", str(rec.pid)]
    attempts = [base + ["--native"], base] if scfg.py_spy_native else [base]
    notes: List[str] = []
    for argv in attempts:
        timeout = ctx.timeout(scfg.stack_timeout)
        out = run_command(argv, timeout=timeout)
        problem = outcome_problem(out, timeout)
        if problem is None:
            name = f"stacks/py-spy-{rec.pid}.txt"
            header = f"# {' '.join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))}\n"
            ctx.bundle.add(name, header + out.stdout)
            item.files.append(name)
            if notes:
                item.note = "; ".join(notes)
            return
        if problem.reason in ("timeout", TOOL_ABSENT, PERMISSION_DENIED) or argv is attempts[-1]:
            item.problems.append(Problem(problem.reason, problem.message, str(rec.pid)))
            return
        notes.append(f"native frames unavailable ({problem.message.splitlines()[0][:200]}); retried without --native")


def collect_kernel_stacks(ctx: CaptureContext, item: Item) -> None:
    """State, wchan and /proc/<pid>/task/<tid>/stack of every process (where readable: root only)."""
    for rec in ctx.tree:
        lines = []
        base = f"/proc/{rec.pid}"
        try:
            with open(f"{base}/status", "r", errors="replace") as fh:
                for line in fh:
                    if line.startswith(("State:", "Name:", "Threads:")):
                        lines.append(line.rstrip("\n"))
        except OSError as exc:
            item.fail(oserror_reason(exc), f"{base}/status: {exc.strerror or exc}", what=str(rec.pid))
            continue
        try:
            tids = sorted(int(t) for t in os.listdir(f"{base}/task"))
        except OSError:
            tids = [rec.pid]
        denied = None
        for tid in tids:
            tbase = f"{base}/task/{tid}"
            try:
                with open(f"{tbase}/wchan", "r", errors="replace") as fh:
                    wchan = fh.read().strip() or "0"
            except OSError:
                wchan = "?"
            try:
                with open(f"{tbase}/stat", "r", errors="replace") as fh:
                    tstate = fh.read().rsplit(")", 1)[-1].split()[0]
            except (OSError, IndexError):
                tstate = "?"
            lines.append(f"--- thread {tid} state {tstate} wchan {wchan}")
            try:
                with open(f"{tbase}/stack", "r", errors="replace") as fh:
                    lines.append(fh.read().rstrip("\n"))
            except OSError as exc:
                denied = exc
                lines.append(f"(stack unreadable: {exc.strerror or exc})")
        if denied is not None:
            item.fail(oserror_reason(denied), f"{base}/task/*/stack: {denied.strerror or denied}", what=str(rec.pid))
        name = f"stacks/kernel-{rec.pid}.txt"
        ctx.bundle.add(name, "\n".join(lines) + "\n")
        item.files.append(name)


# -- environment -------------------------------------------------------------------------------------

def read_environ(pid: int) -> Dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        raw = fh.read()
    env: Dict[str, str] = {}
    for entry in raw.split(b"\0"):
        if b"=" in entry:
            k, _, v = entry.partition(b"=")
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def collect_environment(ctx: CaptureContext, item: Item) -> None:
    """The job's relevant environment (ASCEND_*, HCCL_*, RANK...) per process; secrets redacted."""
    scfg = ctx.scfg
    names = set(scfg.env_names)
    prefixes = tuple(scfg.env_prefixes)
    for rec in ctx.tree[: max(scfg.max_stack_processes, 1)]:
        try:
            env = read_environ(rec.pid)
        except OSError as exc:
            item.fail(oserror_reason(exc), f"/proc/{rec.pid}/environ: {exc.strerror or exc}", what=str(rec.pid))
            continue
        lines = []
        for k in sorted(env):
            secret = is_secret_variable(k)
            if secret and len(env[k]) >= MIN_PIECE_LEN:
                # Its value may show up elsewhere (a log line, a command line): redact it everywhere.
                # (Short values like "1" or "false" would only mangle the archive.)
                ctx.bundle.add_secret(env[k])
            if k in names or k.startswith(prefixes):
                lines.append(f"{k}={REDACTED if secret else env[k]}")
        name = f"env/{rec.pid}.txt"
        ctx.bundle.add(name, "\n".join(lines) + "\n")
        item.files.append(name)


# -- CANN plog files ----------------------------------------------------------------------------------

def _owner_home(rec: ProcRecord, env: Dict[str, str]) -> Optional[str]:
    if rec.uid is not None:
        try:
            return pwd.getpwuid(rec.uid).pw_dir
        except KeyError:
            pass
    return env.get("HOME")


def plog_dirs(ctx: CaptureContext, rec: ProcRecord) -> List[str]:
    """Where this process's plog files live: configured root, its $ASCEND_PROCESS_LOG_PATH, or ~/ascend/log."""
    try:
        env = read_environ(rec.pid)
    except OSError:
        env = {}
    home = _owner_home(rec, env)
    root = ctx.scfg.plog_root
    if root:
        if root.startswith("~") and home:
            root = home + root[1:]
    elif env.get("ASCEND_PROCESS_LOG_PATH"):
        root = env["ASCEND_PROCESS_LOG_PATH"]
    elif home:
        root = os.path.join(home, "ascend", "log")
    else:
        return []
    return [os.path.join(root, "debug", "plog"), os.path.join(root, "run", "plog"), os.path.join(root, "plog")]


def collect_plogs(ctx: CaptureContext, item: Item) -> None:
    """Tails of the newest plog-<pid>_*.log files of every process of the job."""
    scfg = ctx.scfg
    listings: Dict[str, List[Tuple[float, str]]] = {}
    found_any = False
    for rec in ctx.tree:
        candidates: List[Tuple[float, str]] = []
        for d in plog_dirs(ctx, rec):
            if d not in listings:
                entries: List[Tuple[float, str]] = []
                try:
                    for de in os.scandir(d):
                        if de.name.startswith("plog-") and de.name.endswith(".log"):
                            try:
                                entries.append((de.stat().st_mtime, de.path))
                            except OSError:
                                pass
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    item.fail(oserror_reason(exc), f"{d}: {exc.strerror or exc}", what=d)
                listings[d] = entries
            prefix = f"plog-{rec.pid}_"
            candidates += [e for e in listings[d] if os.path.basename(e[1]).startswith(prefix)]
        candidates.sort(reverse=True)
        for _mtime, path in candidates[: scfg.plog_files]:
            found_any = True
            try:
                data, _size, _cut = tail_file(path, scfg.log_tail_size, scfg.log_tail_lines,
                                              rec.uid)
            except OSError as exc:
                item.fail(oserror_reason(exc), f"{path}: {exc.strerror or exc}", what=path)
                continue
            name = f"plog/{rec.pid}/{os.path.basename(path)}"
            ctx.bundle.add(name, data)
            item.files.append(name)
    if not found_any and not item.problems:
        item.note = "no plog files of the job's processes found"


# -- versions visible from the job's interpreter -----------------------------------------------------

def _package_versions(site: str) -> Dict[str, str]:
    out = {}
    for pkg in ("torch", "torch_npu"):
        try:
            # A path from a rank's memory map: no link followed, regular files only (installed
            # packages belong to root, so no owner check).
            with rank_file(os.path.join(site, pkg, "version.py")) as fh:
                m = _VERSION_ASSIGN.search(fh.read(65536).decode("utf-8", "replace"))
        except OSError:
            continue
        if m:
            out[pkg] = m.group(1)
    return out


def torch_versions(ctx: CaptureContext, item: Item) -> None:
    """torch / torch_npu versions of the job, read from the files its processes have mapped (no import)."""
    sites: Dict[str, List[int]] = {}
    for rec in [r for r in ctx.tree if r.looks_python][: ctx.scfg.max_stack_processes]:
        try:
            with open(f"/proc/{rec.pid}/maps", "r", errors="replace") as fh:
                maps = fh.read()
        except OSError:
            continue
        for m in re.finditer(r"(/\S+/(?:site|dist)-packages)/torch(?:_npu)?/", maps):
            sites.setdefault(m.group(1), [])
            if rec.pid not in sites[m.group(1)]:
                sites[m.group(1)].append(rec.pid)
    found = {}
    for site, pids in sites.items():
        versions = _package_versions(site)
        if versions:
            found[site] = {**versions, "pids": pids}
    if found:
        ctx.set_version("python_packages", found)
