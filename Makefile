# npu-watchdog developer and operator entry points. Everything runs from a private .venv.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed
RUN_DIR ?= .run

.PHONY: bundle help venv run demo test test-unit test-fast test-e2e test-fuzz check-config bench docs clean heartbeat-wheel integrations golden

help:
	@echo "make demo       create .venv, install, play faults on a simulated 8-NPU node against the real daemon (about 100 s; DEMO_ARGS=--verbose prints every message)"
	@echo "make run        create .venv, install, run the daemon in the foreground with the example config"
	@echo "make test       create .venv, install, run the whole test suite: the unit, daemon and e2e tiers in one parallel run"
	@echo "make test-unit  the unit tier only: in-process, no subprocess, no sleep (well under 2 min)"
	@echo "make test-e2e   the end-to-end scenario tier (tests/e2e, in parallel)"
	@echo "make bench      benchmarks (by hand; results go to docs/benchmarks.md)"
	@echo "make docs       regenerate the generated tables in docs/ (metrics, rules, config keys)"
	@echo "make test-fast  the unit tier, then the daemon tier without its tests marked slow (in parallel)"
	@echo "make golden     rewrite the behaviour goldens in tests/fixtures/golden (the demo's /metrics shape and message counts) after an intended change"
	@echo "make test-fuzz  the fuzz suite with many more random examples (minutes; the fast profile runs in make test)"
	@echo "make heartbeat-wheel  build the trainer-side heartbeat package (dist/npu_watchdog_heartbeat-*.whl)"
	@echo "make integrations     add the training frameworks its integration tests use (torch, transformers, ...)"
	@echo "make bundle     offline install bundles, one per architecture (dist/npu-watchdog-<version>-<commit>-linux-{x86_64,aarch64}.tar.gz; needs the package index once)"
	@echo "make install    install on this node (venv in /opt/npu-watchdog, config, systemd unit)"
	@echo "make uninstall  remove it again (the config and the state stay)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/npu-watchdog demo $(DEMO_ARGS)

run: $(STAMP)
	@mkdir -p $(RUN_DIR)
	$(BIN)/npu-watchdog run -c config/npu-watchdog.example.yaml --state-dir $(RUN_DIR)/state

check-config: $(STAMP)
	$(BIN)/npu-watchdog check-config -c config/npu-watchdog.example.yaml

# The tiers (tests/unit, tests/daemon, tests/e2e; tests/tierkit.py says what goes where) run in one
# pytest session, because the machine's CPU is what the run waits on and one session keeps
# TEST_WORKERS worker processes (pytest-xdist) busy to the end: a daemon-tier file per worker at a
# time, an e2e or unit test by test (tests/conftest.py keeps a file with a module-scoped fixture on
# one worker, starts the slow tests first and the unit tier last, where its short tests fill the
# workers the long ones leave idle). Run as a tier of its own before the others, the unit tier
# added its minute to the wall time while the daemon tests' waits left a seventh of the CPU idle.
# Every test has its own temporary folder, ports and processes. 16 workers on a 2-core machine:
# with 4 the CPU was idle two thirds of the time, with 8 still a third (the tests wait on daemons'
# rounds, hangs and timeouts). With 12 (2026-12-07, /proc/stat sampled every 5 s) the CPU was
# 30-70 % busy for the five minutes in which every worker held a long e2e test that waits (the
# sum of the tests' wall times over 12 workers, 600 s, was the run's floor: 637 s); with 16 it
# was busy throughout and the run took 608 s, its CPU (1,036 s over 2 cores) now the floor.
# `make test-unit` is the quick check that stops at the first tier.
PYTEST       = $(BIN)/python -m pytest -q -rs
TEST_WORKERS ?= 16
PARALLEL     = -n $(TEST_WORKERS) --dist loadfile
SCENARIOS    = -n $(TEST_WORKERS) --dist load

