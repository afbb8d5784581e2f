import io

import pytest

from watchdog.demo.scenario import DemoRun


@pytest.fixture
def demo(tmp_path):
    """A simulated node (4 NPUs, the demo's time constants) with the real daemon; all stopped at the end."""
    runs = []

    def make(**kw):
        kw.setdefault("speed", 1.0)
        kw.setdefault("npus", 4)
        run = DemoRun(tmp_path / f"run{len(runs)}", echo=False, stream=io.StringIO(), **kw)
        runs.append(run)
        return run

    yield make
    for r in runs:
        r.close()
