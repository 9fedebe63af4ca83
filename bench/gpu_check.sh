#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): probe, train, calibrate and validate gpt2-760m on one
# GPU in fp32, bf16-amp and bf16-amp + torch.compile (~5 min on an H100-class GPU); writes
# measurements/gpu-<device>.txt. `--cpu` runs the same steps on CPU with gpt2-tiny.
#
#   bash bench/gpu_check.sh [--cpu] [--out DIR] [--report FILE]
#
# Python: the project's .venv when there is one, else python3 (a GPU machine's own torch).
# A machine without simpy can carry its wheel in .whl/ (pip download simpy into .whl).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
if ! "$PY" -c "import simpy" 2>/dev/null && [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
exec "$PY" bench/gpu_check.py "$@"
