"""The summaries' registry is kept only once complete: listing the package needs a descriptor,
and pkgutil answers an empty list when it gets none (EMFILE). Cached, that answer made every
later detector pass fail with `KeyError: 'logs'` (a plog folder of 10,000 files under 1024
descriptors); now it is built again at the next use, and a missing summary is a clear error."""

from __future__ import annotations

import pytest

import watchdog.summaries as summaries
from watchdog.core.state import StateStore


def test_an_empty_listing_is_not_kept_and_a_missing_summary_says_why(monkeypatch):
    monkeypatch.setattr(summaries, "_REGISTRY", None)
    real = summaries._modules
    monkeypatch.setattr(summaries, "_modules", lambda: [])  # what pkgutil answers without descriptors
    assert summaries.registry() == {}
    with pytest.raises(LookupError, match="out of file descriptors"):
        summaries.fold("logs", StateStore().view(), None)
    monkeypatch.setattr(summaries, "_modules", real)
    assert "logs" in summaries.registry()  # descriptors back: complete, and kept
    assert summaries.fold("logs", StateStore().view(), None) is not None
