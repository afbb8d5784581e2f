"""Which probes discovery feeds, decided once per loaded config (explicit settings win).

A probe enabled under `probes:` keeps its explicit settings ("config"); a probe named in
`discovery.feed` and not enabled is switched on and fed by discovery ("discovery"). The npu probe
is fed whether or not npu-smi is there now: it looks for the program every round (a driver
mounted after boot is picked up without a reload), reports nothing while no job runs on a node
without it (a machine without NPUs does not report it down), and `npu_smi_missing` once a
training job runs there.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Dict, Iterable


def npu_smi_present(program: str) -> bool:
    if os.sep in program:
        return os.access(program, os.X_OK)
    return shutil.which(program) is not None


def resolve(config: Any, fed: Iterable[str]) -> Dict[str, str]:
    """probe -> "config" | "discovery" | "off", for each probe in `fed` (those discovery can feed,
    as their modules declare: the config passes them, discovery sits below it). The config switches
    the fed probes on itself (`Config._resolve_discovery`): a built config is frozen."""
    out: Dict[str, str] = {}
    d = config.discovery
    for name in fed:
        section = getattr(config.probes, name)
        if section.enabled:
            out[name] = "config"
        elif not d.enabled or name not in d.feed:
            out[name] = "off"
        else:
            out[name] = "discovery"
    return out


def describe(feeds: Dict[str, str]) -> Dict[str, str]:
    """The wording `check-config` prints per probe."""
    words = {"config": "explicit settings under probes: win (discovery does not touch this probe)",
             "discovery": "fed by discovery (no explicit settings)", "off": "off"}
    return {k: words.get(v, v) for k, v in feeds.items()}
