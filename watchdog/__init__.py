"""npu-watchdog: a per-node daemon that watches Ascend NPU training jobs."""

__version__ = "0.2.0"
