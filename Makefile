# Two entry points: `make demo` and `make test`. Both create .venv with everything in it
# (MPICH from PyPI, numba, pyspark, h5py, ...) on first use; they need python3.11, Java 17, make.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pytest-xdist workers: the fast tier, and the full suite's second phase, the `serial` modules
# (the machine-wide Slurm daemon, namespace hosts and Spark cluster, which did not hold up beside
# the first phase), one module beside another; its third phase, the `alone` tests (adaptive
# decisions that follow load measured over wall time, signals), runs one test at a time
TEST_JOBS ?= 2
# the full suite's first phase: a third worker fills the time the other two wait (JVMs starting,
# paced input, sleeps between the batches of a growing log) on 2 cores
SUITE_JOBS ?= 3

# Apache Flink's environment for the Flink tier (tests/test_flink.py): the `flink` extra of
# pyproject.toml, installed alone (its pins conflict with pyspark's and pyarrow's; see there)
FLINK_VENV := .venv-flink
FLINK_STAMP := $(FLINK_VENV)/.installed

.PHONY: demo test fast setup warm clean flink flink-test services-test

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

flink: $(FLINK_STAMP)

$(FLINK_STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "make flink: java not found (Flink needs Java 17)"; exit 2; }
	@echo "make flink: creating $(FLINK_VENV) with the flink extra of pyproject.toml (about a minute)..."
	$(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/pip install --quiet --upgrade pip
	$(FLINK_VENV)/bin/pip install --quiet $$($(PYTHON) -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["flink"]))')
	touch $(FLINK_STAMP)

# the Flink tier alone (make test runs it too)
flink-test: $(STAMP) flink
	$(BIN)/python -m pytest -q -m flink

demo: $(STAMP)
	$(BIN)/mpi-join demo -n 4

# the full suite in three phases (every test but the Flink and services tiers and the `serial`
# ones on SUITE_JOBS workers, then the `serial` modules on TEST_JOBS, one module a worker, then
# the `alone` tests one at a time), then the Flink tier and the services tier, each on its own
test: $(STAMP) warm flink
	$(BIN)/python -m pytest -q -m "not serial and not flink and not services" -n $(SUITE_JOBS) --dist loadgroup --durations=20
	$(BIN)/python -m pytest -q -m "serial and not alone and not flink and not services" -n $(TEST_JOBS) --dist loadgroup --durations=10
	$(BIN)/python -m pytest -q -m "alone and not flink and not services" --durations=10
	$(BIN)/python -m pytest -q -m flink -n $(TEST_JOBS) --dist loadgroup
	$(BIN)/python -m pytest -q -m services --durations=10

# the services tier alone: real HDFS, YARN and Kafka started by `mpi-join dev-services` (make test runs it too)
services-test: $(STAMP)
	$(BIN)/python -m pytest -q -m services --durations=10

fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_JOBS) --dist loadgroup

clean:
	rm -rf $(VENV) $(FLINK_VENV) demo-run .pytest_cache .hypothesis
