"""Where the composition root hands the plugins down to the layers that use them.

The layers (docs/architecture.md) let a module import only from the layers below it, yet a few
places low in the ladder need what plugins higher up declare: the config needs each probe's
section and each channel's declarations, the rule catalog the `RULES` of each detector module,
the scheduler the probe modules, the collector the metric modules. None of them looks anything
up: `watchdog.plugins_list`, the composition root at the top, imports every plugin module by
name (so the import graph and the layer contract see every edge) and fills each `Slot` below
once, when it is first imported. A slot read before that raises `NotAssembled`, which names the
root: a missing import at an entry point fails loudly instead of running with no plugins.
"""

from __future__ import annotations

from typing import Generic, Optional, TypeVar

T = TypeVar("T")

#: The module that fills every slot (named in the error a read before assembly raises).
ROOT = "watchdog.plugins_list"


class NotAssembled(RuntimeError):
    """A slot was read before the composition root filled it (an entry point that does not
    import `watchdog.plugins_list`)."""


class Slot(Generic[T]):
    """One value the composition root hands down: filled once per process, read many times."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._value: Optional[T] = None
        self._filled = False

    def fill(self, value: T) -> None:
        self._value = value
        self._filled = True

    @property
    def filled(self) -> bool:
        return self._filled

    def get(self) -> T:
        if not self._filled:
            raise NotAssembled(f"{self.what} is not assembled yet: import {ROOT} (the composition "
                               "root) before loading a config or running the daemon's parts")
        return self._value  # type: ignore[return-value]
