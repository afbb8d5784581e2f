"""Delivery channels, one module per vendor.

The registry is derived: every module of this package is imported and each `Channel` subclass that
declares a `type` is a channel. Adding a vendor is adding one module; nothing else lists them.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Dict, Type

from watchdog.alerting.channels.base import Channel, Verdict, scrub


def _subclasses(cls: type) -> list:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def _discover() -> Dict[str, Type[Channel]]:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    found: Dict[str, Type[Channel]] = {}
    for cls in _subclasses(Channel):
        if cls.type:
            if cls.type in found and found[cls.type] is not cls:
                raise ValueError(f"channel type {cls.type!r} declared twice ({found[cls.type].__name__}, {cls.__name__})")
            found[cls.type] = cls
    return found


CHANNEL_CLASSES: Dict[str, Type[Channel]] = _discover()


def build_channel(cfg, alerting) -> Channel:
    return CHANNEL_CLASSES[cfg.type](cfg, alerting)


def build_channels(alerting) -> Dict[str, Channel]:
    return {c.name: build_channel(c, alerting) for c in alerting.channels}


__all__ = ["Channel", "Verdict", "scrub", "build_channel", "build_channels", "CHANNEL_CLASSES"]
