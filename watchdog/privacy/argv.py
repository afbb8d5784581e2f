"""Credentials in captured command lines, replaced before anything keeps them.

Training launchers take tokens as arguments (`--hf-token VALUE`, `--password=VALUE`,
`WANDB_API_KEY=VALUE` through `env`). Every place that records a command line (the process probe,
whose observations reach findings, alerts and `status`; snapshot process lists) passes it through
`redact_argv` first. Both option forms are covered: `--name=value` and `--name value`.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

from watchdog.privacy.redact import REDACTED, is_secret_name


def _secret_option(arg: str) -> bool:
    """`--token`, `--api-key`, `-password`: an option whose name says it carries a credential."""
    return arg.startswith("-") and len(arg) > 2 and is_secret_name(arg.lstrip("-"))


def redact_argv(argv: Sequence[str]) -> Tuple[Tuple[str, ...], List[str]]:
    """The command line with credential values replaced, and the values that were replaced (so a
    snapshot can also remove them from logs and stack dumps)."""
    out: List[str] = []
    found: List[str] = []
    take_next = False
    for arg in argv:
        if take_next:
            take_next = False
            if not arg.startswith("--"):
                found.append(arg)
                out.append(REDACTED)
                continue
        name, eq, value = arg.partition("=")
        if eq and value and (_secret_option(name) or (not name.startswith("-") and is_secret_name(name))):
            found.append(value)
            out.append(f"{name}={REDACTED}")
            continue
        if not eq and _secret_option(arg):
            take_next = True
        out.append(arg)
    return tuple(out), found
