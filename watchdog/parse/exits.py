"""Exit statuses, understood once for every launcher: what a launcher's, shell's or IDE's report
line says about how a rank ended, and the one wording the messages use for it.

Why one module: torchrun says `exitcode: -9`, DeepSpeed `return code = -9`, an IDE `exit code 137
(interrupted by signal 9: SIGKILL)`, mpirun `exited on signal 9 (Killed)`, MPICH's `EXIT CODE: 137`, Slurm `task 3: Killed`,
and the kernel's process-events connector a wait status; each is the same fact, and a message must
name it the same way ("killed (signal 9)", never "OOM": only the kernel or a cgroup says a kill was
for memory). Pure: text in, records out; regexes are linear-time (no nested repetition).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

#: What a signal did to a process, as the messages say it.
SIGNAL_WORDS = {1: "hung up", 2: "interrupted", 4: "illegal instruction", 6: "aborted", 7: "bus error",
                8: "floating-point exception", 9: "killed", 11: "segmentation fault", 13: "broken pipe",
                15: "terminated"}
#: Signals that ask a process to stop (a scheduler's or operator's cancel): a job whose first
#: process ended by one of these was stopped, not failed.
STOP_SIGNALS = frozenset({1, 2, 15})
SIGNAL_WORDS_ZH = {1: "挂断", 2: "被中断", 4: "非法指令", 6: "异常中止", 7: "总线错误", 8: "浮点异常",
                   9: "被杀死", 11: "段错误", 13: "管道断开", 15: "被终止"}


@dataclass(frozen=True)
class ExitStatus:
    """How one process ended: an exit code (`code`) or a signal (`signal`); exactly one is set."""

    code: Optional[int] = None
    signal: Optional[int] = None

    @property
    def failed(self) -> bool:
        return self.signal is not None or bool(self.code)

    def words(self, lang: str = "en") -> str:
        """`killed (signal 9)`, `segmentation fault (signal 11)`, `exit status 1`, in English or Chinese."""
        if self.signal is not None:
            if lang == "zh":
                return f"{SIGNAL_WORDS_ZH.get(self.signal, '收到信号')}（信号 {self.signal}）"
            return f"{SIGNAL_WORDS.get(self.signal, 'signalled')} (signal {self.signal})"
        return f"退出码 {self.code}" if lang == "zh" else f"exit status {self.code}"


def from_wait_status(status: int) -> ExitStatus:
    """A waitpid(2)-style status word (what the kernel's process-events connector reports)."""
    sig = status & 0x7F
    return ExitStatus(signal=sig) if sig else ExitStatus(code=(status >> 8) & 0xFF)


def from_code(value: int) -> ExitStatus:
    """A launcher's number: negative is a signal (torchrun, DeepSpeed, Python's subprocess), a
    shell's 128+N is signal N, anything else an exit code."""
    if value < 0:
        return ExitStatus(signal=-value)
    if 128 < value <= 128 + 64:
        return ExitStatus(signal=value - 128)
    return ExitStatus(code=value)


@dataclass(frozen=True)
class ExitReport:
    """A report line's facts: which launcher, which rank (as the launcher numbers it) or pid, and
    how it ended."""

    launcher: str
    status: ExitStatus
    rank: Optional[str] = None
    pid: Optional[int] = None

    def who(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        return f"pid {self.pid}" if self.pid is not None else "a process"

    def words(self, lang: str = "en") -> str:
        if lang == "zh":
            who = f"rank {self.rank}" if self.rank is not None else (
                f"进程 {self.pid}" if self.pid is not None else "某进程")
            return f"{who} {self.status.words('zh')}（{self.launcher} 报告）"
        return f"{self.who()} {self.status.words()} ({self.launcher}'s report)"


#: The codes MPICH's Hydra prints for a process that died on a signal: the signal's own number.
HYDRA_SIGNAL_CODES = frozenset({4, 6, 7, 8, 9, 11})


def _hydra_code(value: int) -> ExitStatus:
    return ExitStatus(signal=value) if value in HYDRA_SIGNAL_CODES else from_code(value)


def _int(s: Optional[str]) -> Optional[int]:
    return int(s) if s is not None else None


_Parser = Tuple[str, "re.Pattern[str]", Callable[["re.Match[str]"], Tuple[Optional[str], Optional[int], ExitStatus]]]

_PARSERS: Tuple[_Parser, ...] = (
    ("mpirun", re.compile(r"(?:mpirun|mpiexec|prterun) noticed that process rank (\d{1,7}) with PID (\d{1,10}) "
                          r"on node \S{1,255} exited on signal (\d{1,2})"),
     lambda m: (m.group(1), int(m.group(2)), ExitStatus(signal=int(m.group(3))))),
    ("torchrun", re.compile(r"failed \(exitcode: ?(-?\d{1,3})\) local_rank: ?(\d{1,7}) \(pid: ?(\d{1,10})\)"),
     lambda m: (m.group(2), int(m.group(3)), from_code(int(m.group(1))))),
    # The elastic agent's error summary (ChildFailedError): `exitcode  : -9 (pid: 4242)`.
    ("torchrun", re.compile(r"exitcode {0,8}: ?(-?\d{1,3}) \(pid: ?(\d{1,10})\)"),
     lambda m: (None, int(m.group(2)), from_code(int(m.group(1))))),
    ("torchrun", re.compile(r"Signal (\d{1,2}) \(SIG[A-Z0-9]{1,8}\) received by PID (\d{1,10})"),
     lambda m: (None, int(m.group(2)), ExitStatus(signal=int(m.group(1))))),
    ("deepspeed", re.compile(r"--local_rank=(\d{1,7})'.{0,4000}? exits with return code = (-?\d{1,3})"),
     lambda m: (m.group(1), None, from_code(int(m.group(2))))),
    ("deepspeed", re.compile(r"exits with return code = (-?\d{1,3})"),
     lambda m: (None, None, from_code(int(m.group(1))))),
    ("slurm", re.compile(r"srun: error: \S{1,255}: tasks? ([0-9,-]{1,64}): (?:Exited with exit code (\d{1,3})|"
                         r"(Killed|Terminated|Segmentation fault|Aborted|Bus error))"),
     lambda m: (m.group(1), None, ExitStatus(code=int(m.group(2))) if m.group(2) else
                ExitStatus(signal={"Killed": 9, "Terminated": 15, "Segmentation fault": 11, "Aborted": 6,
                                   "Bus error": 7}[m.group(3)]))),
    ("ide", re.compile(r"exit code (\d{1,3}) \S{0,2}interrupted by signal (\d{1,2})"),
     lambda m: (None, None, ExitStatus(signal=int(m.group(2))))),
    ("horovod", re.compile(r"Process (\d{1,7}) exit with status code (\d{1,3})"),
     lambda m: (m.group(1), None, from_code(int(m.group(2))))),
    # MPICH's Hydra box (`=   EXIT CODE: 139`, `YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault
    # (signal 11)`): the status of the process that ended the job; the box names no rank. Hydra prints a signal's
    # number as the code (`EXIT CODE: 9` above `Killed (signal 9)`), so 4, 6, 7, 8, 9 and 11 read as signals, as the
    # log rules read them (an `exit(9)` is read as a kill).
    ("mpich", re.compile(r"^=\s{1,8}EXIT CODE: (\d{1,3})\s*$"),
     lambda m: (None, None, _hydra_code(int(m.group(1))))),
    ("mpich", re.compile(r"TERMINATED WITH THE EXIT STRING: [^(\n]{1,60}\(signal (\d{1,2})\)"),
     lambda m: (None, None, ExitStatus(signal=int(m.group(1))))),
    # Ray Jobs' status of a failed entrypoint (`Job entrypoint command failed with exit code 1, ...`).
    ("ray", re.compile(r"Job entrypoint command failed with exit code (\d{1,3})"),
     lambda m: (None, None, from_code(int(m.group(1))))),
    ("shell", re.compile(r": line \d{1,7}: +(\d{1,10}) (Killed|Terminated|Segmentation fault|Aborted)"),
     lambda m: (None, int(m.group(1)), ExitStatus(signal={"Killed": 9, "Terminated": 15, "Segmentation fault": 11,
                                                          "Aborted": 6}[m.group(2)]))),
)


def parse_exit(line: str) -> Optional[ExitReport]:
    """The exit report a line carries, or None. Lines are cut to 8 KiB first (bounded work)."""
    text = line[:8192]
    for launcher, rx, build in _PARSERS:
        m = rx.search(text)
        if m is not None:
            rank, pid, status = build(m)
            return ExitReport(launcher, status, rank, pid)
    return None
