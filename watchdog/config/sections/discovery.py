"""Config of zero-config discovery: find the training jobs on the node and feed the probes."""

from __future__ import annotations

import re
from typing import Any, List, Tuple

from watchdog.compat import Literal  # 3.7: from typing_extensions

from pydantic import Field, field_validator

from watchdog.config.types import Duration, StrictModel

#: The probes discovery can feed: those whose module declares a `feed` (see
#: `watchdog.config.sections.common.ProbeSection`), in their `feed` order; set once by
#: `watchdog.config.schema` when it finds the probe modules. A probe enabled in `probes:` keeps
#: its own explicit settings.
FEEDS: Tuple[str, ...] = ()
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class DiscoveryConfig(StrictModel):
    """On in the shipped example config (and so in `make install`'s): install, start, and
    whatever training job runs on the node is watched. Off when a config leaves the section out,
    so an existing config keeps exactly the probes it configures.

    Each probe named in `feed` that is not enabled explicitly under `probes:` is switched on and
    pointed at what discovery finds; a probe enabled explicitly keeps its own settings (its
    explicit config wins; `check-config` says which applies).
    """

    #: On in the shipped example config; off when a config leaves the section out.
    enabled: bool = False
    #: The process table is scanned on every round of the process probe; the logs and heartbeat
    #: probes reuse a scan up to this old, plus `probes.jitter` and 1 s (the process round due
    #: rescans). A scan reads the command line and environment only of processes new since the last
    #: (docs/discovery.md says what else it reads, and how often).
    interval: Duration = Field(default="10s", gt=0)
    #: Probes discovery switches on and points at the jobs, unless enabled explicitly under `probes:`.
    feed: List[FeedName] = Field(default_factory=lambda: list(FEEDS))
    #: Environment keys of the ranks holding the job's name, first set wins (e.g. a scheduler's
    #: job name); else `<launcher script>-<start time>`. Only these and the documented keys are
    #: ever read from a process environment.
    name_env: List[str] = Field(default_factory=lambda: ["NPU_WATCHDOG_JOB", "SLURM_JOB_NAME", "JOB_NAME"])
    #: Watch only jobs whose ranks carry these environment values, "KEY=value" separated by
    #: commas (e.g. a team tag on a shared machine); empty: every job on the node.
    only_env: str = ""
    #: A job that ended (cleanly or not) keeps its series this long, then they are removed.
    forget_after: Duration = Field(default="10m")
    #: Read the ranks' CANN plog folders too.
    plogs: bool = True
    #: Lines (regex, searched in the last lines of the ranks' and the launcher's logs) that mark
    #: the end of training: trainers' own (Hugging Face, Lightning, Megatron) and launchers'
    #: success lines (torchrun, DeepSpeed, msrun). One of them is a sign of a clean end; the decision
    #: table is in docs/discovery.md.
    end_patterns: List[str] = Field(default_factory=lambda: [
        # Not an epoch's own end (`Epoch 1/3: training complete, saving checkpoint`, `[Epoch 2]
        # training finished`): a job stopped right after one (a preemption during its checkpoint)
        # is not a finished job. `Epoch 10/10 done. Training complete!` is an end.
        r"(?i)^(?!.*\bepoch\s*\[?\d+(?:\s*/\s*\d+)?\]?\W{0,3}training (?:is )?(?:complete|completed|finished|done|over)\b).*\btraining (?:is )?(?:complete|completed|finished|done|over)\b",
        r"(?i)\bafter training is done\b",
        r"(?i)\bend of training\b",
        r"`Trainer\.fit` stopped: `max_(?:epochs|steps)=",
        r"worker group successfully finished",
        r"\bProcess \d+ exits successfully\b",
        r"All workers successfully exit!",
    ])
    #: Ranks leaving within this window of each other are leaving together (a job ending); a
    #: rank gone this long while its peers still run, with no failure sign of its own, is missing.
    #: Longer than `probes.process.interval`: the ranks of one end are seen in successive rounds.
    end_window: Duration = Field(default="30s", gt=0)

    @field_validator("name_env")
    @classmethod
    def _env_names(cls, v: List[str]) -> List[str]:
        for name in v:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return v

    @field_validator("only_env")
    @classmethod
    def _only(cls, v: str) -> str:
        for item in filter(None, (x.strip() for x in v.split(","))):
            key, sep, _ = item.partition("=")
            if not sep or not _ENV_NAME.match(key):
                raise ValueError(f"{item!r}: expected KEY=value (comma-separated)")
        return v

    @property
    def only_pairs(self) -> Tuple[Tuple[str, str], ...]:
        items = filter(None, (x.strip() for x in self.only_env.split(",")))
        return tuple((k, v) for k, _, v in (i.partition("=") for i in items))

    @field_validator("end_patterns")
    @classmethod
    def _patterns(cls, v: List[str]) -> List[str]:
        for p in v:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"{p!r} does not compile: {exc}") from None
        return v


def set_feeds(names: Tuple[str, ...]) -> None:
    """Make `names` the probes `discovery.feed` accepts (and its default), in this order."""
    global FEEDS, FeedName
    FEEDS = tuple(names)
    FeedName = Literal[FEEDS] if FEEDS else Any  # type: ignore[valid-type]
    # (the module's own names too: pydantic 2.5, the last for 3.7, looks only in the namespace given)
    DiscoveryConfig.model_rebuild(force=True, _types_namespace={**globals(), "FeedName": FeedName})


def feeds() -> Tuple[str, ...]:
    """The probes discovery can feed, in `discovery.feed`'s default order."""
    return FEEDS
