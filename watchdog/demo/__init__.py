"""A simulated Ascend training node for `npu-watchdog demo` and the end-to-end tests.

Only the NPU is simulated (the fake npu-smi replaying a scenario file); the rank processes, their
heartbeat files, training logs and plog files, the webhook receiver and the daemon are all real.
"""
