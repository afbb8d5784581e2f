"""Zero-config discovery of the training jobs running on this node.

Each round, `scan.discover` lists the processes (procfs), keeps only whitelisted keys of their
environments (`environ`), groups the ranks into jobs and drops launchers, wrappers and helper
children (`group`), and attaches what each job exposes: NPUs, log files, plog folders, heartbeat
files and HCCL timeouts (`scan`). The probes read the result through a `DiscoveryFeed`
(`feed`); detectors and the alert engine never see discovery itself, only the observations of the
probes it feeds.
"""
