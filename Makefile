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

.PHONY: demo test lint bench clean

# The netlab tests need iproute2 and iptables; as root with apt, install what is
# missing (best effort: without them those tests skip and say why).
SYSDEPS := iproute2:ip iptables:iptables util-linux:taskset

$(STAMP): pyproject.toml
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for d in $(SYSDEPS); do command -v $${d#*:} >/dev/null || missing="$$missing $${d%%:*}"; done; \
	  if [ -n "$$missing" ]; then echo "installing$$missing"; \
	    (apt-get update -qq && apt-get install -y -qq $$missing >/dev/null) || echo "could not install$$missing"; fi; \
	fi
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

# Until the full measured loop lands, the demo is the arithmetic and the simulator:
# the seed's cost table, then each platform swept from 2 to 1024 ranks, with
# records, Chrome traces and a scaling plot per platform under runs/demo/.
SWEEP := 2,8,16,64,256,1024
demo: $(STAMP)
	$(VENV)/bin/ddplab cost
	@for s in homelab-1gbe h100-1024 mi300x-1024; do \
	  echo; $(VENV)/bin/ddplab simulate $$s --sweep-ranks $(SWEEP) --steps 100 --out runs/demo/$$s || exit $$?; \
	done

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/sim_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
