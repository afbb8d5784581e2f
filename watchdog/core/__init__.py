"""The records every layer shares, at the bottom of the ladder: findings (what detectors conclude),
the state store (what probes observed), the rule declarations of the rule catalog, and the one
judgement of a loss scale's trend that the log rules and the heartbeat summary both make.
"""
