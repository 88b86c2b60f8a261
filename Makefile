# The two commands of the README. Both create (once) and reuse .venv from requirements.lock.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The tests run in one worker process per core (pytest-xdist); a test module stays on one worker,
# so its module-scoped fixtures (a trained model, a nightly run) are built once. The modules are
# handed out in the order tests/conftest.py gives them (the longest first), not xdist's own.
PARALLEL := -n auto --dist loadscope --no-loadscope-reorder
# pytest's temporary folders, one per checkout. pytest's default (/tmp/pytest-of-USER, shared by
# every checkout and user session) keeps anyone's three newest runs and deletes the older ones
# when a run ends: several seconds of disk work (tens of seconds on a busy disk) after the last
# test. Here the previous run's folder is moved aside and deleted in the background while the
# next run collects its tests.
TEST_TMP := $(or $(TMPDIR),/tmp)/hulk-tests$(subst /,-,$(CURDIR))
PYTEST := $(BIN)/python -m pytest -q $(PARALLEL) --basetemp=$(TEST_TMP)
define clear_test_tmp
	if [ -d $(TEST_TMP) ]; then old=$$(mktemp -d $(TEST_TMP).old.XXXXXX) \
		&& mv $(TEST_TMP) $$old/ && (rm -rf $$old > /dev/null 2>&1 &); fi
endef

.PHONY: main test test-fast lint

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch==2.13.0 is pinned in the lock: pip takes the CPU build from this machine's disk.
	# pip compiles every installed module to bytecode in one process (about two thirds of its
	# time); compileall does the same on every core. Like pip, it skips files that do not
	# compile under this Python (a few of torch's tests are written for newer ones). The
	# packages' own test folders (a fifth of the files; nothing imports them) are left out.
	$(BIN)/pip install --quiet --no-compile -r requirements.lock
	$(BIN)/python -m compileall -q -j 0 -x '/tests?/' $(VENV)/lib > /dev/null || true
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

## main: set up, then run the whole pipeline on the embedded default data
main: $(STAMP)
	$(BIN)/hulk run

## test: set up, then run lint, the type check and the whole test suite
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(clear_test_tmp)
	$(PYTEST)

## test-fast: lint, the type check and the tests not marked slow (no flows, DVC or process pools)
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(clear_test_tmp)
	$(PYTEST) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
