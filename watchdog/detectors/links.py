"""Link-health detectors: pure functions over the links probe's latest round.

Rules: `link_down` (the NPU's network port read down twice in a row: one page naming the chip,
the port and the job that holds the chip), `link_flapping` (`flap_count` downs within
`flap_window`), `optics_degraded` (an optical module's received or sent power or its SNR below
the thresholds while the link is still up: the warning before the link drops).

Why 3 flaps in 10 minutes: one flap is a switch reboot or a re-cabled neighbour and passes; HCCL
turns a flap during a collective into an ERROR CQE (its retransmission budget is seconds), so a
link that drops every few minutes will break the job at its next unlucky moment. Huawei's link
diagnosis calls 3 bad samples within 11 minutes a fault, and the device plugin isolates a card
after 5 link downs in 24 h; 3 within 10 minutes warns on that scale, before the isolation.

A chip's job is the one `watchdog.detectors.jobs.chip_owners` finds (npu-smi's process table,
else the ranks' device variables); a port no job holds gives a node finding, without a job label.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from watchdog.config.schema import Config
from watchdog.core.findings import HOLDER, JOB_LABEL, Finding
from watchdog.core.rulecatalog import JOB_LABELS, Inhibits, Rule, probe_wait
from watchdog.core.state import StateView
from watchdog.detectors.jobs import latest_chip_owners
from watchdog.detectors.series import blind_reason, fmt_age
from watchdog.parse.hccn import mw_to_dbm
from watchdog.probes.links import LINKS, LinkObservation, LinksProbeConfig, PortReading, port_labels
from watchdog.probes.links import SECTION as LINKS_CONFIG

HINT_DOWN = (
    "The NPU's RoCE port has no link: HCCL traffic through it stops and the job's collectives will "
    "time out (ERROR CQE, EI0013). Action: isolate now - take the node out of the job's next placement. "
    "First check: `hccn_tool -i <npu> -link_stat -g` for the time it went down, `-optical -g` for the "
    "module's receive power and Los/LoL flags, the cable and the switch port named by `-lldp -g`."
)
HINT_FLAP = (
    "The port keeps losing its link and getting it back. A collective that runs during a flap fails "
    "with ERROR CQE, so the job will fail at an unlucky moment. Action: drain after the job - reseat "
    "or replace the cable or optical module before the next job. First check: `hccn_tool -i <npu> "
    "-link_stat -g` (times of each change), `-optical -g` (power and SNR per lane), the switch port's log."
)
HINT_OPTICS = (
    "The optical module's power or signal quality fell below the threshold while the link is still "
    "up: links drop when it falls further. Action: watch, and plan a module or fibre replacement "
    "(drain after the job if it keeps falling). First check: `hccn_tool -i <npu> -optical -g` (Rx/Tx "
    "power per lane against the module's own thresholds, SNR), clean or reseat the fibre."
)


def _labels(config: Config, p: PortReading, owners: Dict[Tuple[int, int], str],
            chip_map: Dict[int, Tuple[int, int]]) -> Dict[str, str]:
    own = port_labels(p, chip_map)
    labels = {**config.base_labels, **own}
    job = owners.get((int(own["npu"]), int(own["chip"])))
    if job is not None:
        labels[JOB_LABEL] = job
    return labels


def _where(labels: Dict[str, str]) -> str:
    job = labels.get(JOB_LABEL)
    held = f"; job {job} holds the chip" if job else "; no job holds the chip"
    return f"NPU {labels['npu']} chip {labels['chip']} port {labels['port']}{held}"


def _neighbour(p: PortReading) -> Dict[str, str]:
    """The switch and port this NIC is cabled to (LLDP), where the probe has read it: the first
    place to look at for a dead or flapping link."""
    if p.lldp is None:
        return {}
    return {"switch": p.lldp.system, "switch_port": p.lldp.port}


def _down(view: StateView, cfg: LinksProbeConfig, p: PortReading, labels: Dict[str, str]) -> Optional[Finding]:
    if p.link_up is not False or p.down_reads < 2:
        return None
    since = p.down_since if p.down_since is not None else view.now
    return Finding(
        rule="link_down", severity="critical",
        summary=f"RoCE link down for {fmt_age(view.now - since)}: {_where(labels)}",
        labels=labels, hint=HINT_DOWN, value="down", since=since,
        details={"device": p.device, "port": p.port, "down_reads": p.down_reads, "action": "isolate_now",
                 "down_count": p.down_count, "net_health": p.net_health, **_neighbour(p)})


def _flaps(view: StateView, cfg: LinksProbeConfig, p: PortReading, labels: Dict[str, str]) -> Optional[Finding]:
    window = float(cfg.flap_window)
    recent = [t for t in p.downs if view.now - window <= t <= view.now + 5]
    if len(recent) < cfg.flap_count:
        return None
    return Finding(
        rule="link_flapping", severity="warning",
        summary=f"RoCE link went down {len(recent)} times in {fmt_age(window)}: {_where(labels)}",
        labels=labels, hint=HINT_FLAP, value=f"{len(recent)} flaps", since=recent[0],
        details={"device": p.device, "port": p.port, "flaps": len(recent), "window_seconds": window,
                 "threshold": cfg.flap_count, "down_times": recent[-10:], "action": "drain_after_job",
                 **_neighbour(p)})


def optics_problems(cfg: LinksProbeConfig, p: PortReading) -> List[str]:
    """What is wrong with the port's optical module (empty when nothing, or no module)."""
    o = p.optical
    if o is None or not o.present:
        return []
    out = []
    for lane, mw in o.rx_mw:
        dbm = mw_to_dbm(mw)
        if dbm < cfg.rx_power_min_dbm or (o.rx_low_mw is not None and mw < o.rx_low_mw):
            out.append(f"lane {lane} receives {dbm:.1f} dBm ({mw:.4f} mW)")
    for lane, mw in o.tx_mw:
        dbm = mw_to_dbm(mw)
        if dbm < cfg.tx_power_min_dbm or (o.tx_low_mw is not None and mw < o.tx_low_mw):
            out.append(f"lane {lane} sends {dbm:.1f} dBm ({mw:.4f} mW)")
    if o.snr_db is not None and o.snr_db < cfg.snr_min_db:
        out.append(f"SNR {o.snr_db:.1f} dB")
    return out