# Bytecode first: the tests start some 500 daemons and CLI commands, each importing the package.
# Where PYTHONDONTWRITEBYTECODE is set (as on the project's 2-core VM) none of them may write
# `__pycache__`, so each compiled the whole package from source again: 0.22 s of CPU per start
# (import of watchdog.daemon: 0.73 s without the cache, 0.51 s with it, on the 2-core VM), about a
# tenth of the suite's CPU. compileall writes the cache once (a second of CPU; it skips what is
# current); the variable still keeps every other process from writing.
BYTECODE     = $(BIN)/python -m compileall -q watchdog tests
# pytest rewrites the asserts of each test module it imports and caches the result beside the
# bytecode, except where PYTHONDONTWRITEBYTECODE is set: there the 12 workers and the controller
# each rewrote every test module again (collecting the three tiers: 6.6 s of CPU per process, 2.6 s
# with the cache, on the 2-core VM, 2026-12-05). One collection with the variable unset writes
# the cache (a failure here is reported by the run that follows).
REWRITTEN    = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q --collect-only -p no:cacheprovider tests/unit tests/daemon tests/e2e > /dev/null 2>&1 || true

# The offline bundle the bundle tests install is built beside the session (one core) into a folder
# of its own (tests/pythons_kit.py, `prebuild`), removed at the end; the tests that need it start
# after the other slow ones and wait for the build if it is still running.
test: $(STAMP)
	@$(BYTECODE)
	@set -e; shared=$$(mktemp -d "$${TMPDIR:-/tmp}/npu-watchdog-test-builds.XXXXXX"); \
	$(BIN)/python -m tests.pythons_kit prebuild "$$shared" > "$$shared/prebuild.log" 2>&1 & builder=$$!; \
	trap 'kill $$builder 2>/dev/null || true; rm -rf "$$shared"' EXIT; \
	$(REWRITTEN); \
	echo "$(PYTEST) $(SCENARIOS) tests/unit tests/daemon tests/e2e   (the bundle is built beside it: $$shared/prebuild.log)"; \
	NPU_WATCHDOG_TEST_SHARED="$$shared" $(PYTEST) $(SCENARIOS) tests/unit tests/daemon tests/e2e; \
	wait $$builder || echo "the bundle build beside the tests failed; the tests that need it said why"

test-unit: $(STAMP)
	@$(BYTECODE)
	$(PYTEST) tests/unit

test-fast: $(STAMP)
	@$(BYTECODE)
	$(PYTEST) tests/unit
	$(PYTEST) $(PARALLEL) -m "not slow" tests/daemon

test-e2e: $(STAMP)
	@$(BYTECODE)
	@$(REWRITTEN)
	$(PYTEST) $(SCENARIOS) tests/e2e

# Rewrite the behaviour goldens (tests/golden_kit.py: the demo's /metrics apart from values and its
# message counts per step and channel) after an intended change; review the diff like code.
golden: $(STAMP)
	NPU_WATCHDOG_GOLDEN=update $(PYTEST) -p no:cacheprovider "tests/e2e/test_demo_sequence.py::test_every_fault_pages_exactly_once"

test-fuzz: $(STAMP)
	NPU_WATCHDOG_FUZZ=long $(BIN)/python -m pytest -q -rs -p no:cacheprovider tests/unit/test_fuzz.py

# The trainer-side heartbeat package (contrib/heartbeat): a standard-library-only wheel to
# `pip install` into the training environment.
heartbeat-wheel: $(STAMP)
	$(BIN)/pip wheel --quiet --no-deps --no-build-isolation -w dist contrib/heartbeat
	@ls dist/npu_watchdog_heartbeat-*.whl

# Offline install bundles (x86_64 and aarch64, wheels for CPython 3.7-3.13): unpack one on a node
# and run its install.sh, which installs with no package index. Checked complete before it is written.
bundle: $(STAMP)
	$(BIN)/python scripts/bundle.py build --out dist

integrations: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,integrations]'

bench: $(STAMP)
	@for b in bench/bench_*.py; do [ -e "$$b" ] || continue; echo "== $$b"; $(BIN)/python $$b || exit 1; done

# Install on this node (as root): venv under $(PREFIX), config in /etc/npu-watchdog (never
# overwritten), the systemd unit; `make install DESTDIR=/tmp/tree` installs into a tree instead.
PREFIX ?= /opt/npu-watchdog
.PHONY: install uninstall

install:
	sh scripts/install.sh install --prefix $(PREFIX) --python $(PYTHON) $(if $(DESTDIR),--root $(DESTDIR))

uninstall:
	sh scripts/install.sh uninstall --prefix $(PREFIX) $(if $(DESTDIR),--root $(DESTDIR))

clean:
	rm -rf $(VENV) $(RUN_DIR) build dist *.egg-info

docs: $(STAMP)
	$(BIN)/python -m watchdog.docsgen
