"""A notification a channel lost: rejected by the vendor (not retryable) or given up on at
`alerting.max_age`.

The outbox drops such a row (retrying a rejected one cannot succeed, and an expired one is stale),
so on-call never sees the page it carried. The outbox reports each one (`Outbox.on_lost`), the
daemon keeps it in the state store under `LOST`, and the `notifications_failing` detector
(watchdog.detectors.delivery) turns them into a finding the other channels carry: the data still
flows one way (deliver -> state -> detectors -> engine), through the store at the bottom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from watchdog.core.state import RecordKey

#: Outcomes of a lost notification (the `result` label of `npu_watchdog_notifications_total`).
REJECTED = "failed"
EXPIRED = "expired"
#: Still queued when its channel was removed from the config (a rename, by reload or restart).
REMOVED = "removed"


@dataclass(frozen=True)
class LostNotification:
    channel: str
    #: REJECTED (the vendor refused it: a wrong URL, token or secret), EXPIRED (max_age) or
    #: REMOVED (its channel left the config first).
    outcome: str
    #: firing or resolved.
    status: str
    #: The most severe of its alerts.
    severity: str
    #: The rules of its alerts, in its order.
    rules: Tuple[str, ...]
    #: The last answer (a verdict line: the channel's known secrets are already out of it).
    error: str
    at: float


#: Not a probe: the outbox's lost notifications, kept like a probe's records (history-bounded).
LOST: RecordKey[LostNotification] = RecordKey("delivery")
