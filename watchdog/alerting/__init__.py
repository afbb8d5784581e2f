"""Alerting: the engine that turns findings into notifications, in three stages.

`decide/` (the pure core: what fires, what is muted, grouped, routed), `words/` (a notification
rendered in a channel's dialect and language) and `deliver/` (the outbox, the senders, the
channels); the engine's shell (`engine`, `timer`, `silences`, `unwritable`) drives them. Each
stage imports only the ones below it: deliver -> words -> decide (the import-linter contract
`alerting-stages` in pyproject.toml).
"""
