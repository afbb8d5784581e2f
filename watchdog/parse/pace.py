"""The pace a training log states: which step a progress line reports and, where the trainer
prints it, how long a step took; and the lines that open a checkpoint or an evaluation.

Why: a job 20 % slower than it was costs as much as a fifth of the cluster, and nothing breaks.
The trainers already print their pace: Megatron-LM/MindSpeed `elapsed time per iteration (ms)`,
MindFormers `per_step_time: 1234ms`, MindSpore's TimeMonitor `per step time: 482.7 ms`; the others
(DeepSpeed `step=120`, HF's log dict with its `epoch`) print a counter whose rate is the pace.
Trainers time a step without the checkpoint save and the evaluation (Megatron stops its interval
timer around both), so a printed step time is phase-free; a counter's rate is not, and the pace
summary takes a median to keep one long gap out (watchdog.summaries.pace).

Pure and linear-time on untrusted text: fixed alternations, bounded repeats, bounded digits; a
line is cut to 4 kB before any regex runs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Optional

MAX_LINE = 4096

#: Megatron-LM's time stamp at the start of its iteration line: ` [2024-05-28 10:21:42] iteration ...`
#: (the trainer's local time, to the second).
_STAMP = re.compile(r"^\s{0,8}\[(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})\]")
#: Megatron-LM / MindSpeed: ` iteration      120/  100000 | ... | elapsed time per iteration (ms): 1234.5 |`
_MEGATRON_STEP = re.compile(r"\biteration\s{0,20}(\d{1,12})\s{0,4}/\s{0,20}\d{1,12}\s{0,4}\|")
_MEGATRON_TIME = re.compile(r"elapsed time per iteration \(ms\):\s{0,8}([0-9]{1,9}(?:\.[0-9]{1,6})?)")
#: MindFormers: `{ Epoch:[  1/  2], step:[   10/  125], loss: 2.345, per_step_time: 1234ms, ...`
_MINDFORMERS = re.compile(r"Epoch:\[\s{0,8}(\d{1,9})/\s{0,8}\d{1,9}\],\s{0,4}step:\[\s{0,8}(\d{1,12})/\s{0,8}(\d{1,12})\]")
_MINDFORMERS_TIME = re.compile(r"per_step_time:\s{0,4}([0-9]{1,9}(?:\.[0-9]{1,6})?)\s{0,2}ms")
#: MindSpore TimeMonitor: `epoch time: 60345.987 ms, per step time: 482.768 ms`
_MS_TIME = re.compile(r"per step time:\s{0,4}([0-9]{1,9}(?:\.[0-9]{1,6})?)\s{0,2}ms")
#: MindSpore LossMonitor: `epoch: 1 step: 120, loss is 1.23` (the step counts within the epoch:
#: the counter is epoch x EPOCH_UNIT + step, and the summary takes no step time across epochs).
_MS_STEP = re.compile(r"\bepoch:\s{0,4}(\d{1,6}),?\s{1,4}step:\s{0,4}(\d{1,9}),")
EPOCH_UNIT = 10_000_000
#: DeepSpeed: `[Rank 0] step=120, skipped=0, ...`, `steps: 120 loss: 1.23`
_DS_STEP = re.compile(r"\bsteps?[=:]\s{0,4}(\d{1,12})")
#: HF Trainer's log dict: `{'loss': 1.23, ..., 'epoch': 0.52}` (the epoch is the counter).
_HF_EPOCH = re.compile(r"'epoch':\s{0,4}([0-9]{1,9}(?:\.[0-9]{1,12})?)\}")

#: Lines that open a non-training phase: Megatron `saving checkpoint at iteration 100 to ...`,
#: MindSpore/MindFormers `Saving checkpoint`, HF `Saving model checkpoint to ...`; Megatron
#: `validation loss at iteration 100`, HF `***** Running Evaluation *****`, `Start evaluat...`.
_CHECKPOINT = re.compile(r"(?i)\bsaving (?:model )?checkpoint")
_EVAL = re.compile(r"(?i)\b(?:validation loss at|running evaluation|start(?:ing)? eval(?:uation)?\b|evaluating at)")
#: Lower-case literals one of which a phase line contains (a block without them is skipped).
PHASE_LITERALS = (b"checkpoint", b"validation loss", b"evaluation", b"evaluat")


@dataclass(frozen=True)
class PaceMark:
    """One progress line's pace: the trainer's counter (a step, or HF's fractional epoch) and the
    seconds per step it printed (None: the trainer prints none; the rate of `counter` is the
    pace). `phase` is set instead on a line that opens a checkpoint or an evaluation."""

    counter: Optional[float] = None
    step_seconds: Optional[float] = None
    #: "megatron", "mindformers", "mindspore", "deepspeed", "hf" (which format matched).
    kind: str = ""
    phase: Optional[str] = None
    #: When the trainer printed the line, by its own time stamp (epoch seconds, read as this
    #: node's local time); None without one. The summary trusts it only near the read time.
    stamp: Optional[float] = None


def _number(m: Optional["re.Match[str]"], group: int = 1) -> Optional[float]:
    return float(m.group(group)) if m else None


def parse_progress(line: str) -> Optional[PaceMark]:
    """The pace of one progress line (a line the progress matcher accepted), else None."""
    text = line[:MAX_LINE]
    m = _MEGATRON_STEP.search(text)
    if m:
        ms = _number(_MEGATRON_TIME.search(text))
        return PaceMark(float(m.group(1)), None if ms is None else ms / 1000.0, "megatron", stamp=_stamp(text))
    m = _MINDFORMERS.search(text)
    if m:
        epoch, step, per_epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
        ms = _number(_MINDFORMERS_TIME.search(text))
        return PaceMark(float(max(epoch - 1, 0) * per_epoch + step), None if ms is None else ms / 1000.0,
                        "mindformers")
    m = _MS_STEP.search(text)
    if m:
        ms = _number(_MS_TIME.search(text))
        return PaceMark(float(int(m.group(1)) * EPOCH_UNIT + int(m.group(2))), None if ms is None else ms / 1000.0,
                        "mindspore")
    m = _HF_EPOCH.search(text)
    if m:
        return PaceMark(float(m.group(1)), None, "hf")
    m = _DS_STEP.search(text)
    if m:
        return PaceMark(float(m.group(1)), None, "deepspeed")
    ms = _number(_MS_TIME.search(text))
    if ms is not None:
        return PaceMark(None, ms / 1000.0, "mindspore")
    return None


def _stamp(text: str) -> Optional[float]:
    """Epoch seconds of a leading `[YYYY-MM-DD HH:MM:SS]` in local time, else None."""
    m = _STAMP.match(text)
    if not m:
        return None
    y, mo, d, h, mi, se = (int(g) for g in m.groups())
    try:
        return time.mktime((y, mo, d, h, mi, se, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def parse_phase(line: str) -> Optional[str]:
    """"checkpoint" or "eval" when the line opens that phase, else None."""
    text = line[:MAX_LINE]
    if _CHECKPOINT.search(text):
        return "checkpoint"
    if _EVAL.search(text):
        return "eval"
    return None
