"""All of the doctor's I/O: npu-smi, version files, the training interpreter, the job's
environment, the daemon's directories. Every outside call has a timeout; every failure becomes
a check result with its reason, never an exception out of `run_doctor`."""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from watchdog.config.load import redacted_dump
from watchdog.config.schema import Config
from watchdog.config.types import format_duration
from watchdog.doctor.links import links_check
from watchdog.doctor import devices as devices_mod
from watchdog.doctor import envcheck, smokecheck, versions
from watchdog.doctor.model import FAIL, PASS, SKIPPED, WARN, CheckResult, Report
from watchdog.doctor.unitcheck import UNIT_PATHS, check_private_tmp
from watchdog.npusmi import run as npusmi_run
from watchdog.npusmi.parse import NpuSmiError, parse_kv
from watchdog.observations import NpuObservation
from watchdog.host.subproc import run_command
from watchdog.config.placeholders import placeholders
from watchdog.doctor.discovery import check_discovery, check_exit_statuses
from watchdog.logrules.matcher import SLOW_ENGINE_ADVICE, effective_engine, re2_loadable
from watchdog.runbook import runbook_link

SCRIPTS = Path(__file__).resolve().parent / "scripts"
#: Health queries for at most this many unhealthy chips (each is one npu-smi call).
MAX_HEALTH_QUERIES = 32


@dataclass
class DoctorOptions:
    config: Config
    #: Where the config came from ("defaults" when no file), and its errors if it was invalid.
    config_source: str = "defaults"
    config_errors: List[str] = field(default_factory=list)
    expect: Optional[int] = None
    python: Optional[str] = None
    env_file: Optional[str] = None
    pid: Optional[int] = None
    smoke: bool = False
    send_test: bool = False
    #: The shell environment (used when neither --env-file nor --pid is given).
    environ: Dict[str, str] = field(default_factory=lambda: dict(os.environ))
    proc_root: str = "/proc"


# --- npu-smi ---------------------------------------------------------------------------------

@dataclass
class NpuSmiResult:
    obs: Optional[NpuObservation] = None
    error: Optional[str] = None
    duration: float = 0.0
    timed_out: bool = False


def query_npu_smi(config: Config) -> NpuSmiResult:
    """`npu-smi info` through the shared runner (same timeout, kill and failure texts as the probe)."""
    npu = config.probes.npu
    start = time.monotonic()
    try:
        obs = npusmi_run.query_info(npu.npu_smi, npu.command_timeout, stats=None)
    except NpuSmiError as exc:
        return NpuSmiResult(error=str(exc), duration=time.monotonic() - start,
                            timed_out=getattr(exc, "reason", "") == "timeout")
    return NpuSmiResult(obs=obs, duration=obs.duration_seconds)


def query_health_codes(config: Config, obs: NpuObservation) -> Tuple[Dict[Tuple[int, int], List[str]], List[str]]:
    """`-t health` of every chip whose table health is not OK: its hex codes."""
    npu = config.probes.npu
    codes: Dict[Tuple[int, int], List[str]] = {}
    errors: List[str] = []
    bad = [c for c in obs.chips if (c.health or "").upper() != "OK"][:MAX_HEALTH_QUERIES]
    for chip in bad:
        try:
            info = npusmi_run.query_health(npu.npu_smi, chip.npu, chip.chip, npu.command_timeout, stats=None)
        except NpuSmiError as exc:
            errors.append(f"NPU {chip.npu} chip {chip.chip}: {exc}")
            continue
        codes[(chip.npu, chip.chip)] = list(info.codes)
    return codes, errors


def firmware_from_board(text: str) -> Optional[str]:
    """`Firmware Version` of `npu-smi info -t board -i N` output (raises NpuSmiError if unreadable)."""
    for key, value in parse_kv(text):
        if key.lower() == "firmware version" and value and value.upper() != "NA":
            return value
    return None


def query_firmware(config: Config, npu: int) -> Tuple[Optional[str], Optional[str]]:
    """Firmware version as npu-smi reports it; (None, reason) when it does not."""
    try:
        version = firmware_from_board(npusmi_run.call(config.probes.npu.npu_smi,
                                                      ["info", "-t", "board", "-i", str(npu)],
                                                      config.probes.npu.command_timeout))
    except NpuSmiError as exc:
        return None, str(exc)
    return (version, None) if version else (None, "npu-smi board info has no Firmware Version")


# --- files and the training interpreter --------------------------------------------------------

def _read_text(path: str, limit: int = 256 * 1024) -> Tuple[Optional[str], Optional[str]]:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return f.read(limit), None
    except FileNotFoundError:
        return None, f"{path} not found"
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror}"


