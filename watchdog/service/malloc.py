"""Fewer malloc arenas for the daemon: its threads would otherwise each grow an arena of their own.

glibc gives a thread that allocates while another holds the main arena an arena of its own (up to
8 per core), and memory freed in one is not reused by another. The daemon runs a thread per probe,
an HTTP server, senders and the alert engine, each allocating a little now and then: limiting the
arenas to 2 kept about 7 MB (a tenth of its resident memory at 64 ranks) off the heap, measured
with bench/bench_footprint.py. The threads allocate rarely and briefly (the GIL serialises them
anyway), so sharing two arenas costs no measurable time. `MALLOC_ARENA_MAX` in the environment
(set by an operator) wins.
"""

from __future__ import annotations

import ctypes
import os

#: mallopt's parameter number for the arena limit (glibc malloc.h: M_ARENA_MAX).
M_ARENA_MAX = -8
ARENAS = 2


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Call before starting threads. True when glibc took the limit; False elsewhere (musl, macOS:
    no such call), or when the environment already sets it."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        # The process's own symbols: the C library the interpreter already uses. (No
        # ctypes.util.find_library: on Linux it runs ldconfig or a compiler to find a name.)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_ARENA_MAX, arenas) == 1


#: How often the daemon hands freed heap memory back (see `trim`).
TRIM_SECONDS = 600.0


def trim() -> bool:
    """Give the heap's free pages back to the system (glibc `malloc_trim`): start-up (imports,
    config validation, the first rounds) frees a few MB that would otherwise stay resident for
    the daemon's whole life. Cheap (a walk of the free lists); True when memory was released."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes, malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return malloc_trim(0) == 1
