"""The daemon as a system service: its log setup, the systemd notify protocol, the lock on its state
folder, damaged state files set aside, its file descriptor budget and malloc arenas.
"""
