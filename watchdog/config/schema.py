"""The root of the config file. Each feature's section lives in `watchdog/config/sections/`; each
probe's section under `probes:` is declared by its probe module (`SECTION`) and handed down by the
composition root (`watchdog.plugins_list` calls `install_probe_sections`): this module imports no
probe, and `Config` is complete only once the root has run."""

from __future__ import annotations

import os
import re
import socket
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

from watchdog.compat import Annotated, Literal  # 3.7/3.8: from typing_extensions

from pydantic import BeforeValidator, Field, PrivateAttr, create_model, field_validator, model_validator

from watchdog.config.sections.alerting import AlertingConfig
from watchdog.config.sections import discovery as discovery_section
from watchdog.config.sections.common import ProbeSection
from watchdog.config.sections.discovery import DiscoveryConfig
from watchdog.config.sections.doctor import DoctorConfig
from watchdog.config.sections.snapshots import SnapshotsConfig
from watchdog.config.sections.pace import PaceConfig
from watchdog.config.sections.stall import StallConfig
from watchdog.config.sections.trends import TrendsConfig
from watchdog.config.types import Duration, StrictModel
from watchdog.core.findings import JOB_LABEL
from watchdog.core.plugins import Slot

from watchdog.service.defaults import DEFAULT_PORT
from watchdog.discovery.plan import resolve
from watchdog.runbook import own_base
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def _label_value(v: object) -> str:
    if not isinstance(v, str) or not _LABEL_VALUE.match(v):
        raise ValueError("expected letters, digits and . _ : - (max 128), starting with a letter or digit")
    return v


#: A value used as a metric/alert label (host, job): short, no spaces or quotes.
LabelValue = Annotated[str, BeforeValidator(_label_value)]


def _default_state_dir() -> str:
    """$STATE_DIRECTORY (set by systemd's StateDirectory=), else /var/lib/npu-watchdog."""
    # systemd's StateDirectory= exports STATE_DIRECTORY (colon-separated when several).
    env = os.environ.get("STATE_DIRECTORY", "")
    return env.split(":")[0] if env else "/var/lib/npu-watchdog"


class NodeConfig(StrictModel):
    """Which node this is: the `host` label on every finding, alert and snapshot."""

    #: This node's name: the `host` label on every finding, alert, metric and snapshot (default: the
    #: machine's host name).
    name: LabelValue = Field(default_factory=socket.gethostname)


class JobConfig(StrictModel):
    """Which training job is watched: the `training_job` label on every finding, alert and metric.

    With discovery on, each discovered job is labelled with its own discovered name; a `name`
    set here wins for the (oldest) job discovered on the node.
    """

    #: The training job's name: the `training_job` label. With discovery on, each discovered job
    #: has its own name; a name set here wins for the oldest one.
    name: LabelValue = "training"
    #: Optional owner of the job's processes (used by the process probe to narrow its search).
    user: Optional[str] = None
    #: Optional launcher (e.g. torchrun) whose children are the ranks.
    launcher: Optional[str] = None
    #: The job's HCCL_EXEC_TIMEOUT / HCCL_CONNECT_TIMEOUT when the ranks' environment is not
    #: visible (unset: the CANN defaults 1836 s / 120 s). The cascade windows follow them.
    hccl_exec_timeout: Optional[Duration] = None
    #: The job's HCCL_CONNECT_TIMEOUT when the ranks' environment is not visible (see
    #: `hccl_exec_timeout`).
    hccl_connect_timeout: Optional[Duration] = None


class PathsConfig(StrictModel):
    """Where the daemon keeps its state (offsets, alert state, outbox) and its snapshots."""

    #: Folder of the daemon's own state (alert history, outbox, silences, log read positions);
    #: systemd's `StateDirectory` when set.
    state_dir: str = Field(default_factory=_default_state_dir)
    #: Defaults to `<state_dir>/snapshots`.
    snapshot_dir: Optional[str] = None

    @model_validator(mode="before")
    @classmethod
    def _snapshot_default(cls, data: Any) -> Any:
        """Fill the default in before validation: a built config is frozen."""
        if isinstance(data, dict) and not data.get("snapshot_dir"):
            state_dir = data["state_dir"] if "state_dir" in data else _default_state_dir()
            if isinstance(state_dir, str):
                data = {**data, "snapshot_dir": os.path.join(state_dir, "snapshots")}
        return data