def _optics(view: StateView, cfg: LinksProbeConfig, p: PortReading, labels: Dict[str, str]) -> Optional[Finding]:
    if p.link_up is False:
        return None  # the link is gone: link_down says so
    problems = optics_problems(cfg, p)
    if not problems:
        return None
    return Finding(
        rule="optics_degraded", severity="warning",
        summary=f"optical module degrading ({'; '.join(problems[:3])}): {_where(labels)}",
        labels=labels, hint=HINT_OPTICS, value=problems[0],
        details={"device": p.device, "port": p.port, "problems": problems, "rx_min_dbm": cfg.rx_power_min_dbm,
                 "tx_min_dbm": cfg.tx_power_min_dbm, "snr_min_db": cfg.snr_min_db, "action": "watch"})


def detect(view: StateView, config: Config) -> List[Finding]:
    cfg = LINKS_CONFIG.of(config)
    if not cfg.enabled or blind_reason(view, "links"):
        return []
    sample = view.latest(LINKS)
    obs = sample.value if sample is not None else None
    if not isinstance(obs, LinkObservation) or obs.absent:
        return []
    owners, chip_map = latest_chip_owners(view)
    out: List[Finding] = []
    for p in obs.ports:
        labels = _labels(config, p, owners, chip_map)
        for rule in (_down, _flaps, _optics):
            f = rule(view, cfg, p, labels)
            if f is not None:
                out.append(f)
    return [replace(f, context=HOLDER) for f in out]  # the card fails, whoever holds it


TRIGGERS = ("links",)

_LINKS = lambda c, f: probe_wait(c, "links")  # noqa: E731
#: A dead port explains the job's collective timeouts and the stall that follows.
_LINK_SYMPTOMS = (
    Inhibits(("stall", "log_hccl", "npu_idle", "heartbeat_stale", "heartbeat_no_progress", "throughput_drop",
              "rank_straggler")),
    Inhibits(("link_flapping", "optics_degraded"), JOB_LABELS + ("npu", "chip")),
)

RULES = (
    Rule("link_down", "critical", observes=("links",), inhibits=_LINK_SYMPTOMS, warmup=_LINKS, title="NPU network link down"),
    Rule("link_flapping", "warning", observes=("links",), warmup=_LINKS, title="NPU network link flapping"),
    Rule("optics_degraded", "warning", observes=("links",), default_for=30.0,
         warmup=lambda c, f: float(LINKS_CONFIG.of(c).detail_interval) * 2 + _LINKS(c, f), title="NPU optical module degrading"),
)
