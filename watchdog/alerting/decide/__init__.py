"""The decide stage: findings and a time in, typed notifications and outbox rows out.

Pure: no thread, no clock, no database, no network, no renderer and no vendor name. The engine's
shell (`watchdog.alerting.engine`) drives it; the deliver stage stores and sends what it decides.
"""
