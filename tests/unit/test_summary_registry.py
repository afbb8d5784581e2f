"""The summaries come from the composition root's list, never from listing a folder at run time:
a process out of file descriptors (a plog folder of 10,000 files under 1024 descriptors) once
got an empty listing from pkgutil, and every later detector pass failed with `KeyError: 'logs'`.
With nothing listed at run time, that cannot happen; a probe without a summary is a clear error."""

from __future__ import annotations

import pytest

import watchdog.plugins_list as root
import watchdog.summaries as summaries
from watchdog.core.state import StateStore


def test_the_summaries_are_the_roots_and_a_missing_one_says_why():
    assert set(summaries.registry()) == {m.PROBE for m in root.SUMMARY_MODULES}
    assert summaries.fold("logs", StateStore().view(), None) is not None
    with pytest.raises(LookupError, match="SUMMARY_MODULES"):
        summaries.fold("no-such-probe", StateStore().view(), None)
