"""The doctor's line about the NPUs' network ports: is hccn_tool there, and are the links up.

A node without hccn_tool (no RoCE ports, a container without the driver's tools) is not an
error: the links probe then watches nothing, and this one line is all that says so.
"""

from __future__ import annotations

from typing import List

from watchdog.config.schema import Config
from watchdog.doctor.model import FAIL, PASS, SKIPPED, WARN, CheckResult
from watchdog.host.subproc import run_command
from watchdog.parse.hccn import HccnParseError, parse_link
from watchdog.probes.links import DRIVER_TOOLS, node_devices, resolve_tool


def links_check(config: Config) -> CheckResult:
    """hccn_tool found or not; when found, `-link -g` of each NPU (read-only)."""
    cfg = config.probes.links
    if not cfg.enabled:
        return CheckResult("daemon", "hccn_tool", SKIPPED, "probes.links is disabled: NPU network ports not watched")
    tool = resolve_tool(cfg.hccn_tool)
    if tool is None:
        return CheckResult("daemon", "hccn_tool", SKIPPED,
                           f"{cfg.hccn_tool} not found (PATH, {DRIVER_TOOLS}): NPU network ports not watched",
                           details={"hccn_tool": None})
    devices = list(cfg.devices) if cfg.devices is not None else node_devices()
    down: List[int] = []
    failed: List[str] = []
    for dev in devices:
        out = run_command([tool, "-i", str(dev), "-link", "-g"], timeout=float(cfg.command_timeout))
        try:
            if not out.ok:
                raise HccnParseError("timed out" if out.timed_out else f"exit code {out.returncode}")
            if not parse_link(out.stdout):
                down.append(dev)
        except HccnParseError as exc:
            failed.append(f"{dev}: {exc}")
    details = {"hccn_tool": tool, "devices": devices, "down": down, "failed": failed}
    if down:
        return CheckResult("daemon", "hccn_tool", FAIL, f"link down on NPU {', '.join(map(str, down))}",
                           "check the cable, optical module and switch port (`hccn_tool -i <npu> -optical -g`, "
                           "`-lldp -g`) before starting a job", details=details)
    if failed:
        return CheckResult("daemon", "hccn_tool", WARN, f"hccn_tool failed on {len(failed)} NPU(s): {failed[0]}",
                           "run `hccn_tool -i <npu> -link -g` by hand", details=details)
    return CheckResult("daemon", "hccn_tool", PASS, f"{tool}: {len(devices)} NPU link(s) up", details=details)
