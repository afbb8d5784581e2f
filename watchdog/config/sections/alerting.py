"""Config of the alert engine (timings, inhibitions, silences) and its delivery channels.

Every channel URL, signing secret, token and header value is a `Secret`: it may come inline, from
`${ENV}`, or from `<key>_file`, and it is redacted in every dump. Defaults follow the vendors'
documented limits (see the README "Alerting" section), so a channel only needs `type`, `name` and
`url` to behave well.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Type, Union

from watchdog.compat import Annotated, Literal  # 3.7: from typing_extensions

from pydantic import Discriminator, Field, PrivateAttr, Tag, field_validator, model_validator

from watchdog.config.types import Duration, Secret, StrictModel, load_zone
from watchdog.core.findings import JOB_LABEL, LEGACY_JOB_LABEL
from watchdog.core.plugins import Slot
from watchdog.core.rulecatalog import JOB_LABELS, default_inhibitions
from watchdog.core.rulecatalog import default_for as declared_for
from watchdog.logrules.model import current_rule_id

log = logging.getLogger("watchdog.config")


_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MATCHER = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*)$")



#: type -> the vendor's config model (a `ChannelConfig` subclass declared in its channel module),
#: handed down by the composition root (the channels sit above the config and import it;
#: watchdog.core.plugins). `install_channel_models` fills it.
CHANNEL_KINDS: Slot[Mapping[str, Type["ChannelConfig"]]] = Slot("the channel types")


def channel_classes() -> Mapping[str, Type["ChannelConfig"]]:
    """The channel types and the config model of each, as the composition root installed them."""
    return CHANNEL_KINDS.get()


def current_label(name: str, where: str) -> str:
    """The label name to use for `name`: the legacy `job` label became `training_job`. Old configs,
    stored silences and habits keep working (with a warning) instead of silently matching nothing."""
    if name != LEGACY_JOB_LABEL:
        return name
    log.warning("%s: the label `%s` is now `%s` (Prometheus owns `job`); using `%s`, please rename it",
                where, LEGACY_JOB_LABEL, JOB_LABEL, JOB_LABEL)
    return JOB_LABEL


def parse_matcher(text: str) -> "LabelMatcher":
    """`label=value`, `label!=value`, `label=~regex`, `label!~regex` -> LabelMatcher."""
    m = _MATCHER.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise ValueError("expected label=value, label!=value, label=~regex or label!~regex")
    name, op, value = m.group(1), m.group(2), m.group(3).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"bad regular expression {value!r}: {exc}") from None
    return LabelMatcher(name=name, op=op, value=value)


class LabelMatcher(StrictModel):
    """One label condition. `rule` and `severity` can be matched like any label."""

    #: Label to match (`rule` and `severity` work too).
    name: str
    #: `=` equal, `!=` not equal, `=~` regex matches, `!~` regex does not match.
    op: Literal["=", "!=", "=~", "!~"] = "="
    #: The value or regular expression.
    value: str

    @field_validator("name")
    @classmethod
    def _current_name(cls, v: str) -> str:
        return current_label(v, f"matcher {v}")

    @model_validator(mode="before")
    @classmethod
    def _current_rule(cls, data: object) -> object:
        # A renamed log rule's old id would silently match nothing: use its successor.
        if isinstance(data, dict) and data.get("name") == "log_rule" and data.get("op", "=") in ("=", "!=") \
                and isinstance(data.get("value"), str):
            where = f"matcher log_rule{data.get('op', '=')}{data['value']}"
            return {**data, "value": current_rule_id(data["value"], where, log.warning)}
        return data

    def matches(self, labels: Dict[str, str]) -> bool:
        have = labels.get(self.name, "")
        if self.op == "=":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        hit = re.fullmatch(self.value, have) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


def _matchers(v: object) -> object:
    if isinstance(v, list):
        return [parse_matcher(x) if isinstance(x, str) else x for x in v]
    return v


class RateLimit(StrictModel):
    """At most `count` messages per `per` (a sliding window)."""

    #: At most this many messages ...
    count: int = Field(ge=1, le=1_000_000)
    #: ... per this long (messages beyond wait in the outbox, none is dropped).
    per: Duration


class ChannelConfig(StrictModel):
    """One destination. Routing: the alerts of a message that reach at least `min_severity` and
    match every matcher are sent here; a message with none left is not sent to this channel.

    The keys every vendor shares. Each vendor's module (`watchdog/alerting/deliver/channels/`) declares its
    own model on this base, with the keys only it has (a signing `secret`, `bearer_token` and
    `headers`, Alertmanager's `resend_interval`): a key another vendor's model has is an error
    naming the channel, the key and the vendor, never a setting silently ignored."""

    #: The vendor: one of the channel modules' declared types (feishu, slack, dingtalk, wecom,
    #: webhook, alertmanager); it decides which other keys the channel takes.
    type: str
    #: Short name used in logs, metrics and `test-alert --channel` (never the URL).
    name: str
    #: Webhook URL (for `alertmanager`: the Alertmanager base URL). The URL is the credential.
    url: Secret
    #: Only alerts at or above this severity go to this channel.
    min_severity: Literal["info", "warning", "critical"] = "warning"
    #: Label matchers (`rule=stall`, `rank=~0|1`, `severity!=info`); all must match.
    matchers: List[LabelMatcher] = Field(default_factory=list)
    #: Override the vendor's documented limits (defaults: Feishu 5/s and 100/min, Slack 1/s,
    #: DingTalk and WeCom 20/min, none for webhook and alertmanager).
    rate_limits: Optional[List[RateLimit]] = None
    #: Time allowed to connect to the receiver before a retry.
    connect_timeout: Duration = Field(default="5s")
    #: Longest wait for any one read of the answer.
    read_timeout: Duration = Field(default="10s")
    #: Longest time of one whole attempt (connect, send, the complete answer): a receiver that
    #: answers a byte at a time cannot hold the channel longer than this.
    attempt_timeout: Duration = Field(default="15s")
    #: Send a message when alerts resolve (default: the engine's `send_resolved`).
    send_resolved: Optional[bool] = None
    #: Language of this channel's messages (`en`, `zh`); default: `alerting.language`. One node can
    #: page a Chinese Feishu group and an English Slack channel about the same incident.
    language: Optional[Literal["en", "zh"]] = None

    #: The vendor's documented send limits per webhook: (count, per seconds), a sliding window each.
    vendor_limits: ClassVar[Tuple[Tuple[int, float], ...]] = ()
    #: Whether, in fleet mode, this kind of channel collects every alert of the node (the fleet's
    #: Alertmanager), where the others take only `fleet_local_rules`.
    fleet_sink: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _vendor_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            check_vendor_keys(cls, data)
        return data

    @field_validator("matchers", mode="before")
    @classmethod
    def _parse_matchers(cls, v: object) -> object:
        return _matchers(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("expected lower-case letters, digits, _ and - (max 40), starting with a letter")
        return v

    @model_validator(mode="after")
    def _check(self) -> "ChannelConfig":
        url = self.url.get_secret_value()
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"channel {self.name}: url must be an http(s) URL")
        return self

    def limits(self) -> List[tuple]:
        if self.rate_limits is not None:
            return [(r.count, r.per) for r in self.rate_limits]
        return list(self.vendor_limits)


def _keys_of(model: Type[ChannelConfig]) -> Set[str]:
    """The keys a channel of `model` may be written with (a secret also as `<key>_file`)."""
    keys: Set[str] = set()
    for name, info in model.model_fields.items():
        keys.add(info.alias or name)
        if "SecretStr" in str(info.annotation):
            keys.add(f"{name}_file")
    return keys


def check_vendor_keys(model: Type[ChannelConfig], item: Mapping[str, Any]) -> None:
    """Every key of a channel of `model`'s vendor is one of that vendor's: the error names the
    channel, the key and the vendor (and which vendors do take the key), where pydantic's own
    would only say "unknown key"."""
    if not CHANNEL_KINDS.filled or model is ChannelConfig:
        return
    kinds = channel_classes()
    kind = model.model_fields["type"].default
    name = item.get("name")
    who = f"channel {name}" if isinstance(name, str) and name else "channel"
    allowed = _keys_of(model)
    for key in item:
        if key in allowed:
            continue
        others = sorted(t for t, m in kinds.items() if key in _keys_of(m))
        if others:
            raise ValueError(f"{who}: `{key}` does not apply to a {kind} channel "
                             f"(it is a key of {', '.join(others)} channels)")
        raise ValueError(f"{who}: unknown key `{key}` for a {kind} channel "
                         f"(its keys: {', '.join(sorted(allowed))})")


class UnknownChannel(StrictModel):
    """What an entry of no known `type` is validated as: only so that the error is the usual
    `alerting.channels[N].type: expected one of ..., got '...'`, naming the key."""

    model_config = dict(StrictModel.model_config, extra="allow")
    type: Any = None

    @field_validator("type", mode="before")
    @classmethod
    def _known(cls, v: Any) -> Any:
        kinds = sorted(channel_classes())
        raise ValueError(f"expected one of {', '.join(kinds)}" if v is not None
                         else f"required: one of {', '.join(kinds)}")


#: The union member of an entry whose `type` no vendor declared.
_UNKNOWN = "channel[?]"


def _channel_tag(v: Any) -> str:
    """The union member a channel is validated against. Tags hold `[`, so config errors leave
    them out of the key path (watchdog.config.load._clean_loc)."""
    kind = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    return f"channel[{kind}]" if isinstance(kind, str) and kind in channel_classes() else _UNKNOWN


def channel_union(models: Sequence[Type[ChannelConfig]]) -> Any:
    """The discriminated union (on `type`) of the vendors' config models."""
    members = tuple(Annotated[m, Tag(f"channel[{m.model_fields['type'].default}]")] for m in models)
    return Annotated[Union[members + (Annotated[UnknownChannel, Tag(_UNKNOWN)],)],  # type: ignore[valid-type]
                     Discriminator(_channel_tag)]


def install_channel_models(models: Sequence[Type[ChannelConfig]]) -> None:
    """Make `alerting.channels` validate against the union of `models` (one per vendor type,
    declared by the channel modules). Called by the composition root before the config root
    (`watchdog.config.schema.Config`) is rebuilt, so the whole config sees the union."""
    kinds: Dict[str, Type[ChannelConfig]] = {}
    for m in models:
        kind = m.model_fields["type"].default
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"channel config {m.__name__} declares no type")
        if kind in kinds:
            raise ValueError(f"channel type {kind!r} declared twice ({kinds[kind].__name__}, {m.__name__})")
        kinds[kind] = m
    global ChannelUnion
    CHANNEL_KINDS.fill(kinds)
    ChannelUnion = channel_union(list(kinds.values()))
    # The module's own names too: pydantic 2.5 (the last for Python 3.7) resolves the other
    # fields' annotations in this namespace alone.
    AlertingConfig.model_rebuild(force=True, _types_namespace={**globals(), "ChannelUnion": ChannelUnion})


