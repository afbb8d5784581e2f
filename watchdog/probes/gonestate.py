"""The ranks a discovered job lost while its peers run, kept across a restart of the daemon.

A rank that exits while its peers stay (blocked in a collective until HCCL's timeout, as real
ranks are under a launcher that does not tear them down) is paged missing, naming its pid. A
restarted daemon discovers the job again from /proc: the peers are there, the lost rank is not,
and without this file it would know only that the rank "never appeared" (a finding without the
pid, so another alert: a second page, and a false RESOLVED for the first). So the process probe
writes its lost ranks here whenever that set changes, and a new run takes them back for a job it
finds again with one of the same rank processes (pid and start time): the same run of the job,
not a new one under the same name.

Read once at start; a damaged file is set aside (`statefiles.read_json`) and nothing is restored.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Iterable, List, Optional, Tuple

from watchdog.host.procstat import same_start
from watchdog.observations import ProcessInfo
from watchdog.service import statefiles

log = logging.getLogger(__name__)

STATE_FILE = "process-gone.json"
STATE_VERSION = 1
#: Jobs kept at most, and lost ranks per job (a node runs a few jobs; a job loses a few ranks).
MAX_JOBS, MAX_GONE = 64, 4096
#: Rounds the saved ranks of jobs not found again are kept in the file (a restart right after a
#: restart must not lose them before discovery found their job).
KEEP_UNTAKEN_ROUNDS = 30

Identity = Tuple[int, Optional[float]]


def _peers(saved: Dict[str, Any]) -> Dict[int, float]:
    out: Dict[int, float] = {}
    for p in saved.get("peers") or ():
        if isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and isinstance(p[1], (int, float)):
            out[p[0]] = float(p[1])
    return out


def _rows(saved: Dict[str, Any]) -> List[Tuple[int, float, ProcessInfo]]:
    out = []
    for row in (saved.get("gone") or ())[:MAX_GONE]:
        info = _info(row.get("info") if isinstance(row, dict) else None)
        left = row.get("left_at") if isinstance(row, dict) else None
        if info is not None and info.rank is not None and isinstance(left, (int, float)):
            out.append((info.rank, float(left), info))
    return out


def _info_doc(info: ProcessInfo) -> Dict[str, Any]:
    return {"pid": info.pid, "rank": info.rank, "state": info.state, "create_time": info.create_time,
            "name": info.name, "cmdline": list(info.cmdline), "job": info.job, "npu": info.npu}


def _info(row: Any) -> Optional[ProcessInfo]:
    """A saved rank, or None when the row is not one this module wrote."""
    if not isinstance(row, dict):
        return None
    pid, rank, created = row.get("pid"), row.get("rank"), row.get("create_time")
    npu, cmd = row.get("npu"), row.get("cmdline")
    if not (isinstance(pid, int) and pid > 0 and isinstance(rank, int) and rank >= 0
            and isinstance(created, (int, float)) and (npu is None or isinstance(npu, int))
            and isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)):
        return None
    return ProcessInfo(pid=pid, rank=rank, state=str(row.get("state", "gone"))[:32], create_time=float(created),
                       cpu_seconds=0.0, cpu_delta=None, rss_bytes=0, threads=0, cmdline=tuple(cmd[:256]),
                       name=str(row.get("name", ""))[:256], job=str(row.get("job") or "")[:256] or None, npu=npu)


class GoneRanks:
    """The lost ranks of each job, as saved by the last run (`take`) and as this run sees them
    (`save`); a failed save is said once per episode and shown in the probe's status."""

    def __init__(self, state_dir: Optional[str]):
        self.path = os.path.join(state_dir, STATE_FILE) if state_dir else None
        self._saved: Dict[str, Dict[str, Any]] = {}
        self._written: Optional[Any] = None
        self._rounds = 0
        self._episode = statefiles.SaveEpisode("the ranks lost while their peers run", self.path or "", log,
                                               "; a restart would page them again")
        if self.path is not None:
            data = statefiles.read_json(self.path, STATE_VERSION)
            jobs = data.get("jobs") if isinstance(data, dict) else None
            self._saved = {k: v for k, v in (jobs or {}).items() if isinstance(k, str) and isinstance(v, dict)}

    @property
    def error(self) -> Optional[str]:
        return self._episode.error

    def take(self, job: str, identities: Iterable[Identity]) -> List[Tuple[int, float, ProcessInfo]]:
        """The saved lost ranks of the run that one of `identities` (the rank processes of `job`
        found now) belonged to, as (rank, when it was seen gone, its record); each run's once.
        Looked up by `job`'s name first, then by the processes alone (a name given anew)."""
        ids = [(pid, float(t)) for pid, t in identities if t is not None]
        for name in [job] * (job in self._saved) + [n for n in self._saved if n != job]:
            peers = _peers(self._saved[name])
            # The same process: its pid, and its start time (read in another run of the daemon).
            if any(pid in peers and same_start(peers[pid], t) for pid, t in ids):
                return _rows(self._saved.pop(name))
        return []

    def save(self, jobs: Dict[str, Tuple[Iterable[Identity], Dict[int, float]]],
             gone: Dict[Tuple[str, int], ProcessInfo]) -> None:
        """Write the lost ranks when they changed since the last write (a rare event, not a round's)."""
        if self.path is None:
            return
        doc: Dict[str, Any] = {}
        for (name, rank), info in sorted(gone.items()):
            if name not in jobs or len(doc) >= MAX_JOBS and name not in doc:
                continue
            pids, left = jobs[name]
            entry = doc.setdefault(name, {"peers": sorted([p, t] for p, t in pids if t is not None), "gone": []})
            if len(entry["gone"]) < MAX_GONE and rank in left:
                entry["gone"].append({"left_at": left[rank], "info": _info_doc(info)})
        doc = {k: v for k, v in doc.items() if v["gone"]}
        self._rounds += 1
        if self._rounds <= KEEP_UNTAKEN_ROUNDS:
            for name, saved in list(self._saved.items())[:MAX_JOBS]:
                doc.setdefault(name, saved)
        if doc == self._written:
            return
        try:
            statefiles.write_json(self.path, {"version": STATE_VERSION, "data": {"jobs": doc}}, sync=False)
        except OSError as exc:
            self._episode.failed(exc)
            return
        self._episode.saved()
        self._written = doc
