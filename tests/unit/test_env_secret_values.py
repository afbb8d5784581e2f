"""A credential-named `${NAME}` is a secret only when its value looks like one (`token_like`):
`AUTH_MODE=none`, `WEBHOOK_PORT=8080` or `NPU_SK=1` must not hide `None`, every `8080` or every
`1` in the daemon's log, its findings and `check-config`'s dump; nor is `${PWD}` a credential."""
from __future__ import annotations

from watchdog.config.load import load_config_text, redacted_dump
from watchdog.privacy.redact import Redactor, config_secrets

TEXT = """
probes:
  commands:
    - name: api
      argv: ["/usr/local/bin/check", "--auth", "${AUTH_MODE}", "--port", "${WEBHOOK_PORT}",
             "--sk", "${NPU_SK}", "--retries", "1", "/dev/davinci1"]
"""


def test_ordinary_values_of_credential_named_variables_do_not_hide_innocent_text(monkeypatch):
    monkeypatch.setenv("AUTH_MODE", "none")
    monkeypatch.setenv("WEBHOOK_PORT", "8080")
    monkeypatch.setenv("NPU_SK", "1")
    cfg = load_config_text(TEXT, "c.yaml")
    known = Redactor(config_secrets(cfg)).known
    assert known("found_inf=None, MASTER_PORT=8080") == "found_inf=None, MASTER_PORT=8080"
    argv = redacted_dump(cfg)["probes"]["commands"][0]["argv"]
    assert argv[-3:] == ["--retries", "1", "/dev/davinci1"]


def test_the_shell_working_directory_is_not_a_credential(monkeypatch):
    """`is_secret_name` is used where `is_secret_variable` (which exempts PWD, SSH_AUTH_SOCK) is
    meant: a config using `${PWD}` makes the working folder [REDACTED] in every log line."""
    monkeypatch.setenv("PWD", "/srv/train")
    cfg = load_config_text('probes:\n  commands:\n    - {name: disk, argv: ["${PWD}/check_disk.sh"]}\n', "c.yaml")
    known = Redactor(config_secrets(cfg)).known
    assert known("logs: following /srv/train/logs/rank0.log") == "logs: following /srv/train/logs/rank0.log"