def read_versions_from_files(config: Config, facts: versions.VersionFacts) -> None:
    d = config.doctor
    text, err = _read_text(d.driver_version_file)
    if text is not None:
        facts.driver = versions.parse_version_info(text)
        facts.sources["driver"] = d.driver_version_file
        if not facts.driver:
            facts.errors["driver"] = f"no Version= line in {d.driver_version_file}"
    else:
        facts.errors["driver"] = err or "unknown"
    text, err = _read_text(d.firmware_version_file)
    if text is not None:
        facts.firmware = versions.parse_version_info(text)
        facts.sources["firmware"] = d.firmware_version_file
    else:
        facts.errors["firmware"] = f"not reported ({err})"
    cann_errors = []
    for pattern in d.cann_version_files:
        paths = sorted(glob.glob(pattern)) if any(ch in pattern for ch in "*?[") else [pattern]
        if not paths:
            cann_errors.append(f"{pattern} not found")
        for path in paths:
            text, err = _read_text(path)
            if text is None:
                cann_errors.append(err or path)
                continue
            version = versions.parse_cann_version(text)
            if version:
                facts.cann = version
                facts.sources["cann"] = path
                break
            cann_errors.append(f"no version in {path}")
        if facts.cann:
            break
    if not facts.cann:
        facts.errors["cann"] = "; ".join(cann_errors) or "no CANN version file configured"


def _script_argv(python: str, script: str) -> List[str]:
    # Run as a file path: the training environment does not have npu-watchdog installed.
    return [python, str(SCRIPTS / script)]


def query_interpreter(python: str, timeout: float, facts: versions.VersionFacts) -> None:
    facts.interpreter = python
    out = run_command(_script_argv(python, "pyinfo.py"), timeout=timeout)
    if out.start_error:
        facts.errors["python"] = out.start_error
        return
    if out.timed_out:
        facts.errors["python"] = f"no answer within {format_duration(timeout)}"
        return
    data = None
    for line in reversed(out.stdout.strip().splitlines()):
        try:
            data = json.loads(line)
            break
        except ValueError:
            continue
    if out.returncode != 0 or not isinstance(data, dict):
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [""]
        facts.errors["python"] = f"exit {out.returncode}: {tail[0][:200]}"
        return
    facts.python = data.get("python")
    facts.sources["python"] = python
    pkgs = data.get("packages") or {}
    facts.torch = pkgs.get("torch")
    facts.torch_npu = pkgs.get("torch_npu")
    for name, error in (data.get("errors") or {}).items():
        facts.errors[name] = error


def run_smoke(python: str, timeout: float) -> Dict[str, Any]:
    out = run_command(_script_argv(python, "smoke.py"), timeout=timeout)
    if out.start_error:
        return {"importable": False, "reason": f"cannot run {python}: {out.start_error}"}
    if out.timed_out:
        return {"importable": True, "error": f"smoke run did not finish within {format_duration(timeout)}; killed"}
    try:
        return smokecheck.parse_smoke_output(out.stdout)
    except ValueError as exc:
        tail = (out.stderr or "").strip().splitlines()[-1:] or [""]
        return {"importable": True, "error": f"{exc} (exit {out.returncode}: {tail[0][:200]})"}


# --- the job's environment and processes ---------------------------------------------------

def job_environment(opts: DoctorOptions) -> Tuple[Optional[Dict[str, str]], str, Optional[str]]:
    """(environment, source description, error)."""
    try:
        if opts.env_file:
            return envcheck.read_env_file(opts.env_file), f"env file {opts.env_file}", None
        if opts.pid is not None:
            return envcheck.read_pid_environ(opts.pid, opts.proc_root), f"process {opts.pid}", None
    except envcheck.EnvSourceError as exc:
        return None, "", str(exc)
    return dict(opts.environ), "the current shell (use --env-file or --pid for the job's own)", None


def job_pids(pid: Optional[int]) -> Set[int]:
    """The given job process, its descendants, and its launcher's other children (the other
    ranks): holding a device is expected for these."""
    if pid is None:
        return set()
    import psutil

    out = {pid}
    try:
        proc = psutil.Process(pid)
        out.update(c.pid for c in proc.children(recursive=True))
        parent = proc.parent()
        if parent is not None and parent.pid > 1:
            out.update(c.pid for c in parent.children(recursive=True))
    except psutil.Error:
        pass
    return out


def pid_alive(pid: int) -> Optional[bool]:
    import psutil

    try:
        return psutil.pid_exists(pid)
    except Exception:  # noqa: BLE001 - "cannot tell" is a fine answer here
        return None


# --- the daemon's own view -----------------------------------------------------------------

