"""Delivery channels, one module per vendor.

The composition root (`watchdog.plugins_list`) imports every vendor module and hands their
`Channel` classes down with `install`; `CHANNEL_CLASSES` is filled then (a dict, filled in place,
so a module that imported it early sees the same object).
"""

from __future__ import annotations

from typing import Dict, Iterable, Type

from watchdog.alerting.deliver.channels.base import Channel, Verdict, scrub


#: type -> Channel class, filled by `install`.
CHANNEL_CLASSES: Dict[str, Type[Channel]] = {}


def install(classes: Iterable[Type[Channel]]) -> Dict[str, Type[Channel]]:
    """Index the channel classes by their `type` (each declared once); the index, also kept in
    `CHANNEL_CLASSES`."""
    found: Dict[str, Type[Channel]] = {}
    for cls in classes:
        if not cls.type:
            raise ValueError(f"channel class {cls.__name__} declares no type")
        declared = cls.config_model.model_fields["type"].default
        if declared != cls.type:
            raise ValueError(f"channel class {cls.__name__} (type {cls.type!r}) needs its own config model: "
                             f"{cls.config_model.__name__} is the model of type {declared!r}")
        if cls.type in found and found[cls.type] is not cls:
            raise ValueError(f"channel type {cls.type!r} declared twice ({found[cls.type].__name__}, {cls.__name__})")
        found[cls.type] = cls
    CHANNEL_CLASSES.clear()
    CHANNEL_CLASSES.update(found)
    return found


def build_channel(cfg, alerting) -> Channel:
    return CHANNEL_CLASSES[cfg.type](cfg, alerting)


def build_channels(alerting) -> Dict[str, Channel]:
    return {c.name: build_channel(c, alerting) for c in alerting.channels}


__all__ = ["Channel", "Verdict", "scrub", "build_channel", "build_channels", "install", "CHANNEL_CLASSES"]
