"""Stand-in for `megatron.training` (see ../../README.md): just `get_args`."""

from types import SimpleNamespace

_ARGS = SimpleNamespace(global_batch_size=8, log_interval=1)


def get_args():
    return _ARGS
