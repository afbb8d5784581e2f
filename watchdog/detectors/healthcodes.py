"""What an npu-smi health code means, for the findings that name one (`npu_unhealthy`,
`npu_fault_recurring`).

Why here: the vendor's handling level and the action it asks for come from the npu-smi layer
(`watchdog.npusmi.subhealth.advise`), which sits below the log rules and cannot read their tables;
the meaning of a chip fault code comes from the chip fault table the log rules use
(`watchdog/logrules/tables/chipfault.yaml`), so `Error Code : 80E18402` in npu-smi's health output
and `event_id=0x80e18402` in a device log are worded alike and carry the same level. A code the
table does not document keeps the npu-smi layer's level and wording.
"""

from __future__ import annotations

from dataclasses import replace

from watchdog.logrules.codes import lookup
from watchdog.npusmi.subhealth import LEVELS, CodeAdvice, advise


def advise_code(code: str, health: str = "") -> CodeAdvice:
    """`advise(code, health)` with the chip fault table's meaning, and its handling level (and the
    action that level asks for) when the table gives one: the table is the versioned copy of the
    vendor's levels, so a log line and npu-smi name the same level for a code."""
    adv = advise(code, health)
    entry = lookup("chipfault", adv.code)
    if entry is None:
        return adv
    if entry.level in LEVELS:
        return replace(adv, level=entry.level, meaning=entry.en, action=LEVELS[entry.level][1])
    return replace(adv, meaning=entry.en)
