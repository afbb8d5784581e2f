"""Trainer-side helpers for npu-watchdog: a heartbeat file and a flight recorder per rank.

    from npu_watchdog_heartbeat import Heartbeat
    hb = Heartbeat()              # path from NPU_WATCHDOG_HEARTBEAT, one file per rank
    hb.beat(step=step, loss=loss, tokens_per_s=tps)

Standard library only; it never imports the daemon. Framework integrations live in submodules
that import their framework lazily: `hf`, `lightning`, `deepspeed`, `mindspore`, `megatron`.
"""

from npu_watchdog_heartbeat.pace import Pace
from npu_watchdog_heartbeat.paths import ENV_VAR, env_rank, resolve, ring_path
from npu_watchdog_heartbeat.ring import FlightRecorder
from npu_watchdog_heartbeat.writer import PHASES, Heartbeat

__version__ = "0.2.0"
__all__ = ["ENV_VAR", "PHASES", "FlightRecorder", "Heartbeat", "Pace", "env_rank", "resolve", "ring_path"]
