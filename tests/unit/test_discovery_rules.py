"""Discovery's pure rules on hand-made inputs: environment whitelist, process trees, NPUs, names."""

from __future__ import annotations

from watchdog.config import load_config_text
from watchdog.discovery.cmdline import redact_argv
from watchdog.discovery.environ import BASE_KEYS, parse_environ, wanted_keys
from watchdog.discovery.group import classify, group_jobs, is_launcher_cmd
from watchdog.discovery.model import ProcRecord
from watchdog.discovery.scan import heartbeat_path, hccl_of, label_safe, npu_of


def rec(pid, ppid, cmd, env=None, name=None, start=None):
    argv = tuple(cmd.split())
    return ProcRecord(pid=pid, ppid=ppid, uid=1000, start_ticks=start if start is not None else pid, name=name or argv[0].split("/")[-1][:15],
                      cmdline=argv, env=env)


def test_environ_keeps_whitelisted_keys_only():
    raw = (b"RANK=3\0HF_TOKEN=hf_secret\0LOCAL_RANK=1\0PATH=/usr/bin\0garbage\0=x\0\xff\xfe=1\0"
           b"MASTER_ADDR=10.0.0.1\0RANK=9\0NPU_WATCHDOG_JOB=llama\0")
    env = parse_environ(raw, wanted_keys(["NPU_WATCHDOG_JOB"]))
    assert env == {"RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "NPU_WATCHDOG_JOB": "llama"}
    assert "HF_TOKEN" not in BASE_KEYS and "PATH" not in BASE_KEYS
    assert parse_environ(b"", BASE_KEYS) == {}
    assert len(parse_environ(b"RANK=" + b"9" * 100000, BASE_KEYS)["RANK"]) == 1024


def tree_torchrun_with_rank_env():
    # bash -c "torchrun ..." (RANK=0 from the scheduler everywhere), 2 ranks, rank 0 has 2 workers.
    base = {"RANK": "0", "MASTER_ADDR": "a", "MASTER_PORT": "1"}
    return {
        10: rec(10, 1, "bash -c torchrun --nproc-per-node 2 train.py", dict(base)),
        11: rec(11, 10, "/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 2 train.py", dict(base), name="torchrun"),
        12: rec(12, 11, "python3 -u train.py", {**base, "RANK": "0", "LOCAL_RANK": "0"}),
        13: rec(13, 11, "python3 -u train.py", {**base, "RANK": "1", "LOCAL_RANK": "1"}),
        14: rec(14, 12, "python3 -u train.py", {**base, "RANK": "0", "LOCAL_RANK": "0"}),
        15: rec(15, 12, "python3 -c from multiprocessing.spawn import spawn_main", {**base, "RANK": "0"}),
        16: rec(16, 1, "sshd: user"),
    }


def test_launcher_wrapper_and_helpers_are_not_ranks():
    ranks, launchers = classify(tree_torchrun_with_rank_env())
    assert ranks == {12: 0, 13: 1}
    assert 11 in launchers
    jobs = group_jobs(tree_torchrun_with_rank_env())
    assert len(jobs) == 1 and jobs[0].launcher == 11 and jobs[0].ranks == ((0, 12), (1, 13))


def test_a_process_whose_children_carry_other_ranks_is_their_launcher():
    env = lambda r: {"RANK": str(r)}  # noqa: E731
    records = {20: rec(20, 1, "python3 mylaunch.py", env(0)),
               21: rec(21, 20, "python3 train.py", env(0)),
               22: rec(22, 20, "python3 train.py", env(1))}
    ranks, launchers = classify(records)
    assert ranks == {21: 0, 22: 1} and 20 in launchers


def test_one_process_per_rank_number_in_a_job():
    # A helper that escaped the tree (double fork) with the same RANK: the earliest process keeps it.
    env = {"RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "9"}
    records = {30: rec(30, 1, "python3 train.py", env, start=5), 31: rec(31, 1, "python3 worker.py", env, start=9)}
    jobs = group_jobs(records)
    assert len(jobs) == 1 and jobs[0].ranks == ((0, 30),)


def test_rank_keys_and_grouping_without_launcher():
    records = {40: rec(40, 1, "python3 a.py", {"OMPI_COMM_WORLD_RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}),
               41: rec(41, 1, "python3 a.py", {"PMI_RANK": "3", "MASTER_ADDR": "h", "MASTER_PORT": "1"}),
               42: rec(42, 1, "python3 b.py", {"RANK_ID": "0", "RANK": "5"}),
               43: rec(43, 1, "python3 c.py", {"RANK": "x"})}
    jobs = group_jobs(records)
    assert sorted(j.ranks for j in jobs) == [((2, 40), (3, 41)), ((5, 42),)]  # RANK wins over RANK_ID


def test_launcher_recognition():
    for cmd in ("torchrun --nproc 8 t.py", "/opt/py/bin/python3 -m torch.distributed.run t.py", "msrun --worker_num 8 t.py",
                "deepspeed t.py", "mpirun -np 8 python t.py", "python3 /usr/bin/torchrun t.py"):
        assert is_launcher_cmd(rec(1, 0, cmd)), cmd
    for cmd in ("python3 train.py --launcher torchrun", "python3 -u pretrain_gpt.py", "bash run.sh"):
        assert not is_launcher_cmd(rec(1, 0, cmd)), cmd


def test_npu_heartbeat_hccl_and_names():
    assert npu_of({"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}, 1) == 5
    assert npu_of({"ASCEND_RT_VISIBLE_DEVICES": "4,5", "ASCEND_DEVICE_ID": "1"}, 0) == 5
    assert npu_of({"DEVICE_ID": "3"}, None) == 3
    assert npu_of({}, 2) is None and npu_of({"ASCEND_RT_VISIBLE_DEVICES": "0"}, 3) is None
    # Unicode digits (another user's hostile environment) are no numbers: never a failed scan.
    assert npu_of({"DEVICE_ID": "\u00b2"}, None) is None and npu_of({"ASCEND_RT_VISIBLE_DEVICES": "\u00b2"}, 0) is None
    # In a container: the runtime's device list, unless the rank narrows it itself.
    assert npu_of({"ASCEND_VISIBLE_DEVICES": "4,5,6,7", "DEVICE_ID": "2"}, None) == 6
    assert npu_of({"ASCEND_VISIBLE_DEVICES": "4,5,6,7"}, 1) == 5
    assert npu_of({"ASCEND_VISIBLE_DEVICES": "4,5,6,7", "ASCEND_RT_VISIBLE_DEVICES": "0,1"}, 1) == 1
    assert heartbeat_path({"NPU_WATCHDOG_HEARTBEAT": "/hb/r{rank}.json"}, 3, 1) == "/hb/r3.json"
    assert heartbeat_path({"NPU_WATCHDOG_HEARTBEAT": "/hb/"}, 3, 1) == "/hb/rank3.json"
    assert heartbeat_path({"NPU_WATCHDOG_HEARTBEAT": "relative.json"}, 3, 1) is None
    h = hccl_of([{"HCCL_EXEC_TIMEOUT": "600"}, {"HCCL_EXEC_TIMEOUT": "900"}, {}])
    assert (h.exec_timeout_s, h.connect_timeout_s, h.source) == (900, 120, "environment")
    assert hccl_of([{}]).exec_timeout_s == 1836
    assert label_safe("my job/with spaces") == "my-job-with-spaces" and label_safe("///") == "job"


def test_launcher_command_line_is_redacted():
    line = redact_argv(["torchrun", "--hf-token", "hf_abc", "--api_key=xyz", "train.py",
                        "--url", "https://user:pw@host/path?sig=s3cr3t", "PASSWORD=hunter2"])
    for secret in ("hf_abc", "xyz", "pw@", "s3cr3t", "hunter2"):
        assert secret not in line
    assert line.startswith("torchrun --hf-token [REDACTED] --api_key=[REDACTED] train.py")


def test_explicit_probe_settings_win_over_discovery():
    assert set(load_config_text("{}").feeds.values()) == {"off"}  # a config without the section
    cfg = load_config_text("discovery: {enabled: true}\nprobes:\n  process: {enabled: true, cmdline: 'train'}\n")
    assert cfg.feeds["process"] == "config" and cfg.feeds["logs"] == "discovery"
    # Fed even with no npu-smi on this machine's PATH: the probe looks for it every round.
    assert cfg.feeds["npu"] == "discovery" and cfg.probes.npu.enabled
    off = load_config_text("discovery: {enabled: false}\n")
    assert set(off.feeds.values()) == {"off"} and not off.probes.logs.enabled
    some = load_config_text("discovery: {enabled: true, feed: [process]}\n")
    assert some.feeds["process"] == "discovery" and some.feeds["heartbeat"] == "off"


def _view(obs, now=1000.0):
    from watchdog.core.state import Sample, StateView

    return StateView(now=now, started_at=0.0, samples={"process": (Sample(now - 1, obs),)}, statuses={})


def _info(job, rank, pid):
    from watchdog.observations import ProcessInfo

    return ProcessInfo(pid=pid, rank=rank, state="sleeping", create_time=1.0, cpu_seconds=1.0, cpu_delta=0.1,
                       rss_bytes=1, threads=1, job=job)


def test_liveness_runs_per_discovered_job():
    from watchdog.detectors.liveness import detect
    from watchdog.observations import JobState, ProcessObservation

    cfg = load_config_text("discovery: {enabled: true}\n")
    jobs = (JobState("a", 1.0), JobState("b", 1.0), JobState("c", 1.0, ended_at=900.0, clean_end=True))
    obs = ProcessObservation(processes=(_info("a", 0, 10), _info("b", 0, 20)), first_seen_at=1.0, discovered=True,
                             gone=(_info("a", 1, 11), _info("b", 1, 21), _info("c", 0, 30)), jobs=jobs)
    got = sorted((f.rule, f.labels["training_job"], f.labels.get("rank")) for f in detect(_view(obs), cfg))
    assert got == [("rank_missing", "a", "1"), ("rank_missing", "b", "1")]  # c ended cleanly
    empty = ProcessObservation(processes=(), first_seen_at=1.0, discovered=True)
    assert detect(_view(empty, now=10_000.0), cfg) == []  # no job (any more) on the node: nothing


def test_log_files_of_a_job_by_source_and_rank():
    from watchdog.discovery.model import Discovered, JobInfo, RankInfo
    from watchdog.probes.discovered_logs import plan_files

    ranks = (RankInfo(0, 0, 100, None, ("/j/rank0.log", "/j/all.out", "/j/plog/plog-100_1.log")),
             RankInfo(1, 1, 101, None, ("/j/rank1.log", "/j/all.out")))
    job = JobInfo(name="j", launcher=None, world_size=2, local_world_size=2, ranks=ranks, plog_dirs=("/p",))
    listing = {"/p": ["plog-101_2.log", "plog-999_3.log", "other.log"]}
    got = plan_files(Discovered(jobs=(job,)), listdir=lambda d: listing[d])
    assert got == {"/j/rank0.log": ("train", "j", "0"), "/j/rank1.log": ("train", "j", "1"),
                   "/j/all.out": ("train", "j", None), "/j/plog/plog-100_1.log": ("plog", "j", "0"),
                   "/p/plog-101_2.log": ("plog", "j", "1")}


def test_configured_paths_of_discovery_fed_probes_are_not_reported_unmatched():
    from watchdog.config.pathcheck import unmatched_paths

    text = ("probes:\n  heartbeat: {paths: ['/nonexistent/hb/*.json']}\n"
            "  logs: {sources: [{name: train, paths: ['/nonexistent/*.log']}]}\n")
    fed = load_config_text("discovery: {enabled: true}\n" + text)
    assert not [line for line in unmatched_paths(fed) if "nonexistent" in line]
    explicit = load_config_text("probes:\n  heartbeat: {enabled: true, paths: ['/nonexistent/hb/*.json']}\n")
    assert [line for line in unmatched_paths(explicit) if "nonexistent" in line]


def test_a_rank_carries_its_user_and_the_heartbeat_it_names_whoever_owns_it():
    """Whose file it is is checked at every read (watchdog.host.rankfiles), not once here: a rank that
    names a file of another user keeps it named, and reading it is refused (a finding)."""
    from watchdog.discovery.group import RawJob
    from watchdog.discovery.model import ProcRecord
    from watchdog.discovery.scan import ScanOptions, describe_job

    rec = ProcRecord(pid=10, ppid=1, uid=4242, start_ticks=1, name="python", cmdline=("python", "t.py"),
                     env={"RANK": "0", "NPU_WATCHDOG_HEARTBEAT": "/etc/passwd"})
    job = describe_job(RawJob(key="k", launcher=None, ranks=((0, 10),)), {10: rec}, {}, {},
                       ScanOptions(home_of=lambda uid: None), 0.0)
    assert job.ranks[0].uid == 4242 and job.ranks[0].heartbeat == "/etc/passwd"


def test_proc_stat_with_odd_command_names():
    from watchdog.host.procstat import parse_stat  # the one stat parser, discovery's too

    line = b"4242 (python (rank) 0) S 4000 4242 4242 0 -1 4194560 " + b" ".join([b"0"] * 12) + b" 987654 0 0"
    st = parse_stat(line, boot=0.0)
    comm, ppid, start = st.comm, st.ppid, st.start_ticks
    assert (comm, ppid, start) == ("python (rank) 0", 4000, 987654)
    import pytest

    with pytest.raises((ValueError, IndexError)):
        parse_stat(b"garbage without parentheses", boot=0.0)


def test_plog_folder_created_after_the_daemon_started_is_followed_from_the_next_scan(tmp_path):
    """Feeds follow the node: each scan lists the ranks' plog folders as they are now."""
    from watchdog.discovery.model import Discovered, JobInfo, RankInfo
    from watchdog.probes.discovered_logs import plan_files

    plog = tmp_path / "log" / "debug" / "plog"
    job = JobInfo(name="j", launcher=None, world_size=1, local_world_size=1,
                  ranks=(RankInfo(rank=0, local_rank=0, pid=4242, npu=0),), plog_dirs=(str(plog),))
    found = Discovered(jobs=(job,))
    assert plan_files(found) == {}  # CANN has not written a line yet: no folder
    plog.mkdir(parents=True)
    (plog / "plog-4242_20261201.log").write_text("[ERROR] HCCL ...\n")
    (plog / "plog-999_20261201.log").write_text("another process\n")
    assert plan_files(found) == {str(plog / "plog-4242_20261201.log"): ("plog", "j", "0")}


def test_two_jobs_of_orphaned_ranks_are_two_jobs():
    """Launch scripts that start their ranks in the background and leave (`python train.py &`,
    MindSpore's samples): the ranks' parent is init and they carry no rendezvous address. Two
    such jobs of one user are split by their names or rank tables, or, when nothing tells them
    apart, by a rank number held twice on other NPUs; a helper on the same NPU stays a helper."""
    def job(pid, rank, dev, **extra):
        return rec(pid, 1, "python3 train.py", {"RANK_ID": str(rank), "DEVICE_ID": str(dev), **extra}, start=pid)

    named = {50: job(50, 0, 0, NPU_WATCHDOG_JOB="msA"), 51: job(51, 1, 1, NPU_WATCHDOG_JOB="msA"),
             52: job(52, 0, 2, NPU_WATCHDOG_JOB="msB"), 53: job(53, 1, 3, NPU_WATCHDOG_JOB="msB")}
    jobs = group_jobs(named, name_env=("NPU_WATCHDOG_JOB",))
    assert sorted(j.ranks for j in jobs) == [((0, 50), (1, 51)), ((0, 52), (1, 53))]
    tables = {60: job(60, 0, 0, RANK_TABLE_FILE="/a.json"), 61: job(61, 0, 4, RANK_TABLE_FILE="/b.json")}
    assert sorted(j.ranks for j in group_jobs(tables)) == [((0, 60),), ((0, 61),)]
    alike = {70: job(70, 0, 0), 71: job(71, 1, 1), 72: job(72, 0, 2), 73: job(73, 1, 3)}
    assert sorted(j.ranks for j in group_jobs(alike)) == [((0, 70), (1, 71)), ((0, 72), (1, 73))]
    helper = {80: job(80, 0, 0), 81: job(81, 0, 0)}  # double-forked, same NPU: a helper
    assert [j.ranks for j in group_jobs(helper)] == [((0, 80),)]
    child = {90: job(90, 0, 0), 91: rec(91, 90, "python3 train.py", {"RANK_ID": "0", "DEVICE_ID": "5"}, start=91)}
    assert [j.ranks for j in group_jobs(child)] == [((0, 90),)]  # a descendant: a helper whatever its NPU
