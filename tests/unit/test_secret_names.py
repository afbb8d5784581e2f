"""Which environment and argument names hold secrets (watchdog.privacy.redact.is_secret_name): the
names snapshots, status and messages redact the values of. An attack pass found TORCH_NPU_CREDS
kept in a snapshot's environment file; plurals and short forms count, and ordinary names that
merely contain the words do not."""

from __future__ import annotations

import pytest

from watchdog.privacy.redact import is_secret_name


@pytest.mark.parametrize("name", [
    "TORCH_NPU_CREDS", "AWS_SECRETS", "DB_PASSWORDS", "GOOGLE_APPLICATION_CREDENTIALS", "HF_TOKEN",
    "WANDB_API_KEY", "MY_CREDENTIAL", "OBS_SECRET_ACCESS_KEY", "--db-password", "FEISHU_WEBHOOK",
    "DB_PWD", "MYSQL_PWD",
])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "TOKENIZERS_PARALLELISM", "max_tokens", "MAX_NEW_TOKENS", "HCCL_CONNECT_TIMEOUT", "RANK", "CREDIT_LIMIT",
    "ASCEND_RT_VISIBLE_DEVICES", "KEYBOARD", "PWD", "SSH_AUTH_SOCK",
])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)
