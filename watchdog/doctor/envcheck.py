"""The training job's environment: where it comes from and what its Ascend variables imply (pure
except the small readers at the top)."""

from __future__ import annotations

import re
import shlex
from typing import Dict, Iterable, List, Optional, Sequence

from watchdog.config.sections.doctor import EnvRule
from watchdog.config.types import format_duration
from watchdog.doctor.model import FAIL, PASS, SKIPPED, WARN, CheckResult
from watchdog.parse.hccl import CANN_CONNECT_TIMEOUT, CANN_EXEC_TIMEOUT
from watchdog.privacy.redact import is_secret_variable

GROUP = "env"

#: Variables recorded in environment.json (values only for these; never the whole environment,
#: which may hold tokens).
KEY_VARS = (
    "ASCEND_GLOBAL_LOG_LEVEL", "ASCEND_GLOBAL_EVENT_ENABLE", "ASCEND_SLOG_PRINT_TO_STDOUT",
    "ASCEND_PROCESS_LOG_PATH", "ASCEND_HOST_LOG_FILE_NUM", "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_LAUNCH_BLOCKING", "ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH",
    "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_DETERMINISTIC", "HCCL_BUFFSIZE",
    "HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "HCCL_INTRA_ROCE_ENABLE", "HCCL_INTRA_PCIE_ENABLE",
    "PYTORCH_NPU_ALLOC_CONF", "TORCH_DEVICE_BACKEND_AUTOLOAD", "TASK_QUEUE_ENABLE",
    "COMBINED_ENABLE", "INF_NAN_MODE_ENABLE", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
    "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
)

#: Documented HCCL defaults (one definition: watchdog.parse.hccl) and range (HCCL environment
#: variable reference).
HCCL_CONNECT_DEFAULT = int(CANN_CONNECT_TIMEOUT)
HCCL_CONNECT_RANGE = (120, 7200)
HCCL_EXEC_DEFAULT = int(CANN_EXEC_TIMEOUT)


class EnvSourceError(Exception):
    """The job's environment could not be read (missing file, no such pid, no permission)."""


def parse_env_file(text: str) -> Dict[str, str]:
    """`KEY=VALUE` lines as in a shell script or `env` dump: `export ` prefix, quotes and comments
    allowed; lines that are not assignments are ignored (a sourced script may hold commands)."""
    out: Dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].strip()
        name, sep, value = line.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            continue
        value = value.strip()
        try:
            parts = shlex.split(value, comments=True)
            value = parts[0] if len(parts) == 1 else " ".join(parts)
        except ValueError:
            value = value.strip("'\"")
        out[name] = value
    return out


def parse_environ(data: bytes) -> Dict[str, str]:
    """`/proc/<pid>/environ`: NUL-separated `KEY=VALUE` entries."""
    out: Dict[str, str] = {}
    for entry in data.split(b"\0"):
        if b"=" not in entry:
            continue
        k, _, v = entry.partition(b"=")
        out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


def read_env_file(path: str) -> Dict[str, str]:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return parse_env_file(f.read())
    except OSError as exc:
        raise EnvSourceError(f"cannot read env file {path}: {exc.strerror}") from None


def read_pid_environ(pid: int, proc_root: str = "/proc") -> Dict[str, str]:
    """The environment a process was started with (what the job really sees)."""
    path = f"{proc_root}/{pid}/environ"
    try:
        with open(path, "rb") as f:
            return parse_environ(f.read())
    except FileNotFoundError:
        raise EnvSourceError(f"no process {pid} ({path} does not exist)") from None
    except PermissionError:
        raise EnvSourceError(f"cannot read {path}: permission denied (run doctor as the job's user or root)") from None
    except OSError as exc:
        raise EnvSourceError(f"cannot read {path}: {exc.strerror}") from None


