"""Command checks: run a configured program each round; its exit status is the observation.

A check's output and command line reach findings, alerts, `status` and the alert state, so both
are redacted here, at the source, as log lines and discovered command lines are: the config's
secrets (a check that prints the webhook URL it failed to reach), credential options of its
own command line (`--token VALUE`), and secret-looking assignments (`password=...`)."""

from __future__ import annotations

from typing import Iterable, List

from watchdog.config.sections.common import ProbeSection
from watchdog.config.sections.commands import CommandCheck
from watchdog.observations import CommandResult
from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError
from watchdog.host.subproc import run_command
from watchdog.privacy.argv import redact_argv
from watchdog.privacy.redact import Redactor, config_secrets


class CommandProbe(Probe):
    def __init__(self, check: CommandCheck, secrets: Iterable[str] = ()):
        self.check = check
        argv, found = redact_argv(check.argv)
        self.redactor = Redactor([*secrets, *found])
        #: As findings show it ("run the check by hand: ..."): `PRIVATE-TOKEN: ${CHECK_TOKEN}` too.
        self.argv = tuple(self.redactor.text(a, cut=False) for a in argv)
        self.name = f"command:{check.name}"
        self.interval = check.interval
        # The scheduler's own timeout is a little longer than the command's, so the command's
        # process-group kill always happens first and is reported precisely.
        self.timeout = check.timeout + 5.0

    def collect(self) -> Collected:
        out = run_command(self.check.argv, timeout=self.check.timeout)
        if out.start_error:
            raise ProbeError(f"cannot run {self.check.argv[0]!r}: {out.start_error}")
        tail = self.redactor.text((out.stdout + out.stderr).strip()[-2000:])
        result = CommandResult(
            name=self.check.name, argv=self.argv, returncode=out.returncode,
            timed_out=out.timed_out, duration_seconds=out.duration, output_tail=tail,
        )
        if out.timed_out:
            verdict = f"timed out after {self.check.timeout:g}s (process group killed)"
        else:
            verdict = f"exit {out.returncode}"
        return Collected(result, f"{verdict} in {out.duration:.2f}s")


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 90


def _unique_names(checks: List[CommandCheck]) -> None:
    seen = set()
    for c in checks:
        if c.name in seen:
            raise ValueError(f"commands: duplicate name {c.name!r}")
        seen.add(c.name)


#: Its config: `probes.commands`, a list of checks with unique names.
SECTION: ProbeSection[List[CommandCheck]] = ProbeSection("commands", List[CommandCheck], default=list, check=_unique_names)


def build(ctx: ProbeContext) -> List[Probe]:
    secrets = config_secrets(ctx.config)
    return [CommandProbe(c, secrets) for c in ctx.config.probes.commands]
