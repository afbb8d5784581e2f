"""Messages for rendering tests: alerts and notifications shaped like the engine's, the largest
realistic incident (every rule, 64 ranks, 16 NPUs, long CJK log lines), delivery to a real
receiver on 127.0.0.1, and each platform's documented limits.

Limits (see docs/alerting.md "Messages"): Feishu custom bot body 20 KB; Slack 50 blocks, 3000
characters per section, 150 per header, 40,000 for the top-level text, 10 context elements;
WeCom markdown 4096 bytes; DingTalk markdown 4000 bytes (no documented limit; a common client cap).
"""

from __future__ import annotations

import re
import time

import yaml

from tests.fakes.receivers import Receiver
from watchdog.alerting.deliver.channels import build_channel
from watchdog.config.load import load_config_text
from watchdog.core.rulecatalog import names as rule_names

ALL_KINDS = ["feishu", "slack", "dingtalk", "wecom", "webhook", "alertmanager"]
CHAT_KINDS = ["feishu", "slack", "dingtalk", "wecom"]
NPU_RULES = {"npu_idle", "npu_busy_hang", "npu_low_util", "hbm_growth", "npu_unhealthy", "npu_missing",
             "npu_temperature"}
RANK_PREFIXES = ("rank_", "heartbeat_", "loss_", "log_", "throughput_")
MEGATRON_NAN = (" iteration     5426/  100000 | consumed samples:     694528 | elapsed time per iteration (ms): "
                "3120.4 | learning rate: 2.9E-05 | lm loss: nan | loss scale: 1.0 | grad norm: nan |")


def channel(kind, url, language=None, **alerting):
    ch = {"type": kind, "name": f"c-{kind}", "url": url, "min_severity": "info"}
    if language:
        ch["language"] = language
    doc = {"alerting": {"channels": [ch], "max_log_lines": 10, **alerting}}
    cfg = load_config_text(yaml.safe_dump(doc))
    return build_channel(cfg.alerting.channels[0], cfg.alerting)


def alert(rule, labels, now, evidence=(), summary=None, severity="critical", hint=None):
    return {"fp": f"{rule}-{sorted(labels.items())}", "rule": rule, "severity": severity, "status": "firing",
            "summary": summary or f"{rule} on {labels}", "labels": {"host": "node-01", "training_job": "llama",
                                                                    **labels},
            "hint": hint if hint is not None else f"Hint for {rule}: " + "check the node " * 40,
            "value": "3 matching lines", "since": now - 180, "starts_at": now - 170, "ends_at": None,
            "evidence": list(evidence), "snapshot": f"/var/lib/npu-watchdog/snapshots/{rule}.tar.gz",
            "dashboard": "https://grafana.example/d/npu-watchdog/npu-watchdog?var-host=node-01"}


def note(alerts, kind="firing"):
    return {"kind": kind, "status": "resolved" if kind == "resolved" else "firing", "ikey": "ikey-64",
            "created": time.time(), "group": {"host": "node-01", "training_job": "llama"}, "alerts": alerts}


def incident_64():
    """64 ranks, 16 NPUs, every rule; long hostile-ish CJK log lines (bytes, not characters)."""
    now = time.time()
    lines = [f"[rank {{r}}] 错误 E{i:03d} " + "训练日志" * 60 + " <!here> @all" for i in range(10)]
    out = []
    for rule in rule_names():
        if rule in NPU_RULES:
            places = [{"npu": str(n), "chip": "0"} for n in range(16)]
        elif rule.startswith(RANK_PREFIXES):
            places = [{"rank": str(r)} for r in range(64)]
        else:
            places = [{"probe": "npu"}]
        for p in places:
            ev = [ln.replace("{r}", p.get("rank", "-")) for ln in lines]
            out.append(alert(rule, p, now, evidence=ev, summary=f"{rule}: " + "摘要" * 140))
    return note(out)