def _writable_dir(path: str) -> Tuple[str, str]:
    """(status, reason): a directory the daemon can write to, or one it could create."""
    p = Path(path)
    if p.is_dir():
        try:
            fd, name = tempfile.mkstemp(prefix=".doctor-", dir=str(p))
            os.close(fd)
            os.unlink(name)
            return PASS, f"{path} is writable"
        except OSError as exc:
            return FAIL, f"{path} is not writable: {exc.strerror}"
    if p.exists():
        return FAIL, f"{path} exists but is not a directory"
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if os.access(str(parent), os.W_OK | os.X_OK):
        return PASS, f"{path} does not exist yet; it can be created under {parent}"
    return FAIL, f"{path} does not exist and {parent} is not writable"


def read_unit(paths: Sequence[str] = UNIT_PATHS) -> Optional[Tuple[str, str]]:
    """(path, text) of the installed unit, with its drop-ins appended (they override it)."""
    for path in paths:
        text, _err = _read_text(path)
        if text is None:
            continue
        dropins = sorted(Path(path + ".d").glob("*.conf")) if Path(path + ".d").is_dir() else []
        for d in dropins:
            more, _ = _read_text(str(d))
            text += "\n" + (more or "")
        return path, text
    return None


def detect_channels(config: Config) -> List[str]:
    """Alert channels, found generically in the alerting section (any non-empty `channels`)."""
    data = redacted_dump(config).get("alerting") or {}
    chans = data.get("channels") if isinstance(data, dict) else None
    names: List[str] = []
    if isinstance(chans, dict):
        names = [str(k) for k, v in chans.items() if v]
    elif isinstance(chans, list):
        for i, c in enumerate(chans):
            if isinstance(c, dict):
                names.append(str(c.get("name") or c.get("type") or f"#{i}"))
            else:
                names.append(str(c))
    return names


def runbook_check(config: Config) -> CheckResult:
    """Where the runbook links of messages point (the daemon's own page unless configured)."""
    link = runbook_link(config.alerting.runbook_base(), "stall")
    if link is None:
        return CheckResult("daemon", "runbook_links", WARN, "messages carry no runbook link (http is off and "
                           "alerting.runbook_url is unset)", "turn http on or set alerting.runbook_url")
    own = config.alerting.runbook_url is None
    if own and config.http.host in ("127.0.0.1", "::1", "localhost"):
        return CheckResult("daemon", "runbook_links", WARN, f"messages link the runbook at {link.split('#')[0]}, "
                           "which opens only on this node (http.listen is a loopback address)",
                           "listen where on-call people can reach it (http.listen, e.g. 0.0.0.0:9841, which "
                           "links by host name) or set alerting.runbook_url", details={"url": link})
    return CheckResult("daemon", "runbook_links", PASS, f"messages link the runbook at {link.split('#')[0]}"
                       + (" (served by this daemon)" if own else " (alerting.runbook_url)"), details={"url": link})


def placeholder_checks(config: Config) -> List[CheckResult]:
    """A channel URL that is still a placeholder fails (alerts would reach nobody); a placeholder
    link in messages warns. Reported by key path, never with the URL (it is a credential)."""
    out = [runbook_check(config)]
    return out + [CheckResult("daemon", "placeholder_url", FAIL if ph.channel else WARN, ph.line(),
                        "put the real webhook URL in the config (or in the ${ENV} it reads)" if ph.channel else
                        "remove it to link the daemon's own runbook, or set your real address",
                        details={"key": ph.path}) for ph in placeholders(config)]


def _log_engine_check(config: Config) -> CheckResult:
    """The daemon imports RE2 only when a log is busy: doctor imports it now, so an installed RE2
    that does not load (a missing library, another ABI) is said here, not found at 3 a.m."""
    engine = effective_engine(config.probes.logs.engine)
    if engine == "re2" and not re2_loadable():
        engine = "re"
    if engine == "re2":
        return CheckResult("daemon", "log_engine", PASS, "log rules run on the RE2 engine", details={"engine": engine})
    return CheckResult("daemon", "log_engine", WARN, "log rules run on the slow fallback engine (Python re)",
                       SLOW_ENGINE_ADVICE, details={"engine": engine})


