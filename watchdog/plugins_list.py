"""The composition root: every plugin of the daemon, listed once, imported by name.

A plugin declares itself in its own module (a probe its `ORDER`, `build`, `SECTION`, record and
key; a detector its `detect`, `TRIGGERS` and `RULES`; a summary its `PROBE` and `Summary`; a
metric module its `ORDER`, `METRICS` and `samples`; a channel its class with a `type`). This
module lists them, imports them with plain `import` statements (so the import graph, the layer
contract and a reader all see every edge), and, once, when it is first imported, hands what they
declare down to the layers that use it:

- the typed config model: each probe's section under `probes:` and the probes discovery feeds
  (`watchdog.config.schema.install_probe_sections`), and the union on `type` of the channel
  vendors' config models (`watchdog.config.sections.alerting.install_channel_models`);
- the rule catalog (`watchdog.core.rulecatalog.install`), the detectors and their triggers
  (`watchdog.detectors.install`), the summaries (`watchdog.summaries.install`);
- the probe modules in schedule order (`watchdog.probes.install`), the metric table
  (`watchdog.metrics.catalog.install`) and the channel set (`watchdog.alerting.deliver.channels.install`).

Nothing below this module looks a plugin up (no registry, no `importlib`, no `pkgutil`:
tests/unit/test_architecture.py fails on any), so every entry point calls `assemble()` first:
the CLI (once a command runs), the daemon, `make docs` and the tests' conftest. A list here that misses a
module of the plugin folders fails tests/unit/test_plugins_list.py, which reads the folders.
docs/architecture.md has the checklists (what to add here for a new probe, detector, channel).
"""

from __future__ import annotations

from types import ModuleType
from typing import Tuple, Type

import watchdog.alerting.deliver.channels as channels
import watchdog.config.schema as schema
import watchdog.config.sections.alerting as alerting_section
import watchdog.core.rulecatalog as rulecatalog
import watchdog.detectors as detectors
import watchdog.metrics.catalog as metric_catalog
import watchdog.probes as probes
import watchdog.summaries as summaries
from watchdog.alerting.deliver.channels import dingtalk, feishu, slack, webhook, wecom
from watchdog.alerting.deliver.channels.base import Channel
from watchdog.detectors import core as core_detector
from watchdog.detectors import links as links_detector, pace as pace_detector, subhealth as subhealth_detector
from watchdog.detectors import delivery as delivery_detector, restarts as restarts_detector
from watchdog.detectors import (kernel as kernel_detector, liveness as liveness_detector,
                                log_health as log_health_detector, logs as logs_detector,
                                npu as npu_detector, npu_smi as npu_smi_detector,
                                paths as paths_detector, selfstate as selfstate_detector,
                                stall as stall_detector)
from watchdog.metrics import alerting as alerting_metrics
from watchdog.metrics import clock as clock_metrics
from watchdog.metrics import links as links_metrics, pace as pace_metrics, subhealth as subhealth_metrics
from watchdog.metrics import (core as core_metrics, discovery as discovery_metrics,
                              http as http_metrics, kernel as kernel_metrics,
                              liveness as liveness_metrics, logs as logs_metrics,
                              npu as npu_metrics, snapshots as snapshot_metrics,
                              trends as trend_metrics)
from watchdog.probes import command, discovered_logs, heartbeat, kernel, links, npu, process, subhealth
from watchdog.summaries import heartbeat as heartbeat_summary
from watchdog.summaries import logs as logs_summary, npu as npu_summary, process as process_summary

#: Probe modules (`ORDER`, `build(ctx)`, `SECTION`); scheduled in `ORDER`, not in this order.
PROBE_MODULES: Tuple[ModuleType, ...] = (process, heartbeat, npu, discovered_logs, kernel, links, subhealth, command)

#: Detector modules (`detect`, `TRIGGERS`, `RULES`); they run, and the rule catalog lists their
#: rules, in module-name order.
DETECTOR_MODULES: Tuple[ModuleType, ...] = (
    core_detector, kernel_detector, liveness_detector, log_health_detector, logs_detector,
    npu_detector, npu_smi_detector, paths_detector, selfstate_detector, stall_detector,
    links_detector, pace_detector, subhealth_detector, restarts_detector, delivery_detector,
)

#: Summary modules (`PROBE`, `Summary`): what the detectors read of a probe's past rounds.
SUMMARY_MODULES: Tuple[ModuleType, ...] = (heartbeat_summary, logs_summary, npu_summary, process_summary)

#: Metric feature modules (`ORDER`, `METRICS`, `samples`); the table follows `ORDER`.
METRIC_MODULES: Tuple[ModuleType, ...] = (
    core_metrics, clock_metrics, liveness_metrics, npu_metrics, trend_metrics, logs_metrics, kernel_metrics,
    alerting_metrics, snapshot_metrics, http_metrics, discovery_metrics,
    links_metrics, pace_metrics, subhealth_metrics,
)

#: Metric modules (of `METRIC_MODULES` or `PROBE_METRIC_MODULES`) that also declare
#: `evaluate(view, config)`: values that need a detector pass's judgement, computed once per pass.
METRIC_EVALUATORS: Tuple[ModuleType, ...] = (trend_metrics, pace_metrics)

#: Probe modules that declare metrics of their own (`METRICS`, `samples`): their rows follow the
#: feature modules', in probe `ORDER`.
PROBE_METRIC_MODULES: Tuple[ModuleType, ...] = ()

#: Channel classes, one per vendor `type`.
CHANNELS: Tuple[Type[Channel], ...] = (
    feishu.FeishuChannel, slack.SlackChannel, dingtalk.DingTalkChannel, wecom.WeComChannel,
    webhook.WebhookChannel, webhook.AlertmanagerChannel,
)


def _by_order(modules: Tuple[ModuleType, ...]) -> Tuple[ModuleType, ...]:
    return tuple(sorted(modules, key=lambda m: (m.ORDER, m.__name__)))


def _by_name(modules: Tuple[ModuleType, ...]) -> Tuple[ModuleType, ...]:
    return tuple(sorted(modules, key=lambda m: m.__name__))


_assembled = False


def assemble() -> None:
    """Hand every declaration down (see the module's docstring). Runs at this module's import;
    the entry points call it too, so what they rely on is written where they start (a second
    call does nothing)."""
    global _assembled
    if _assembled:
        return
    _assembled = True
    ordered_probes = _by_order(PROBE_MODULES)
    # The channels' config models first: installing the probe sections rebuilds the config root,
    # which then takes in the union of the vendors' models.
    alerting_section.install_channel_models([c.config_model for c in channels.install(CHANNELS).values()])
    schema.install_probe_sections([m.SECTION for m in ordered_probes])
    ordered_detectors = _by_name(DETECTOR_MODULES)
    rulecatalog.install([(m.__name__, m.RULES) for m in ordered_detectors])
    detectors.install([detectors.DetectorPlugin(m.__name__, m.detect, tuple(m.TRIGGERS))
                       for m in ordered_detectors])
    summaries.install({m.PROBE: m.Summary for m in _by_name(SUMMARY_MODULES)})
    probes.install(ordered_probes)
    metric_catalog.install(_by_order(METRIC_MODULES) + _by_order(PROBE_METRIC_MODULES),
                           _by_order(METRIC_EVALUATORS))


assemble()
