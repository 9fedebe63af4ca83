# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Both build .venv idempotently. The venv sees the system site-packages so a torch
# the user already has (CUDA, ROCm, MPS) is kept; only when none is importable is
# $(TORCH_SPEC) installed (here a CPU wheel on local disk; elsewhere pass
# TORCH_PIP_ARGS="--index-url <your CPU wheel index>" to avoid a CUDA download).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
STAMP := $(VENV)/.installed

.PHONY: demo test lint browser bench record clean

# The netlab tests need iproute2 and iptables; as root with apt, install what is
# missing (best effort: without them those tests skip and say why).
SYSDEPS := iproute2:ip iptables:iptables util-linux:taskset

# Holistic Trace Analysis, which tests/test_traces_public.py holds calibrate/trace_fit.py to, goes
# in without the jupyterlab it declares (~40 packages), which its analyses never import; the test
# extra carries what they do import (pandas, plotly, networkx, pydot).
$(STAMP): pyproject.toml
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for d in $(SYSDEPS); do command -v $${d#*:} >/dev/null || missing="$$missing $${d%%:*}"; done; \
	  if [ -n "$$missing" ]; then echo "installing$$missing"; \
	    (apt-get update -qq && apt-get install -y -qq $$missing >/dev/null) || echo "could not install$$missing"; fi; \
	fi
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps "HolisticTraceAnalysis>=0.5"
	touch $(STAMP)

# The whole loop on this machine (workflow/demo.py): probe, train, calibrate, validate,
# simulate 2..1024 ranks, report, into runs/demo/ (report.html). A rerun reuses the
# finished stages; DEMO_ARGS="--fresh" redoes them, "--quick" is the short version.
DEMO_ARGS ?=
demo: $(STAMP)
	$(VENV)/bin/ddplab demo --out runs/demo $(DEMO_ARGS)
	@echo "ddplab is in $(VENV)/bin: 'source $(VENV)/bin/activate' puts it on the PATH (or type $(VENV)/bin/ddplab)"

# After a change to the model: the public record `simulate` prints beside a step time
# (calibrate/record.py); tests/test_validation_public.py fails until it is rewritten.
record: $(STAMP)
	$(PY) -m workflow.public_record

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The report's browser test needs Debian's chromium: as root with apt, install it when
# missing (best effort: without it that test skips and says why).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -qq chromium >/dev/null 2>&1 || \
	   (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)); } || \
	  echo "chromium not installed: the report's browser test will skip"

# Two passes at once: the `serial` tests (real runs, tc-shaped links, timing: tests/conftest.py)
# one at a time, and beside them the rest on PURE_WORKERS pytest-xdist workers: all but two
# cores on a bigger box, all of them on a small one. Run one after the other they left a core
# idle through the serial pass's waits and one-process stretches (818 s against 691 s together
# on 2 cores, 2026-12-03); with one worker beside them the box was still idle 10-16 % of the
# time (the serial tests' timeouts), with two the other pass took 414 s instead of 600. Then the
# `quiet` ones, alone: predictions of a real run from a probe of this box, which a stream beside
# them would move past their bounds. That pass and the serial one collect only their modules
# (tests/conftest.py quiet_paths, serial_paths): collecting the whole suite takes a 2-core box
# 10-13 s, as pytest rewrites every test module's asserts and PYTHONDONTWRITEBYTECODE, where
# set, keeps it from caching them. The serial pass prints as it goes, the other's output follows
# it (from .pytest_cache, so a Ctrl-C leaves nothing in /tmp); all three always run, and any
# failing fails the target.
PURE_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n > 3 ? n - 2 : n )))
test_files = $(shell $(PY) -c 'import sys; sys.path[:0] = ["tests"]; import conftest; print(*conftest.$(1)())')
test: lint browser
	@mkdir -p .pytest_cache; log=.pytest_cache/other-tests.log; \
	  $(PY) -m pytest -q -n $(PURE_WORKERS) --dist loadfile -m "not serial" > $$log 2>&1 & pure=$$!; \
	  $(PY) -m pytest -q -m "serial and not quiet" $(call test_files,serial_paths); b=$$?; \
	  wait $$pure; a=$$?; \
	  echo "--- the other tests ($(PURE_WORKERS) worker(s), run beside the serial ones):"; \
	  cat $$log; rm -f $$log; \
	  echo "--- the quiet ones, alone:"; \
	  $(PY) -m pytest -q -m quiet $(call test_files,quiet_paths); c=$$?; \
	  [ $$a = 0 ] && [ $$b = 0 ] && [ $$c = 0 ]

bench: $(STAMP)
	$(PY) bench/sim_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