class InhibitRule(StrictModel):
    """While an alert of a `source` rule fires, alerts of the `target` rules that carry the same
    values for every `equal` label are not sent (they stay tracked and show in status)."""

    #: Rules whose firing mutes the targets.
    source: List[str] = Field(min_length=1)
    #: Rules muted while a source fires (their symptoms).
    target: List[str] = Field(min_length=1)
    #: Labels that must be equal between source and target (default: same host and training job).
    equal: List[str] = Field(default_factory=lambda: list(JOB_LABELS))

    @field_validator("equal")
    @classmethod
    def _current_names(cls, v: List[str]) -> List[str]:
        return [current_label(n, "alerting.inhibitions[].equal") for n in v]


def _default_inhibitions() -> List[InhibitRule]:
    """The inhibitions each rule declares in the rule catalog (watchdog.core.rulecatalog)."""
    return [InhibitRule(**r) for r in default_inhibitions()]


if TYPE_CHECKING:
    #: What `alerting.channels` holds: the union on `type` of the vendors' config models, built by
    #: the composition root (`install_channel_models`); until then `AlertingConfig` is incomplete.
    ChannelUnion = ChannelConfig


class AlertingConfig(StrictModel):
    """The engine turns findings into alerts; channels deliver them. Without channels, alerts are
    only logged (and still tracked, silenced and counted)."""

    channels: List[ChannelUnion] = Field(default_factory=list)
    #: The first alert of a host and training job waits this long for the rest of its event (the lines of one
    #: NaN or OOM arrive within a round or two), then pages; alerts firing within the window share
    #: its message. Cascades that follow minutes later are folded by inhibition, not by waiting.
    group_window: Duration = Field(default="2s")
    #: A firing alert resolves only after its finding has been absent this long (hysteresis).
    resolve_delay: Duration = Field(default="1m")
    #: Re-notify an alert still firing after this long (0s: never).
    reminder: Duration = Field(default="4h")
    #: Send a message when an alert resolves.
    send_resolved: bool = True
    #: How long a finding must hold before it fires, per rule; rules not listed use `default_for`.
    default_for: Duration = Field(default="0s")
    #: (Merged over each rule's declared default, e.g. `npu_temperature: 2m`, `probe_down: 30s`.)
    for_: Dict[str, Duration] = Field(default_factory=dict, alias="for")
    #: Root-cause rules that suppress their symptoms (replaces the defaults when given).
    inhibitions: List[InhibitRule] = Field(default_factory=_default_inhibitions)
    #: Link added to each alert; `{host}`, `{training_job}`, `{rule}`, `{rank}`, `{npu}`... are filled in
    #: (URL-encoded); unknown names become empty.
    dashboard_url: Optional[str] = None
    #: Requested (GET) after every complete round of all probes, so an external checker can page
    #: when this node goes silent.
    deadman_url: Optional[Secret] = None
    #: Timeout of one dead-man request.
    deadman_timeout: Duration = Field(default="5s")
    #: Give up delivering a notification this old (logged and counted as `expired`).
    max_age: Duration = Field(default="6h")
    #: How long one notification a channel dropped (rejected, or given up on at `max_age`) keeps
    #: `notifications_failing` up; it resolves this long after the last drop.
    dropped_hold: Duration = Field(default="15m", gt=0)
    #: Retry backoff: doubles from `retry_initial` up to `retry_max`, with jitter.
    retry_initial: Duration = Field(default="2s")
    #: Longest wait between two delivery attempts (the backoff doubles up to it).
    retry_max: Duration = Field(default="5m")
    #: Recent log lines (finding evidence) shown per alert; trimmed further to fit a channel's limit.
    max_log_lines: int = Field(default=10, ge=0, le=100)
    #: `node`: every channel gets what routes to it (one node pages on its own). `fleet`: the node is
    #: a sensor of a multi-node job; its `alertmanager` channel(s) get every alert, labelled with
    #: `role` (root or symptom) and annotated with `first_seen`, so Alertmanager groups per
    #: training job across nodes; every other channel only gets the rules of `fleet_local_rules`.
    mode: Literal["node", "fleet"] = "node"
    #: Fleet mode: rules still sent straight from the node by its other channels (faults of this
    #: node alone, such as a dead card). Their Alertmanager copies carry `delivery="node"`, which
    #: the shipped Alertmanager route drops, so nothing pages twice. Empty: chat is off on nodes.
    fleet_local_rules: List[str] = Field(default_factory=list)
    #: Time zone of the times in messages (an IANA name such as `Asia/Shanghai`); the UTC offset
    #: is always printed next to the time, so a reader elsewhere is never misled.
    display_timezone: str = "UTC"
    #: Base of the runbook links in messages: `<runbook_url>#<rule>` (`{lang}` in it becomes the
    #: message's language). Unset: the runbook this daemon serves itself,
    #: `http://<listen address>:<port>/runbook/<lang>` (the host name when it listens on all
    #: addresses), which works on an air-gapped node; set it to a copy your on-call people can
    #: open from elsewhere (an internal wiki or Git server). No links when unset and `http` is off.
    runbook_url: Optional[str] = None
    #: The daemon's own runbook base (set by the whole config, which knows `http.listen`).
    _own_runbook: Optional[str] = PrivateAttr(default=None)
    #: Language of the messages (`en` or `zh`: titles, summaries, hints, buttons; numbers, labels,
    #: times, paths, commands and log lines stay as they are) and of the runbook page their links
    #: open. Each channel may set its own `language`.
    language: Literal["en", "zh"] = "en"

    model_config = dict(StrictModel.model_config, populate_by_name=True)

    @field_validator("display_timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        load_zone(v)  # raises ValueError naming the zone
        return v

    @field_validator("runbook_url")
    @classmethod
    def _runbook(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^https?://[^\s<>|\[\]()`\"'#]+$", v):
            raise ValueError("runbook_url must be an http(s) URL without spaces, brackets, quotes or a #fragment")
        return v

    @model_validator(mode="after")
    def _check(self) -> "AlertingConfig":
        seen = set()
        for c in self.channels:
            if c.name in seen:
                raise ValueError(f"channels: duplicate name {c.name!r}")
            seen.add(c.name)
        if self.retry_max < self.retry_initial:
            raise ValueError("retry_max must be at least retry_initial")
        if self.deadman_url is not None and not re.match(r"^https?://", self.deadman_url.get_secret_value()):
            raise ValueError("deadman_url must be an http(s) URL")
        if self.mode == "fleet" and not any(c.fleet_sink for c in self.channels):
            sinks = ", ".join(sorted(t for t, m in channel_classes().items() if m.fleet_sink))
            raise ValueError(f"mode fleet needs a channel of type {sinks} (the fleet's alerts go there)")
        return self

    def runbook_base(self) -> Optional[str]:
        """The base runbook links are built from: the configured one, else the daemon's own."""
        return self.runbook_url or self._own_runbook

    def sends_direct(self, channel_type: str, rule: str) -> bool:
        """Whether a channel of `channel_type` takes alerts of `rule` from this node: always in
        node mode; in fleet mode the fleet's sink (Alertmanager: its model declares `fleet_sink`)
        takes all, the others only the node-local rules."""
        if self.mode == "node" or rule in self.fleet_local_rules:
            return True
        model = channel_classes().get(channel_type)
        return model is not None and model.fleet_sink

    def role(self, rule: str) -> str:
        """`symptom` for a rule some inhibition treats as a consequence (stall, HCCL timeouts, a
        silent heartbeat), `root` otherwise (an OOM, a lost card): derived from the inhibitions,
        so the node's and the fleet's idea of cause and effect cannot drift apart."""
        def mutual(r: "InhibitRule") -> bool:  # one event seen by two probes: neither is the other's symptom
            return any(rule in o.source and set(r.source) & set(o.target) for o in self.inhibitions)

        return "symptom" if any(rule in r.target and not mutual(r) for r in self.inhibitions) else "root"

    def for_rule(self, rule: str) -> float:
        """The configured `for`, else the rule's declared default, else `default_for`."""
        if rule in self.for_:
            return self.for_[rule]
        return declared_for(rule) or self.default_for
