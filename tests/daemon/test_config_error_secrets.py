"""A channel URL written where the list of channels (or a channel) is expected: the config error
names the key and the problem but does not quote the value (check-config, doctor, and the
daemon's log at start or reload all print these errors)."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli

TOKEN = "SeCrEtToKeN1234567abcdef"
URL = f"https://hooks.slack.com/services/T0AAAA/B0BBBB/{TOKEN}"


@pytest.mark.parametrize("text", [f"alerting:\n  channels: {URL}\n", f"alerting:\n  channels:\n    - {URL}\n"])
def test_a_url_in_place_of_a_channel_is_not_quoted(tmp_path, text):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    out = run_cli("check-config", "-c", str(cfg))
    assert out.returncode == 2
    assert TOKEN not in out.stdout + out.stderr, out.stderr
