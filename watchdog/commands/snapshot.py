"""The `snapshot` command(s) (added by their feature)."""

from __future__ import annotations

import argparse


def register(sub: "argparse._SubParsersAction") -> None:
    return None