def nan_on_8_ranks():
    """What one NaN on 8 ranks became: a log_nan and a loss_nan alert per rank (16 alerts)."""
    now = time.time()
    hint = "NaN at iteration 5426: a bad batch or an exploding gradient; resume from the last checkpoint."
    out = []
    for r in range(8):
        out.append(alert("log_nan", {"rank": str(r), "log_rule": "nan_loss"}, now, hint=hint,
                         evidence=[f"[rank{r}]" + MEGATRON_NAN] * 5, summary=f"NaN loss (rank {r}): " + MEGATRON_NAN))
        out.append(alert("loss_nan", {"rank": str(r)}, now, hint=hint,
                         summary=f"rank {r} loss not finite at step 5426 (heartbeat)"))
    return note(out)


def deliver(kind, body, language=None, **alerting):
    with Receiver(kind) as rx:
        v = channel(kind, rx.url, language, **alerting).deliver(body)
        assert v.ok, v.line()
        [req] = rx.wait_for(1)
        return req


def chat_text(kind, req) -> str:
    j = req.json
    if kind == "feishu":
        return "\n".join(e.get("content", "") for e in j["card"]["body"]["elements"] if e["tag"] == "markdown")
    if kind == "slack":  # the mrkdwn as sent (the demo's terminal wrapping would add lines)
        return "\n".join([b["text"]["text"] for b in j["blocks"] if b["type"] in ("header", "section")]
                         + [e["text"] for b in j["blocks"] if b["type"] == "context" for e in b["elements"]])
    return j["markdown"]["text"] if kind == "dingtalk" else j["markdown"]["content"]


def check_limits(kind, req):
    j = req.json
    if kind == "feishu":
        assert len(req.body) <= 20 * 1024, len(req.body)
    elif kind == "slack":
        blocks = j["blocks"]
        assert len(blocks) <= 50 and len(j["text"]) <= 40000
        assert blocks[0]["type"] == "header" and len(blocks[0]["text"]["text"]) <= 150
        for b in blocks:
            if b["type"] == "section":
                assert len(b["text"]["text"]) <= 3000
            if b["type"] == "context":
                assert len(b["elements"]) <= 10 and all(len(e["text"]) <= 2000 for e in b["elements"])
    elif kind == "dingtalk":
        assert len(j["markdown"]["text"].encode("utf-8")) <= 4000
    elif kind == "wecom":
        assert len(j["markdown"]["content"].encode("utf-8")) <= 4096


# -- language ------------------------------------------------------------------------------
#: What a Chinese message may keep in English: labels, paths, commands, log excerpts (stripped
#: below) and the terms Ascend's Chinese documentation itself writes in English
#: (docs/glossary.zh.md).
KEPT_TERMS = {"npu", "hbm", "hccl", "cann", "ai", "core", "rank", "loss", "nan", "inf", "oom", "plog", "checkpoint",
              "scale", "bf16", "python", "traceback", "terminate", "pid", "id", "utc", "smi", "ecc", "pcie", "aer",
              "ntp", "chrony", "glob", "micro", "batch", "dataloader", "num_workers", "pin_memory", "sigstop",
              "npu-watchdog", "npu-smi", "grad_norm", "here", "all", "nfs", "cpu", "task", "barrier", "done",
              "core dump", "dump", "alarm", "critical", "ok", "contrib", "faulthandler", "segmentation", "fault",
              "eta", "s", "m", "h"}
_CODE_BLOCK = re.compile(r"```.*?```", re.S)
_QUOTED = re.compile(r"(?m)^>.*$")
_INLINE = re.compile(r"`[^`\n]*`")
_URL = re.compile(r"https?://\S+")
_PATH = re.compile(r"(?<![\w])(?:~|\.{0,2})/[\w./~*<>-]+")
_IDENT = re.compile(r"[A-Za-z0-9]*[_\-=.:/0-9][\w\-=.:/]*")  # labels, rule names, host/job names, numbers
_WORD = re.compile(r"[A-Za-z]{2,}")
CJK = re.compile(r"[\u4e00-\u9fff]")


def english_left(text: str, keep: frozenset = frozenset()) -> list:
    """The English words of a message once labels, paths, commands, links, log excerpts and the
    kept terms are set aside: empty for a message written in Chinese."""
    for pat in (_CODE_BLOCK, _QUOTED, _INLINE, _URL, _PATH, _IDENT):
        text = pat.sub(" ", text)
    return [w for w in _WORD.findall(text) if w.lower() not in KEPT_TERMS and w not in keep]
