"""The daemon's parts beside its main loop (watchdog.daemon): config reload, status, health, keep-alive, start-up and shutdown.

Each module has one job and reads the daemon's shared objects through `watchdog.runtime`.
"""
