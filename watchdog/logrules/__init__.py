"""Log tailing and failure signatures.

Pure pieces live here and are shared by the daemon's `logs` probe and the offline `scan` command:
`model` (rules as data, loaded from the YAML packs in `packs/` plus user rules), `matcher` (one
compiled multi-pattern engine with a literal prefilter), `extract` (lines -> events: thresholds,
multi-line tracebacks) and `tail` (following files across rotation, with persisted offsets).
"""

#: Shipped packs, one YAML file each in `packs/`; a pack's name is its rules' category (here,
#: import-free: the CLI's --help lists them).
SHIPPED_PACKS = ("nan", "oom", "hccl", "device", "crash", "traceback")
