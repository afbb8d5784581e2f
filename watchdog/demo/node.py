"""The simulated node: directories, the fake npu-smi scenario, the launcher and its ranks.

The scenario file of the fake npu-smi and the ranks' control file are rewritten atomically
(temp file + rename), so readers never see half a file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import psutil

from watchdog.service.statefiles import atomic_file

REPO = Path(__file__).resolve().parents[2]
#: The fake npu-smi ships inside the package (a standalone script that imports nothing of ours), so
#: the demo runs from an installed venv too; tests reach it as tests/fakes/npu-smi.
FAKE_NPU_SMI = Path(__file__).resolve().with_name("fake_npu_smi.py")
HEARTBEAT_HELPER_DIR = REPO / "contrib" / "heartbeat"
#: The job's name, in its ranks' environment (discovery's `name_env`).
JOB_NAME = "llama-demo"
#: A tag in the ranks' environment: the demo's daemon discovers this node's job only, even when
#: other training processes run on the machine (`discovery.only_env`).
DEMO_TAG = "NPU_WATCHDOG_DEMO_RUN"

HBM_TOTAL_MB = 65536
HBM_TRAIN_MB = 52000
HBM_IDLE_MB = 3400


class DemoSetupError(RuntimeError):
    """The demo cannot run here (e.g. not a source checkout)."""


def write_atomic(path: Path, data: Any) -> None:
    """The fake tools read these files while the demo rewrites them: never a torn one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with atomic_file(str(path), tmp=str(tmp), mode=0o644) as fh:
        fh.write(json.dumps(data, indent=1).encode("utf-8"))


def _heartbeat_installed() -> bool:
    try:
        import npu_watchdog_heartbeat  # only to learn whether it is installed
    except ImportError:
        return False
    return npu_watchdog_heartbeat is not None


class SimulatedNode:
    def __init__(self, root: Path, npus: int = 8):
        if not (HEARTBEAT_HELPER_DIR / "npu_watchdog_heartbeat").is_dir() and not _heartbeat_installed():
            raise DemoSetupError("the demo needs the trainer-side heartbeat package npu_watchdog_heartbeat "
                                 "(`make install` puts it into the daemon's venv; a source checkout has it in contrib/heartbeat)")
        self.root = root
        self.npus = npus
        self.tag = uuid.uuid4().hex[:16]
        for d in ("hb", "logs", "plog", "bin"):
            (root / d).mkdir(parents=True, exist_ok=True)
        # A private PATH entry named npu-smi, as on a real node.
        link = root / "bin" / "npu-smi"
        if not link.exists():
            link.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_NPU_SMI}" "$@"\n')
            link.chmod(0o755)
        self.npu_smi = str(link)
        self.scenario_path = root / "npu-smi-scenario.json"
        self.control_path = root / "control.json"
        self.launcher: Optional[subprocess.Popen] = None
        self.devices: Dict[str, Dict[str, Any]] = {}
        self.npu_behavior = "ok"
        self.mode = "train"
        self.rank_modes: Dict[str, str] = {}
        self.step_seconds = 0.5
        self.extra_control: Dict[str, Any] = {}
        self._write_control()
        self._write_scenario()

    # -- the fake npu-smi -------------------------------------------------------------------
    def env(self) -> Dict[str, str]:
        """Environment for the daemon: the fake npu-smi reads its scenario from here."""
        return {"FAKE_NPU_SMI_SCENARIO": str(self.scenario_path),
                "PATH": f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}

    def rank_pids(self) -> Dict[int, int]:
        out: Dict[int, int] = {}
        if self.launcher is None:
            return out
        try:
            children = psutil.Process(self.launcher.pid).children()
        except psutil.NoSuchProcess:
            return out
        for child in children:
            try:
                rank = child.environ().get("RANK")
            except (psutil.Error, OSError):
                continue
            if rank is not None and child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                out[int(rank)] = child.pid
        return out

    def _rank_activity(self, rank: int) -> str:
        return self.rank_modes.get(str(rank), self.mode)

    def _write_scenario(self) -> None:
        devices: Dict[str, Dict[str, Any]] = {}
        pids = self.rank_pids()
        processes: List[Dict[str, Any]] = []
        for npu in range(self.npus):
            act = self._rank_activity(npu)
            alive = npu in pids
            busy = act in ("train", "nan") and alive
            dev: Dict[str, Any] = {
                "aicore": (88 + (npu * 7) % 9) if busy else 0,
                "hbm_used_mb": HBM_TRAIN_MB + npu * 13 if alive else HBM_IDLE_MB,
                "power_w": 310.0 if busy else 92.0,
                "temp_c": 58 if busy else 41,
            }
            dev.update(self.devices.get(str(npu), {}))
            devices[str(npu)] = dev
            if alive and not dev.get("gone"):
                processes.append({"npu": npu, "chip": 0, "pid": pids[npu], "name": "python3", "memory_mb": HBM_TRAIN_MB - 1000})
        scenario = {
            "generate": {"npus": self.npus, "name": "910B3", "version": "24.1.rc2", "hbm_total_mb": HBM_TOTAL_MB},
            "devices": devices, "processes": processes, "behavior": self.npu_behavior,
        }
        write_atomic(self.scenario_path, scenario)

    def _write_control(self) -> None:
        write_atomic(self.control_path, {"mode": self.mode, "ranks": self.rank_modes,
                                         "step_seconds": self.step_seconds, **self.extra_control})

    def refresh(self) -> None:
        """Re-derive the npu-smi view from the ranks' state (call after pids change)."""
        self._write_scenario()

    # -- control ----------------------------------------------------------------------------
    def set_mode(self, mode: str, ranks: Optional[Dict[int, str]] = None, **extra: Any) -> None:
        self.mode = mode
        self.rank_modes = {str(k): v for k, v in (ranks or {}).items()}
        self.extra_control = extra
        self._write_control()
        self._write_scenario()

    def set_device(self, npu: int, **override: Any) -> None:
        self.devices.setdefault(str(npu), {}).update(override)
        self._write_scenario()

    def clear_devices(self) -> None:
        self.devices = {}
        self._write_scenario()

    def start_job(self) -> None:
        if self.launcher is not None and self.launcher.poll() is None:
            return
        self.launcher = subprocess.Popen(
            [sys.executable, "-m", "watchdog.demo.launcher", str(self.root), str(HEARTBEAT_HELPER_DIR), str(self.npus)],
            cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=open(self.root / "logs" / "launcher.err", "ab"),
            env={**os.environ, "PYTHONPATH": str(REPO), "NPU_WATCHDOG_JOB": JOB_NAME, DEMO_TAG: self.tag},
        )
        deadline = time.monotonic() + 30
        while len(self.rank_pids()) < self.npus and time.monotonic() < deadline:
            time.sleep(0.1)
        self._write_scenario()

    def kill_rank(self, rank: int, sig: int = signal.SIGKILL) -> Optional[int]:
        pid = self.rank_pids().get(rank)
        if pid:
            os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while rank in self.rank_pids() and time.monotonic() < deadline:
                time.sleep(0.05)
        self._write_scenario()
        return pid

    def stop_job(self, timeout: float = 10.0) -> None:
        if self.launcher is None:
            return
        procs = []
        try:
            parent = psutil.Process(self.launcher.pid)
            procs = parent.children(recursive=True) + [parent]
        except psutil.NoSuchProcess:
            pass
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=timeout)
        try:
            self.launcher.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.launcher = None
        self._write_scenario()
