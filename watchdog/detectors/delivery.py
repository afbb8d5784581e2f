"""`notifications_failing`: a channel dropped notifications (the vendor rejected them, or they
were given up on at `alerting.max_age`) within `alerting.dropped_hold` (default 15 minutes, as
the fleet rule `watchdog_notifications_failing` counts).

A dropped page is a page on-call never saw; before this rule only the daemon's log and
`npu_watchdog_notifications_total{result="failed"|"expired"}` said so, which nobody reads at 3 a.m.
The finding names the channel and the alerts it lost, and goes out through every channel that
takes it: the other channels carry it (the failing one most likely drops it too, and that drop is
not counted again, so the alert cannot keep itself alive). Its severity is that of the worst
notification lost: a dropped critical page is itself critical.
"""

from __future__ import annotations

import time
from typing import Dict, List

from watchdog.config.schema import Config
from watchdog.core.delivery import EXPIRED, LOST, REJECTED, REMOVED, LostNotification
from watchdog.core.findings import SEVERITY_RANK, Finding
from watchdog.core.rulecatalog import Rule
from watchdog.core.state import StateView
from watchdog.host import clock

RULE = "notifications_failing"
#: Evidence lines kept (the newest).
EVIDENCE = 10

HINT = ("These alerts never reached the channel: read them here (evidence lines) and act on them now. "
        "A rejected notification means the channel's URL, token or signing secret is wrong or revoked "
        "(the vendor's answer is in the summary); fix it in the config and reload "
        "(`systemctl reload npu-watchdog`), then `npu-watchdog test-alert` sends a test message. "
        "Given up on means the vendor could not be reached for `alerting.max_age`: check the node's "
        "network path to it (proxy, firewall, DNS).")


def _span(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _zh_span(seconds: float) -> str:
    return f"{seconds / 60:g} 分钟" if seconds >= 60 else f"{seconds:g} 秒"


def _line(lost: LostNotification) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(lost.at))
    what = {REJECTED: "rejected", REMOVED: "channel removed"}.get(lost.outcome, "given up on")
    return f"{at} {lost.status} {lost.severity} {', '.join(lost.rules) or '-'}: {what}: {lost.error}"


def _finding(config: Config, channel: str, losses: List[LostNotification]) -> Finding:
    hold = config.alerting.dropped_hold
    worst = max((x.severity for x in losses), key=lambda s: SEVERITY_RANK.get(s, 0))
    n = {o: sum(1 for x in losses if x.outcome == o) for o in (REJECTED, EXPIRED, REMOVED)}
    parts = [f"{n[o]} {en}" for o, en in ((REJECTED, "rejected"), (EXPIRED, "given up on"),
                                            (REMOVED, "dropped with the channel, removed from the config")) if n[o]]
    zh = [f"{n[o]} 条{w}" for o, w in ((REJECTED, "被拒绝"), (EXPIRED, "放弃重试"), (REMOVED, "随通道从配置中删除而丢弃"))
          if n[o]]
    last = losses[-1]
    return Finding(
        rule=RULE, severity="critical" if worst == "critical" else "warning",
        summary=(f"channel {channel} dropped {len(losses)} notification(s) in the last "
                 f"{_span(hold)} ({', '.join(parts)}); last answer: {last.error[:200]}"),
        labels={**config.base_labels, "channel": channel},
        hint=HINT, value=f"{len(losses)} dropped", since=losses[0].at,
        evidence=tuple(_line(x) for x in losses[-EVIDENCE:]), snapshot=False,
        details={"channel": channel, "dropped": len(losses), "last": last.at,
                 "said": {"zh": f"：{_zh_span(hold)}内 {len(losses)} 条（{'，'.join(zh)}）；最后的回答：{last.error[:200]}"}},
    )


def detect(view: StateView, config: Config) -> List[Finding]:
    per: Dict[str, List[LostNotification]] = {}
    for sample in view.history(LOST):
        lost = sample.value
        if view.now - lost.at > config.alerting.dropped_hold:
            continue
        if lost.rules and all(r == RULE for r in lost.rules):
            continue  # this rule's own message, dropped by the channel it is about
        per.setdefault(lost.channel, []).append(lost)
    return [_finding(config, ch, losses) for ch, losses in sorted(per.items())]


#: Recorded by the outbox (`Outbox.on_lost`), not by a probe's round: the periodic pass judges it.
TRIGGERS: tuple = ()

RULES = (
    Rule(RULE, "critical", severities=("critical", "warning"), subject="watchdog",
         # The dropped notifications are kept in memory only: after a restart the alert keeps
         # what is left of its 15 minutes, then resolves.
         warmup=lambda c, f: max(0.0, float(f.get("last") or 0.0) + c.alerting.dropped_hold - clock.now()),
         title="Notifications dropped by a channel"),
)
