"""A job keeps the name it was first given (watchdog.discovery.names): after its launch script
left, through a reload of the same config, and across a restart of the daemon (the names saved
in the state folder); a reload that changes how jobs are named forgets them."""
from __future__ import annotations


from watchdog.config.load import load_config_text
from watchdog.discovery.feed import DiscoveryFeed, scan_options
from watchdog.discovery.model import Discovered, JobInfo, RankInfo


def _job(name):
    ranks = tuple(RankInfo(rank=i, local_rank=i, pid=4000 + i, npu=i, started_at=1000.0) for i in range(2))
    return JobInfo(name=name, launcher=None, world_size=2, local_world_size=2, ranks=ranks)


def test_a_reload_of_the_same_config_keeps_the_names_given():
    cfg = load_config_text("{}", "c.yaml")
    feed = DiscoveryFeed(scan_options(cfg))
    first = feed._keep_names(Discovered(jobs=(_job("run-20260101-000000"),)))
    assert first.jobs[0].name == "run-20260101-000000"
    # The launch script left: a fresh scan names the same ranks after their own script.
    again = feed._keep_names(Discovered(jobs=(_job("train-20260101-000001"),)))
    assert again.jobs[0].name == "run-20260101-000000"
    feed.opts = scan_options(cfg)  # what Daemon._build_probes does on every reload
    after = feed._keep_names(Discovered(jobs=(_job("train-20260101-000001"),)))
    assert after.jobs[0].name == "run-20260101-000000"


def test_the_names_given_survive_a_restart_and_a_change_of_naming_forgets_them(tmp_path):
    cfg = load_config_text("{}", "c.yaml")
    feed = DiscoveryFeed(scan_options(cfg), state_dir=str(tmp_path))
    feed._keep_names(Discovered(jobs=(_job("run-20260101-000000"),)))
    restarted = DiscoveryFeed(scan_options(cfg), state_dir=str(tmp_path))
    assert restarted._keep_names(Discovered(jobs=(_job("train-20260101-000001"),))).jobs[0].name == "run-20260101-000000"
    named = load_config_text("job: {name: pretrain}", "c.yaml")
    other = DiscoveryFeed(scan_options(named), state_dir=str(tmp_path))
    assert other._keep_names(Discovered(jobs=(_job("pretrain"),))).jobs[0].name == "pretrain"
    (tmp_path / "discovery-names.json").write_text("{damaged")
    fresh = DiscoveryFeed(scan_options(cfg), state_dir=str(tmp_path))
    assert fresh._keep_names(Discovered(jobs=(_job("train-x"),))).jobs[0].name == "train-x"
