"""Run-time lookups of plugin registries that live above the layer asking for them.

The layers (docs/architecture.md) let a module import only from the layers below it. Two places
low in the ladder need what plugins higher up declare: the rule catalog (here in `core`) gathers
the `RULES` each detector module declares, and the channel config (in `config`) is checked
against what each channel declares (its type, whether it signs or takes a bearer token, its rate
limits). Importing those registries would make the bottom import the top; instead each is looked
up by name here, at first use (the daemon and every command load their config long after all
imports are done), and this is the one place that does so. `REGISTRIES` names every registry
looked up and why; tests/unit/test_architecture.py fails on a lookup of any other module.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict

#: module -> why a lower layer looks it up.
REGISTRIES: Dict[str, str] = {
    "watchdog.detectors": "the rule catalog (core.rulecatalog) gathers the RULES of the detector modules",
    "watchdog.alerting.channels": "channel config (config.sections.alerting) is checked against each "
                                  "channel's declarations: type, signed, authed, rate_limits",
}


def registry(name: str) -> ModuleType:
    """The registry module `name` (one of `REGISTRIES`), imported on first use."""
    if name not in REGISTRIES:
        raise KeyError(f"{name} is not a plugin registry (watchdog.core.plugins.REGISTRIES)")
    return importlib.import_module(name)
