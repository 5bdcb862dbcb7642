# Two entry points: `make demo` and `make test`. Both create .venv with everything in it
# (MPICH from PyPI, numba, pyspark, h5py, ...) on first use; they need python3.11, Java 17, make.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# the fast tier runs on this many pytest-xdist workers; the full suite runs one test at a time (its
# timing-sensitive tests, kills mid-run and live logs, and the machine-wide Slurm and namespace
# hosts did not hold up beside each other)
TEST_JOBS ?= 2

.PHONY: demo test fast setup warm clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found (set PYTHON=...)"; exit 2; }
	@echo "make setup: creating $(VENV) and installing mpi-join with its dependencies (about 90 s)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@echo "make setup: done"
	touch $(STAMP)

# Spark's class archive for this machine (README "Spark start-up"): built once, about two minutes;
# checked in a moment when it is there
warm: $(STAMP)
	$(BIN)/mpi-join warm-spark

demo: $(STAMP)
	$(BIN)/mpi-join demo -n 4

test: $(STAMP) warm
	$(BIN)/python -m pytest -q --durations=20

fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_JOBS) --dist loadgroup

clean:
	rm -rf $(VENV) demo-run .pytest_cache .hypothesis
