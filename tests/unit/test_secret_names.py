"""Which environment and argument names hold secrets (watchdog.privacy.redact.is_secret_name): the
names snapshots, status and messages redact the values of. An attack pass found TORCH_NPU_CREDS
kept in a snapshot's environment file; plurals and short forms count, and ordinary names that
merely contain the words do not."""

from __future__ import annotations

import pytest

from watchdog.privacy.argv import redact_argv
from watchdog.privacy.redact import REDACTED, Redactor, is_secret_name, is_secret_variable


@pytest.mark.parametrize("name", [
    "TORCH_NPU_CREDS", "AWS_SECRETS", "DB_PASSWORDS", "GOOGLE_APPLICATION_CREDENTIALS", "HF_TOKEN",
    "WANDB_API_KEY", "MY_CREDENTIAL", "OBS_SECRET_ACCESS_KEY", "--db-password", "FEISHU_WEBHOOK",
    "DB_PWD", "MYSQL_PWD", "HUAWEICLOUD_SDK_AK", "HUAWEICLOUD_SDK_SK", "OBS_SK", "MY_APPKEY", "AUTHORIZATION",
    "SENTRY_DSN",
])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "TOKENIZERS_PARALLELISM", "max_tokens", "MAX_NEW_TOKENS", "HCCL_CONNECT_TIMEOUT", "RANK", "CREDIT_LIMIT",
    "ASCEND_RT_VISIBLE_DEVICES", "KEYBOARD", "TASK_QUEUE_ENABLE", "MASK_RATIO", "SKIP_STEPS", "ASCEND_OPP_PATH",
])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_the_shells_own_variables_are_no_secrets_but_the_words_still_are():
    """`PWD` (the shell's working directory) and `SSH_AUTH_SOCK` as environment variables hold
    paths, not credentials (a rank's PWD made its job's folder [REDACTED] in its snapshot); the
    same letters as an option, a URL parameter or part of a name still mark a password."""
    assert not is_secret_variable("PWD") and not is_secret_variable("SSH_AUTH_SOCK")
    assert is_secret_variable("DB_PWD") and is_secret_variable("MYSQL_PWD") and is_secret_variable("HF_TOKEN")
    out, found = redact_argv(["python", "sync.py", "--pwd", "Sup3rS3cret500", "--db-pwd", "x"])
    assert out[3] == REDACTED and "Sup3rS3cret500" in found
    assert "Sup3rS3cret500" not in Redactor().text("GET http://10.0.0.5/login?user=admin&pwd=Sup3rS3cret500")