def key_environment(env: Dict[str, str]) -> Dict[str, str]:
    """Only the variables worth recording (see KEY_VARS), plus any other ASCEND_/HCCL_ ones."""
    out = {k: env[k] for k in KEY_VARS if k in env}
    for k, v in env.items():
        if k.startswith(("ASCEND_", "HCCL_")) and k not in out and not _looks_secret(k):
            out[k] = v
    return dict(sorted(out.items()))


def _looks_secret(name: str) -> bool:
    # The snapshots' and command lines' rule (PASSWD, AK/SK, AUTH, ... too), plus a credential.
    return is_secret_variable(name) or "CREDENTIAL" in name.upper()


def _int(value: str) -> Optional[int]:
    try:
        return int(value.strip())
    except (ValueError, AttributeError):
        return None


def check_rules(env: Dict[str, str], rules: Sequence[EnvRule]) -> List[CheckResult]:
    out = []
    for rule in rules:
        if rule.var not in env:
            continue
        value = env[rule.var]
        if re.fullmatch(rule.pattern, value.strip(), flags=re.IGNORECASE):
            out.append(CheckResult(GROUP, rule.var, rule.status,
                                   rule.reason.format(var=rule.var, value=value), rule.advice,
                                   details={"value": value}))
        else:
            out.append(CheckResult(GROUP, rule.var, PASS, f"{rule.var}={value}", details={"value": value}))
    return out


def check_hccl_timeouts(env: Dict[str, str], exec_min_seconds: float) -> List[CheckResult]:
    """What the HCCL timeouts mean for detection: HCCL itself reports a hung collective only after
    HCCL_EXEC_TIMEOUT; the watchdog's stall rule is what reports it in minutes."""
    out = []
    raw = env.get("HCCL_CONNECT_TIMEOUT")
    if raw is None:
        out.append(CheckResult(GROUP, "HCCL_CONNECT_TIMEOUT", PASS,
                               f"unset: link set-up at init may take {HCCL_CONNECT_DEFAULT}s before HCCL gives up"))
    else:
        v = _int(raw)
        lo, hi = HCCL_CONNECT_RANGE
        if v is None or not lo <= v <= hi:
            out.append(CheckResult(GROUP, "HCCL_CONNECT_TIMEOUT", WARN,
                                   f"HCCL_CONNECT_TIMEOUT={raw} is outside the documented range {lo}-{hi} s",
                                   "use seconds within the range; large clusters often need 600-1800",
                                   details={"value": raw}))
        else:
            out.append(CheckResult(GROUP, "HCCL_CONNECT_TIMEOUT", PASS,
                                   f"{v}s: an init that cannot connect fails after {format_duration(v)}",
                                   details={"value": raw}))
    raw = env.get("HCCL_EXEC_TIMEOUT")
    v = HCCL_EXEC_DEFAULT if raw is None else _int(raw)
    shown = f"unset (default {HCCL_EXEC_DEFAULT}s)" if raw is None else f"HCCL_EXEC_TIMEOUT={raw}"
    if v is None or v < 0:
        out.append(CheckResult(GROUP, "HCCL_EXEC_TIMEOUT", WARN, f"{shown} is not a number of seconds",
                               "set seconds, e.g. 1800", details={"value": raw}))
    elif v == 0:
        out.append(CheckResult(GROUP, "HCCL_EXEC_TIMEOUT", WARN,
                               f"{shown}: a hung collective never times out",
                               "HCCL will never end a hung job; only the watchdog's stall rule will report it",
                               details={"value": raw}))
    elif v < exec_min_seconds:
        out.append(CheckResult(GROUP, "HCCL_EXEC_TIMEOUT", WARN,
                               f"{shown}: collectives waiting longer than {format_duration(v)} are killed",
                               f"a checkpoint or evaluation on one rank while the others wait in a collective "
                               f"can exceed it; keep at least {format_duration(exec_min_seconds)}",
                               details={"value": raw}))
    else:
        out.append(CheckResult(GROUP, "HCCL_EXEC_TIMEOUT", PASS,
                               f"{shown}: HCCL reports a hung collective only after {format_duration(v)}; "
                               "the watchdog's stall detection is the early warning",
                               details={"value": raw, "seconds": v}))
    return out