def daemon_checks(opts: DoctorOptions, npu: NpuSmiResult) -> List[CheckResult]:
    config = opts.config
    out: List[CheckResult] = []
    if opts.config_errors:
        out.append(CheckResult("daemon", "config", FAIL,
                               f"{opts.config_source} is invalid: {opts.config_errors[0]}"
                               + (f" (+{len(opts.config_errors) - 1} more)" if len(opts.config_errors) > 1 else ""),
                               "run `npu-watchdog check-config -c FILE`; the checks below use the defaults",
                               details={"errors": opts.config_errors}))
    elif opts.config_source == "defaults":
        out.append(CheckResult("daemon", "config", SKIPPED, "no config file; using the defaults",
                               "pass -c FILE to check the daemon's own config"))
    else:
        out.append(CheckResult("daemon", "config", PASS, f"{opts.config_source} is valid"))
    timeout = config.probes.npu.command_timeout
    if npu.obs is not None:
        out.append(CheckResult("daemon", "npu_smi", PASS,
                               f"{config.probes.npu.npu_smi} answered in {npu.duration:.2f}s "
                               f"(timeout {format_duration(timeout)})", details={"seconds": round(npu.duration, 3)}))
    else:
        out.append(CheckResult("daemon", "npu_smi", FAIL, npu.error or "npu-smi failed",
                               "the daemon cannot see the devices: fix npu-smi (path in probes.npu.npu_smi, "
                               "driver mounts in containers) before relying on NPU alerts"))
    for name, path in (("state_dir", config.paths.state_dir), ("snapshot_dir", config.paths.snapshot_dir or "")):
        status, reason = _writable_dir(path)
        out.append(CheckResult("daemon", name, status, reason,
                               "" if status == PASS else "run the daemon as a user that owns this directory "
                               "(systemd StateDirectory=) or change paths." + name))
    out.append(_log_engine_check(config))
    out.append(links_check(config))
    out.append(check_private_tmp(read_unit(), config.probes.heartbeat.paths,
                                 [p for src in config.probes.logs.sources for p in src.paths]))
    channels = detect_channels(config)
    out.extend(placeholder_checks(config))
    if channels:
        out.append(CheckResult("daemon", "channels", PASS, f"{len(channels)} channel(s): {', '.join(channels)}"))
    else:
        out.append(CheckResult("daemon", "channels", WARN, "no channels configured",
                               "findings are only logged; configure alerting channels so people are told"))
    if opts.send_test:
        out.append(CheckResult("daemon", "send_test", SKIPPED, "sending a test alert is not available in this build",
                               "use `npu-watchdog alerts` once the alerting channels are installed"))
    return out


# --- everything together -------------------------------------------------------------------

def run_doctor(opts: DoctorOptions) -> Report:
    config = opts.config
    d = config.doctor
    report = Report(host=config.node.name, timestamp=time.time())
    expected = opts.expect if opts.expect is not None else d.expected_devices

    npu = query_npu_smi(config)
    report.add(daemon_checks(opts, npu))
    report.add(check_discovery(config, npu.obs))
    report.add(check_exit_statuses(config))

    facts = versions.VersionFacts()
    read_versions_from_files(config, facts)
    if npu.obs is not None:
        facts.npu_smi = npu.obs.version
        facts.sources["npu_smi"] = config.probes.npu.npu_smi
        if not facts.npu_smi:
            facts.errors["npu_smi"] = "no version in the npu-smi header"
        if not facts.firmware and npu.obs.chips:
            fw, err = query_firmware(config, npu.obs.chips[0].npu)
            if fw:
                facts.firmware = fw
                facts.sources["firmware"] = f"npu-smi info -t board -i {npu.obs.chips[0].npu}"
                facts.errors.pop("firmware", None)
            else:
                facts.errors["firmware"] = f"{facts.errors.get('firmware', 'not reported')}; npu-smi board info: {err}"
    else:
        facts.errors["npu_smi"] = npu.error or "npu-smi failed"
    python = opts.python or d.python
    if python:
        query_interpreter(python, d.python_timeout, facts)
    else:
        facts.errors["python"] = "no training interpreter given"
    report.add(versions.check_versions(facts))
    report.versions = facts.as_dict()

    device_count: Optional[int] = None
    if npu.obs is not None:
        health_codes, health_errors = query_health_codes(config, npu.obs)
        results = devices_mod.check_devices(npu.obs, expected, d.min_free_hbm_ratio, health_codes,
                                            job_pids(opts.pid), pid_alive)
        if health_errors:
            for r in results:
                if r.name == "health":
                    r.details["health_query_errors"] = health_errors
        report.add(results)
        report.cards = devices_mod.cards_summary(npu.obs)
        device_count = len(npu.obs.chips)
    else:
        report.add(CheckResult("devices", "npu_smi", FAIL, f"cannot list devices: {npu.error}",
                               "fix npu-smi first; no device check was possible"))

    env, source, err = job_environment(opts)
    report.environment_source = source or (opts.env_file or f"process {opts.pid}")
    if env is None:
        report.add(CheckResult("env", "source", FAIL, err or "cannot read the job's environment",
                               "give a readable --env-file or the pid of a running rank"))
    else:
        report.add(envcheck.check_environment(env, source, d.env_rules, d.hccl_exec_timeout_min,
                                              device_count, expected))
        report.environment = envcheck.key_environment(env)

    if opts.smoke:
        if not python:
            report.add(CheckResult("smoke", "import", SKIPPED,
                                   "torch_npu not importable: no training interpreter given",
                                   "pass --python PATH (the job's python) with --smoke"))
        else:
            data = run_smoke(python, d.smoke_timeout)
            report.add(smokecheck.evaluate_smoke(data, d.smoke_min_cosine, d.smoke_max_abs_err, expected))
    return report
