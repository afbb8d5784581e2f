"""The daemon's own state: `state_damaged` and `state_unwritable`.

`state_damaged`: the daemon found one of its own state files damaged and started fresh. Starting
fresh keeps the node watched, but something was lost (alert history and silences, or the log read
positions), so the on-call hears about it once: the finding holds for DAMAGE_HOLD_SECONDS after
the event and then resolves.

`state_unwritable`: the alert engine cannot commit to the state folder (read-only, full, or gone
and not re-creatable). It cannot go through the engine's own store, which is what fails, so the
engine raises it itself (`unwritable_finding`) and sends it straight to the channels.
"""

from __future__ import annotations

from typing import List, Sequence

from watchdog.host import clock
from watchdog.config.schema import Config
from watchdog.core.findings import Finding
from watchdog.core.rulecatalog import Rule
from watchdog.core.state import StateView

#: How long the finding stays in force after the damaged file was set aside.
DAMAGE_HOLD_SECONDS = 3600.0

HINT = ("The damaged file was renamed, not deleted: keep it for a bug report, then remove it. "
        "alerting.sqlite3 lost means firing alerts and silences were forgotten (they fire again if "
        "the condition holds); log offsets lost means the watched logs are followed from their end.")


def detect(view: StateView, config: Config) -> List[Finding]:
    out: List[Finding] = []
    for ev in view.damage:
        if view.now - ev.time > DAMAGE_HOLD_SECONDS:
            continue
        kept = f"kept as {ev.kept_as}" if ev.kept_as else "it could not be moved"
        out.append(Finding(
            rule="state_damaged", severity="warning",
            summary=f"state file {ev.file} was damaged and replaced by fresh state ({kept})",
            labels={**config.base_labels, "file": ev.file},
            hint=HINT, value=ev.reason, since=ev.time,
            details={"path": ev.path, "kept_as": ev.kept_as, "reason": ev.reason},
        ))
    return out


UNWRITABLE_HINT = ("New alerts are held (not lost) until the state folder can be written again; they are "
                   "sent then, once. Free space on its filesystem, remount it read-write, or fix what "
                   "made it read-only; a deleted folder is re-created by the daemon itself.")


def unwritable_finding(config: Config, folder: str, error: str, since: float, held: Sequence[str]) -> Finding:
    """The `state_unwritable` finding: the state folder, the error of the last failed commit, and
    the findings whose alerts wait for it (evidence lines)."""
    return Finding(
        rule="state_unwritable", severity="critical",
        summary=f"the state folder {folder} cannot be written ({error[:200]}): new alerts are held until it can",
        labels=dict(config.base_labels), hint=UNWRITABLE_HINT, value=error[:300], since=since,
        evidence=tuple(h[:300] for h in held[:10]), snapshot=False, details={"folder": folder},
    )


TRIGGERS: tuple = ()

RULES = (
    Rule("state_damaged", "warning",
         subject="watchdog",
         # The damage event is not seen again after a restart: the alert keeps its hour.
         warmup=lambda c, f: max(0.0, float(f.get("since") or 0.0) + DAMAGE_HOLD_SECONDS - clock.now()),
         title="Watchdog state damaged"),
    Rule("state_unwritable", "critical",
         subject="watchdog", title="Watchdog state folder not writable"),
)
