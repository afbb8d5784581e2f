"""Exit statuses understood once: every launcher's report line, one wording (both languages)."""

from __future__ import annotations

import pytest

from watchdog.parse.exits import ExitStatus, from_code, from_wait_status, parse_exit


@pytest.mark.parametrize("line, launcher, rank, words", [
    ("mpirun noticed that process rank 6 with PID 4242 on node n1 exited on signal 9 (Killed).", "mpirun", "6",
     "rank 6 killed (signal 9)"),
    ("E1201 torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -11) local_rank: 3 (pid: 77) "
     "of binary: /usr/bin/python3", "torchrun", "3", "rank 3 segmentation fault (signal 11)"),
    ("[2023-07-10 04:26:35,999] [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python3', '-u', 'trainCLM.py', "
     "'--local_rank=1', '--deepspeed', 'ds.json'] exits with return code = -11", "deepspeed", "1",
     "rank 1 segmentation fault (signal 11)"),
    ("[ERROR] [launch.py:321:sigkill_handler [xxx] exits with return code = 1", "deepspeed", None, "a process exit status 1"),
    ("srun: error: Orion-18-69: task 289: Bus error", "slurm", "289", "rank 289 bus error (signal 7)"),
    ("srun: error: taurusi2031: tasks 10-11: Exited with exit code 1", "slurm", "10-11", "rank 10-11 exit status 1"),
    ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", "ide", None, "a process killed (signal 9)"),
    ("Process finished with exit code 137 （interrupted by signal 9： SIGKILL）", "ide", None, "a process killed (signal 9)"),
    ("Process 3 exit with status code 134.", "horovod", "3", "rank 3 aborted (signal 6)"),
    ("./train.sh: line 1:  7364 Killed                  python3 train.py", "shell", None, "pid 7364 killed (signal 9)"),
    ("=   EXIT CODE: 139", "mpich", None, "a process segmentation fault (signal 11)"),
    ("=   EXIT CODE: 1", "mpich", None, "a process exit status 1"),
    ("=   EXIT CODE: 9", "mpich", None, "a process killed (signal 9)"),   # Hydra prints the signal's number
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)", "mpich", None, "a process killed (signal 9)"),
    ("Status message: Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):",
     "ray", None, "a process exit status 1"),
])
def test_every_launchers_report_names_the_rank_and_how_it_ended(line, launcher, rank, words):
    rep = parse_exit(line)
    assert rep is not None and rep.launcher == launcher and rep.rank == rank
    assert rep.words().startswith(words) and rep.words("zh")


def test_statuses_in_both_languages_and_from_every_encoding():
    assert ExitStatus(signal=9).words() == "killed (signal 9)" and ExitStatus(signal=9).words("zh") == "被杀死（信号 9）"
    assert ExitStatus(code=1).words("zh") == "退出码 1" and not ExitStatus(code=0).failed
    assert from_wait_status(9) == ExitStatus(signal=9) and from_wait_status(7 << 8) == ExitStatus(code=7)
    assert from_code(-6) == ExitStatus(signal=6) and from_code(137) == ExitStatus(signal=9) and from_code(2) == ExitStatus(code=2)


def test_lines_that_are_no_exit_report():
    for line in ("INFO: worker group successfully finished.", "exit code 0", "rank 6 step 100 loss 2.1",
                 "Killing subprocess 13266", "EXIT CODE: 139 is 128 + SIGSEGV", "x" * 100000):
        assert parse_exit(line) is None
