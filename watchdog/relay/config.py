"""The relay's config file: where it listens, where it keeps its state, and the channels (the
same `channels` entries, retries and limits as a node's `alerting` section)."""

from __future__ import annotations

import ipaddress
import re
from typing import Optional

from pydantic import Field, field_validator, model_validator

from watchdog.config.load import read_config_file, validate_text
from watchdog.config.sections.alerting import AlertingConfig
from watchdog.config.types import Duration, Secret, StrictModel

#: Channel types that would send the relay's messages back into Alertmanager (a loop).
_LOOPING = ("alertmanager",)


class RelayConfig(StrictModel):
    """`npu-watchdog relay -c relay.yaml`."""

    #: host:port of the webhook Alertmanager posts to (`webhook_configs[].url`: http://HOST:PORT/alertmanager).
    listen: str = "127.0.0.1:9842"
    #: The outbox and the open incidents (SQLite); created 0700.
    state_dir: str = "/var/lib/npu-watchdog-relay"
    #: If set, Alertmanager must send `Authorization: Bearer <token>` (`http_config.authorization`).
    #: Required when `listen` is not a loopback address: whoever reaches the port could otherwise
    #: post a resolve for a real incident or a page about a job that does not exist.
    bearer_token: Optional[Secret] = None
    #: Listen on a non-loopback address without `bearer_token` anyway (a network where only
    #: Alertmanager can reach the port); logged as a warning at every start.
    allow_unauthenticated: bool = False
    #: Largest webhook body accepted (a 1,000-node incident with evidence is about 2 MB).
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    #: Bytes of request bodies held at once (read and parsed); a post beyond waits up to 2 s for
    #: room, then is answered 503 with Retry-After (one body up to max_body_bytes always gets in).
    #: Memory stays bounded however many clients post in parallel.
    max_bodies_bytes: int = Field(default=32 * 1024 * 1024, ge=1024, le=1 << 34)
    #: A resolved incident is remembered this long: a firing notification of the same alerts from
    #: the other Alertmanager peer (whose view lags) is not a new incident. Alerts first seen after
    #: the resolve always open a new one.
    resolved_grace: Duration = Field(default="10m")
    #: Channels (feishu, slack, dingtalk, wecom, webhook) and delivery timings, as on a node.
    alerting: AlertingConfig = Field(default_factory=AlertingConfig)

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        if not re.match(r"^[^\s:]*:\d{1,5}$", v) or not 0 < int(v.rsplit(":", 1)[1]) < 65536:
            raise ValueError("expected host:port, e.g. 127.0.0.1:9842")
        return v

    @model_validator(mode="after")
    def _check(self) -> "RelayConfig":
        if not self.alerting.channels:
            raise ValueError("alerting.channels: the relay needs at least one channel to send to")
        for c in self.alerting.channels:
            if c.type in _LOOPING:
                raise ValueError(f"alerting.channels: {c.name} is of type {c.type}, which would loop back into "
                                 "Alertmanager")
        if self.bearer_token is None and not self.allow_unauthenticated and not self.loopback:
            raise ValueError(f"bearer_token: required when listening on {self.listen}, which is not a loopback "
                             "address (anyone who reaches the port could resolve a real incident or page about "
                             "a job that does not exist); set bearer_token or bearer_token_file (and "
                             "Alertmanager's http_config.authorization), or allow_unauthenticated: true")
        return self

    @property
    def loopback(self) -> bool:
        """Whether `listen` is reachable from this host only (127.0.0.0/8, localhost); an empty
        host, 0.0.0.0 or a name is not."""
        host = self.listen.rsplit(":", 1)[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def exposure(self) -> str:
        """What the start-up log says about who may post (empty when a token is required)."""
        if self.bearer_token is not None:
            return ""
        if self.loopback:
            return (f"no bearer_token: any local user can post to the relay on {self.listen} "
                    "(set bearer_token to require Alertmanager's)")
        return (f"allow_unauthenticated: the relay accepts posts without a token from anyone who reaches "
                f"{self.listen}")

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0] or "0.0.0.0"

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


def load_relay_config(path: str) -> RelayConfig:
    """Read and validate; every problem is a ConfigError naming the key."""
    return validate_text(RelayConfig, read_config_file(path), path)
