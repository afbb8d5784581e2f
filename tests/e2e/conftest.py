import pytest

from tests.helpers import demo_run


@pytest.fixture
def demo(tmp_path):
    """A simulated node (4 NPUs, the demo's time constants) with the real daemon; all stopped at the end."""
    runs = []

    def make(**kw):
        run = demo_run(tmp_path / f"run{len(runs)}", **kw)
        runs.append(run)
        return run

    yield make
    for r in runs:
        r.close()