def check_alloc_conf(env: Dict[str, str]) -> CheckResult:
    raw = env.get("PYTORCH_NPU_ALLOC_CONF")
    advice = ("PYTORCH_NPU_ALLOC_CONF=expandable_segments:True reduces fragmentation OOMs "
              "(`NPU out of memory` with much memory reserved but unallocated)")
    if raw is None:
        return CheckResult(GROUP, "PYTORCH_NPU_ALLOC_CONF", PASS, "unset (default caching allocator)", advice)
    options: Dict[str, str] = {}
    bad = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        k, sep, v = part.partition(":")
        if not sep or not k.strip() or not v.strip():
            bad.append(part)
        else:
            options[k.strip()] = v.strip()
    if bad:
        return CheckResult(GROUP, "PYTORCH_NPU_ALLOC_CONF", WARN,
                           f"PYTORCH_NPU_ALLOC_CONF={raw}: cannot read {', '.join(bad)!s}",
                           "the format is key:value[,key:value]; torch_npu rejects a malformed value at the first allocation",
                           details={"value": raw})
    if options.get("expandable_segments", "").lower() == "true":
        return CheckResult(GROUP, "PYTORCH_NPU_ALLOC_CONF", PASS, f"{raw} (expandable segments on)",
                           details={"value": raw})
    return CheckResult(GROUP, "PYTORCH_NPU_ALLOC_CONF", PASS, f"PYTORCH_NPU_ALLOC_CONF={raw}", advice,
                       details={"value": raw})


def check_visible_devices(env: Dict[str, str], device_count: Optional[int],
                          expected: Optional[int]) -> CheckResult:
    raw = env.get("ASCEND_RT_VISIBLE_DEVICES")
    name = "ASCEND_RT_VISIBLE_DEVICES"
    if raw is None:
        return CheckResult(GROUP, name, PASS, "unset: the job sees every device"
                           + (f" ({device_count})" if device_count is not None else ""))
    items = [x.strip() for x in raw.split(",") if x.strip()]
    ids = [_int(x) for x in items]
    if not items or any(i is None or i < 0 for i in ids):
        return CheckResult(GROUP, name, FAIL, f"{name}={raw!r} is not a list of device ids",
                           "write logic device ids separated by commas, e.g. 0,1,2,3", details={"value": raw})
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        return CheckResult(GROUP, name, FAIL, f"{name}={raw} repeats device(s) {dupes}",
                           "list each device once", details={"value": raw})
    if device_count is None:
        return CheckResult(GROUP, name, SKIPPED, f"{name}={raw}; device count unknown (npu-smi failed)",
                           details={"value": raw})
    missing = [i for i in ids if i >= device_count]
    if missing:
        return CheckResult(GROUP, name, FAIL,
                           f"{name}={raw} names device(s) {missing}, but only {device_count} are present (0-{device_count - 1})",
                           "the job fails to set those devices; fix the list or the missing card",
                           details={"value": raw, "present": device_count})
    if expected is not None and len(ids) != expected:
        return CheckResult(GROUP, name, WARN,
                           f"{name}={raw} exposes {len(ids)} device(s), {expected} expected",
                           "the job will use fewer (or more) devices than planned", details={"value": raw})
    return CheckResult(GROUP, name, PASS, f"{name}={raw} ({len(ids)} of {device_count} devices)",
                       details={"value": raw})


def check_environment(env: Dict[str, str], source: str, rules: Iterable[EnvRule], exec_min_seconds: float,
                      device_count: Optional[int], expected: Optional[int]) -> List[CheckResult]:
    out = [CheckResult(GROUP, "source", PASS, f"environment of the job: {source}",
                       details={"source": source})]
    out.extend(check_rules(env, list(rules)))
    out.extend(check_hccl_timeouts(env, exec_min_seconds))
    out.append(check_alloc_conf(env))
    out.append(check_visible_devices(env, device_count, expected))
    return out
