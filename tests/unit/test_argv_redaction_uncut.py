"""A command line's arguments were never cut to a display length: one that a secret merely starts
with (`http` for every http:// URL) or ends with (`webhook` for `.../notify/webhook`) is shown as
written; only a cut text's ends are checked for a secret's part (`Redactor.text(cut=...)`)."""
from __future__ import annotations

from watchdog.config.sections.commands import CommandCheck
from watchdog.probes.command import CommandProbe

URL = "http://10.0.0.5:8080/notify/webhook"


def test_a_check_argument_that_is_not_the_secret_is_shown_as_written():
    check = CommandCheck(name="api", argv=["curl", "--proto", "https", "-d", "webhook", "https://x.example/h"])
    p = CommandProbe(check, [URL])
    assert p.argv == ("curl", "--proto", "https", "-d", "webhook", "https://x.example/h")
