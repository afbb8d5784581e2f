"""Redaction of text that was cut before it was redacted, of a secret URL's pieces, and of the
lines the logs probe keeps besides its events (found by an attack pass on the change that
redacts the config's own secrets from matched log lines)."""

from __future__ import annotations

from tests.probe_kit import following_logs_probe
from watchdog.logrules.extract import clip
from watchdog.privacy.redact import REDACTED, Redactor

URL = "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/eeeeeeeeeeeeeeeeeeeeeeee"


def test_a_secret_cut_by_a_display_limit_loses_its_first_part_too():
    """A matched line is clipped to 400 characters before it is redacted: the 14 characters of
    the token before the cut were no longer the whole token and stayed."""
    line = "x" * 340 + " posting to " + URL + " failed"
    out = Redactor([URL]).text(clip(line))
    assert "eeee" not in out and out.endswith(REDACTED + "...")
    # ... and a text cut at its start keeps no last part of it either.
    assert Redactor([URL]).text("eeeeeeeeeeeeee failed after the post") == REDACTED + " failed after the post"
    # Ordinary ends stay: nothing a secret starts or ends with.
    assert Redactor([URL]).text("step 5 loss 2.0 saved to /ckpt/step-0005...") == "step 5 loss 2.0 saved to /ckpt/step-0005..."


def test_a_vendors_path_words_are_not_secrets_on_their_own():
    """Every path segment of 8 characters or more was a secret piece: Slack's `services` became
    [REDACTED] in any log line that said it. A piece needs a digit or 16 characters."""
    r = Redactor([URL, "https://open.feishu.cn/open-apis/bot/v2/hook/0b1c2d3e-aaaa-bbbb-cccc-0123456789ab"])
    assert r.text("cannot reach the metadata services at 10.0.0.1") == "cannot reach the metadata services at 10.0.0.1"
    assert r.text("see open-apis docs") == "see open-apis docs"
    out = r.text("POST /services/T0AAAAAAA/B0BBBBBBB/eeeeeeeeeeeeeeeeeeeeeeee and hook 0b1c2d3e-aaaa-bbbb-cccc-0123456789ab")
    assert "T0AAAAAAA" not in out and "B0BBBBBBB" not in out and "eeeeeeee" not in out and "0123456789ab" not in out


def test_a_restart_line_is_redacted_like_the_event_it_came_with(tmp_path):
    """The launcher's restart line is the job_restarting finding's evidence: it was kept raw."""
    p, log = following_logs_probe(tmp_path)
    with open(log, "a") as f:
        for left in (2, 1):
            f.write(f"[WARNING] agent api_key=SECRETVALUE123 [default] Worker group FAILED. {left}/3 attempts "
                    "left; will restart worker group\n")
    obs = p.collect().value
    p.close()
    assert obs.restarts and all("SECRETVALUE123" not in r.line for r in obs.restarts)
    assert any("Worker group FAILED" in r.line for r in obs.restarts)
    assert all("SECRETVALUE123" not in e.text for e in obs.events)


def test_a_secret_in_another_letter_case_is_replaced_too():
    from watchdog.privacy.redact import replace_any_case

    url = "https://hooks.slack.com/services/T0AAAA/B0BBBB/SeCrEtToKeN1234567abcdef"
    red = Redactor([url])
    for text in (url.upper(), url.lower(), "posted to " + url.upper() + " and failed"):
        out = red.text(text)
        assert "SECRETTOKEN1234567" not in out.upper() and REDACTED in out, out
    assert replace_any_case("a Token b TOKEN c token", "token", "X") == "a X b X c X"
    # A character whose lower case is longer (İ) keeps the exact match only, and no misplaced cut.
    assert replace_any_case("İ token İ", "TOKEN", "X") == "İ token İ"
    assert replace_any_case("İ TOKEN", "TOKEN", "X") == "İ X"


def test_a_secret_file_ending_in_spaces_or_tabs_is_read_without_them(tmp_path):
    from watchdog.config.load import load_config_text
    from watchdog.privacy.redact import config_secrets

    hook = tmp_path / "url"
    hook.write_text("https://hooks.example/x/T0kenInTheHookPath9876543210 \t\r\n")
    cfg = load_config_text(f"alerting:\n  channels:\n    - type: webhook\n      name: h\n      url_file: {hook}\n")
    assert "https://hooks.example/x/T0kenInTheHookPath9876543210" in config_secrets(cfg)


def test_a_reload_adding_a_secret_redacts_the_matches_already_kept(tmp_path):
    """A matched line kept before the reload that added the URL it quotes (the state, `status`
    and a page while the match holds) is redacted once the new secrets are in."""
    from watchdog.probes.logs import LogsProbe

    url = "https://hooks.example/x/T0kenInTheHookPath9876543210"
    p, log = following_logs_probe(tmp_path)
    with open(log, "a") as f:
        f.write(f"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB; posting to {url} failed\n")
    obs = p.collect().value
    assert any(url in a.summary for a in obs.active)
    newer = LogsProbe(p.cfg, str(tmp_path / "state2"), secrets=[url])
    assert p.reconfigure(newer)
    after = p.collect().value
    p.close()
    assert after.active and all("T0kenInTheHookPath" not in a.summary + "".join(a.evidence) for a in after.active)
    assert any("out of memory" in a.summary for a in after.active)
