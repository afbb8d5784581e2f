"""Restarts of a worker group, as the launcher's agent says them: one restart per line.

Why a parser of its own: a restart is an event to count (per job and cause), not a failure line
to hold; the agent's failure line (`launcher_exit_report`) says a worker failed, this says how
many times the agent has started the group again. The restart number is `max - left + 1`.
Pure, linear-time (no nested repetition; lines cut to 8 KiB first).

Known wordings, by launcher (each from the launcher's own source):

- torch elastic (torchrun, `torch.distributed.run`; pytorch `torch/distributed/elastic/agent/
  server/api.py`, `SimpleElasticAgent._invoke_run`): `[default] Worker group FAILED. 2/3 attempts
  left; will restart worker group`, also `UNHEALTHY`; logger `torch.distributed.elastic.agent.
  server.api`.
- DeepSpeed's elastic agent (`deepspeed --elastic_training`, class `DSElasticAgent`,
  microsoft/DeepSpeed `deepspeed/elasticity/elastic_agent.py`, commit 38327e07, 2025-02): the
  same sentence from its own `_invoke_run`; it also restarts when a peer node left the
  rendezvous while its own workers are fine, and then says `Worker group HEALTHY. N/M attempts
  left; will restart worker group` (counted against its `max_restarts`, which its launcher sets
  to 100); logger `deepspeed.elasticity.elastic_agent`. Its plain launcher
  (`deepspeed.launcher.launch`) and `--autotuning` never restart: the launcher kills the other
  ranks and exits with the failing rank's code; autotuning launches one experiment after another.
- MindSpore msrun (mindspore-ai/mindspore `mindspore/python/mindspore/parallel/cluster/run.py`
  and `process_entity/_api.py`, both the 2023 version and the later one with `--rank_table_file`
  and `--sim_level`): no restart option and no restart line; a failed worker ends the job
  (`Worker process N exit with exception.`, `There's worker exits with exception, kill all other
  workers.`); its `stop_and_restart` is called by nothing. MindCluster's process-level
  rescheduling restarts processes from outside the job; no public wording of it in the job's own
  log was found.

Not restarts: `Detected N new nodes from group_rank=G; will restart worker group` (a scale-up;
both agents say it does not count as a retry), `worker group successfully finished`, a
`--max-restarts`/`max_restarts` option or environment variable, `0/3 attempts left` without the
restart (the agent gives up instead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_AGENT = re.compile(r"Worker group (FAILED|UNHEALTHY|HEALTHY)\. (\d{1,6})/(\d{1,6}) attempts left; will restart worker group")
#: DeepSpeed's agent names itself in its logger; torch elastic never restarts a HEALTHY group.
_DEEPSPEED = re.compile(r"deepspeed|elastic_agent\.py|DSElasticAgent", re.IGNORECASE)


@dataclass(frozen=True)
class RestartLine:
    """One restart the agent announced: its number (1 for the first) out of the allowed `limit`."""

    launcher: str
    number: int
    limit: int
    state: str


def parse_restart(line: str) -> Optional[RestartLine]:
    """The restart a line announces, or None. Lines are cut to 8 KiB first (bounded work)."""
    text = line[:8192]
    m = _AGENT.search(text)
    if m is None:
        return None
    left, limit = int(m.group(2)), int(m.group(3))
    if left < 1:
        return None
    state = m.group(1)
    deepspeed = state == "HEALTHY" or _DEEPSPEED.search(text, 0, m.start()) is not None
    return RestartLine("deepspeed" if deepspeed else "torchrun", max(1, limit - left + 1), limit, state)