class HttpConfig(StrictModel):
    """The metrics/status endpoint."""

    #: Serve `/metrics`, `/healthz`, `/api/status`, the status page and the runbook
    #: (`/runbook/<lang>`) that messages link to.
    enabled: bool = True
    #: host:port; 127.0.0.1 by default, open it to your Prometheus explicitly.
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    #: Connections open at once (lowered if the open-files limit is tight: the probes keep a
    #: reserve); at the cap a new connection evicts the oldest idle one.
    max_connections: int = Field(default=64, ge=4, le=4096)
    #: A connection is closed when a read waits longer than this (idle or trickling clients).
    connection_timeout: Duration = Field(default="10s")
    #: Serve `/api/status` and the detailed landing page to clients on other hosts too. Off by
    #: default: with `listen` opened for Prometheus, other hosts get `/metrics` and `/healthz`
    #: only (status shows job paths, command lines and alert texts; see docs/guarantees.md).
    status_remote: bool = False

    @field_validator("listen")
    @classmethod
    def _hostport(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("expected host:port such as 127.0.0.1:9841 or [::1]:9841")
        return v

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


class LoggingConfig(StrictModel):
    """Daemon logs go to stderr (journald adds the timestamps)."""

    #: Lowest level of the daemon's own log lines (to stderr, for journald).
    level: Literal["debug", "info", "warning", "error"] = "info"
    #: `text` (one readable line) or `json` (one object per line, for log shippers).
    format: Literal["text", "json"] = "text"


class ProbeDefaults(StrictModel):
    """Every probe has its own schedule; all are off until configured, except what you enable."""

    #: Maximum time a single probe round may take unless the probe sets its own `timeout`.
    default_timeout: Duration = Field(default="20s")
    #: Random offset (0..jitter), drawn once at start, shifting every probe's schedule, so a fleet
    #: does not probe in lock-step; this daemon's probes of one interval run together.
    jitter: Duration = Field(default="1s")
    #: How long the detectors remember a series: a rank or chip not seen for this long is
    #: forgotten, and a condition's start is not looked for further back.
    history: Duration = Field(default="1h")

    @model_validator(mode="after")
    def _section_checks(self) -> "ProbeDefaults":
        for section in PROBE_SECTIONS:
            if section.check is not None:
                section.check(getattr(self, section.key))
        return self


class Config(StrictModel):
    """The whole config file."""

    node: NodeConfig = Field(default_factory=NodeConfig)
    job: JobConfig = Field(default_factory=JobConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    probes: ProbesConfig = Field(default_factory=lambda: ProbesConfig())
    #: NPU trend detectors (idle, busy-hang, low utilization, HBM growth, health, temperature).
    trends: TrendsConfig = Field(default_factory=TrendsConfig)
    #: The fused stall rule.
    stall: StallConfig = Field(default_factory=StallConfig)
    #: The job pace: the slowdown warning and the goodput accounting.
    pace: PaceConfig = Field(default_factory=PaceConfig)
    alerting: AlertingConfig = Field(default_factory=AlertingConfig)
    snapshots: SnapshotsConfig = Field(default_factory=SnapshotsConfig)
    doctor: DoctorConfig = Field(default_factory=DoctorConfig)
    #: Zero-config discovery of the training jobs on the node (on in the shipped example config).
    discovery: DiscoveryConfig = Field(default_factory=DiscoveryConfig)
    #: Per fed probe: "config" (explicit settings win), "discovery" or "off" (set at validation).
    _feeds: dict = PrivateAttr(default_factory=dict)
    #: This config is one discovered job's (watchdog.detectors.jobs.job_config): its findings
    #: carry the job's name.
    _job_scoped: bool = PrivateAttr(default=False)
    #: Values given as `${NAME}` where NAME says it holds a credential (`${CHECK_TOKEN}` in a
    #: check's argv): secrets wherever they were written, not only in `Secret` fields
    #: (watchdog.privacy.redact.config_secrets; set by watchdog.config.load.validate_text).
    _env_secrets: tuple = PrivateAttr(default=())

    @model_validator(mode="after")
    def _resolve_discovery(self) -> "Config":
        self._feeds = resolve(self, discovery_section.feeds())
        fed = {name: getattr(self.probes, name).model_copy(update={"enabled": True})
               for name, how in self._feeds.items() if how == "discovery"}
        if fed:
            # Still being built (the one place a config section is replaced; frozen from here on).
            object.__setattr__(self, "probes", self.probes.model_copy(update=fed))
        return self

    @model_validator(mode="after")
    def _own_runbook(self) -> "Config":
        """Runbook links point at the runbook this daemon serves unless a base is configured."""
        self.alerting._own_runbook = own_base(self.http.enabled, self.http.host, self.http.port)
        return self

    def for_job(self, name: str) -> "Config":
        """The config as one discovered job's pass sees it: a new config naming the job (see
        watchdog.detectors.jobs.job_config), whose findings carry that name."""
        cfg = self.model_copy(update={"job": self.job.model_copy(update={"name": name})})
        cfg._job_scoped = True
        return cfg

    def fed_by_discovery(self, probe: str) -> bool:
        return self._feeds.get(probe) == "discovery"

    @property
    def feeds(self) -> dict:
        return dict(self._feeds)

    @property
    def job_name_explicit(self) -> bool:
        return "name" in self.job.model_fields_set

    @property
    def base_labels(self) -> dict:
        """The labels every finding of this node carries: the host, and the job when there is one
        to name. Where discovery finds the ranks, a job's findings are made with that job's config
        (`watchdog.detectors.jobs.job_config`, which names it), and what belongs to no job (a
        chip no rank holds, the watcher itself) carries no `training_job` label: never the default
        name of a job that does not exist."""
        if self.fed_by_discovery("process") and not self._job_scoped:
            return {"host": self.node.name}
        return {"host": self.node.name, JOB_LABEL: self.job.name}

    @property
    def job_label(self) -> str:
        """The `training_job` value of what is not a discovered job's ("" where there is none)."""
        return self.base_labels.get(JOB_LABEL, "")


def _probes_model(sections: Tuple[ProbeSection, ...]) -> type:
    """`probes:`: the shared keys of `ProbeDefaults`, then one key per probe module's `SECTION`
    in the schedule's order (the order of the generated config reference)."""
    fields = {s.key: s.field() for s in sections}
    return create_model("ProbesConfig", __base__=ProbeDefaults, __module__=__name__,
                        __doc__=ProbeDefaults.__doc__, **fields)


#: The sections the probe modules declare, in the schedule's order (empty until the composition
#: root installs them).
PROBE_SECTIONS: Tuple[ProbeSection, ...] = ()
#: Filled by `install_probe_sections`; `load_config_text` checks it (a clear error, not pydantic's).
ASSEMBLED: Slot[Tuple[ProbeSection, ...]] = Slot("the config's probe sections")

if TYPE_CHECKING:
    # Built from the probe modules' declarations by the composition root; to the type checker
    # only the shared keys exist, so a probe's own section is read typed through its module's
    # `SECTION.of(config)` (watchdog.config.sections.common.ProbeSection), never by attribute.
    ProbesConfig = ProbeDefaults


def install_probe_sections(sections: Sequence[ProbeSection]) -> None:
    """Complete `Config` with one key per probe module's `SECTION` (given in schedule order) and
    make the fed ones the probes `discovery.feed` accepts. Called by the composition root
    (`watchdog.plugins_list`) when it is imported, before any config is loaded."""
    global PROBE_SECTIONS, ProbesConfig
    keys = [s.key for s in sections]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ValueError(f"probe config section(s) declared twice: {', '.join(dupes)}")
    PROBE_SECTIONS = tuple(sections)
    discovery_section.set_feeds(tuple(s.key for s in sorted((s for s in PROBE_SECTIONS if s.feed is not None),
                                                             key=lambda s: s.feed)))
    ProbesConfig = _probes_model(PROBE_SECTIONS)
    Config.model_rebuild(force=True, _types_namespace={"ProbesConfig": ProbesConfig})
    ASSEMBLED.fill(PROBE_SECTIONS)
