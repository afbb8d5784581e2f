"""`npu-watchdog npu-smi [--from FILE] [--json]`: show what the watchdog reads from npu-smi.

Live (runs the configured npu-smi with its timeout) or from a saved capture, so ops can paste a
capture from a bug report and see exactly how it is parsed. Exit codes: 0 parsed, 1 npu-smi could
not be run or reported a failure, 2 unreadable input (or a bad config / unreadable --from file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any, Dict, Optional

from watchdog.commands import add_config_arg
from watchdog.service.defaults import DEFAULT_CONFIG_PATH

DEVICE_KEYS = ("npu", "chip", "device_id", "name", "health", "power_w", "temp_c", "aicore_util_pct",
               "memory_used_mb", "memory_total_mb", "hbm_used_mb", "hbm_total_mb", "bus_id")
PROCESS_KEYS = ("npu", "chip", "pid", "name", "memory_mb")


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("npu-smi", help="run npu-smi (or read a saved capture) and print what was parsed")
    add_config_arg(p)
    p.add_argument("--from", dest="from_file", metavar="FILE",
                   help="parse this saved `npu-smi info` output instead of running npu-smi ('-' = stdin)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


def to_json(obs: Any) -> Dict[str, Any]:
    """The documented --json schema (exactly these keys)."""
    chips = [asdict(c) for c in obs.chips]
    procs = [asdict(p) for p in obs.processes]
    return {
        "version": obs.version,
        "devices": [{k: c[k] for k in DEVICE_KEYS} for c in chips],
        "processes": [{k: p[k] for k in PROCESS_KEYS} for p in procs],
    }


def _fmt(v: Optional[float], unit: str = "") -> str:
    if v is None:
        return "-"
    text = f"{v:g}" if isinstance(v, float) else str(v)
    return text + unit


def _pair(used: Optional[int], total: Optional[int]) -> str:
    if used is None and total is None:
        return "-"
    return f"{_fmt(used)}/{_fmt(total)} MB"


def render_text(obs: Any) -> str:
    rows = [("NPU", "CHIP", "DEV", "NAME", "HEALTH", "POWER", "TEMP", "AICORE", "DDR", "HBM", "BUS-ID")]
    for c in obs.chips:
        rows.append((str(c.npu), str(c.chip), _fmt(c.device_id), c.name or "-", c.health, _fmt(c.power_w, "W"),
                     _fmt(c.temp_c, "C"), _fmt(c.aicore_util_pct, "%"), _pair(c.memory_used_mb, c.memory_total_mb),
                     _pair(c.hbm_used_mb, c.hbm_total_mb), c.bus_id or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [f"npu-smi version: {obs.version or 'unknown'}; {len(obs.chips)} chip(s)"]
    out += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    out.append("")
    if obs.processes:
        out.append(f"{len(obs.processes)} process(es):")
        for p in obs.processes:
            out.append(f"  npu {p.npu} chip {p.chip}  pid {p.pid}  {p.name or '(no name)'}  {p.memory_mb} MB")
    else:
        out.append("no processes")
    return "\n".join(out)


def _load_npu_config(path: str) -> Any:
    """The npu probe config; defaults when the default config file does not exist."""
    from watchdog.config import ConfigError, load_config
    from watchdog.config.sections.npu import NpuProbeConfig

    if path == DEFAULT_CONFIG_PATH and not os.path.exists(path):
        return NpuProbeConfig()
    try:
        return load_config(path).probes.npu
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return None


def main(args: argparse.Namespace) -> int:
    from watchdog.npusmi.parse import NpuSmiParseError, NpuSmiUnavailable, parse_info

    if args.from_file:
        try:
            if args.from_file == "-":
                text = sys.stdin.read()
            else:
                with open(args.from_file, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
        except OSError as exc:
            print(f"cannot read {args.from_file}: {exc.strerror}", file=sys.stderr)
            return 2
        try:
            obs = parse_info(text)
        except NpuSmiUnavailable as exc:
            print(f"{args.from_file}: {exc} (this is npu-smi's failure text, not a device table)", file=sys.stderr)
            return 2
        except NpuSmiParseError as exc:
            print(f"{args.from_file}: {exc}", file=sys.stderr)
            return 2
    else:
        from watchdog.npusmi.run import NpuSmiRunError, query_info

        cfg = _load_npu_config(args.config)
        if cfg is None:
            return 2
        try:
            obs = query_info(cfg.npu_smi, cfg.command_timeout, stats=None)
        except NpuSmiRunError as exc:
            print(str(exc), file=sys.stderr)
            return 2 if exc.reason == "parse" else 1
    if args.json:
        print(json.dumps(to_json(obs), indent=2, ensure_ascii=False))
    else:
        print(render_text(obs))
    return 0
