#!/usr/bin/env bash
# One configuration again and again: how far identical DDP runs' levels scatter on this box, with
# no configuration for the model to get wrong (docs/validation.md, "What the plain KS bar asks of
# this box"). One probe at 1 Gbit/s, then N training runs of the base configuration back to back,
# about 2 minutes each; the lab, the probe and the runs: docs/validation/lab.sh.
#
#   bash docs/validation/repeat.sh [OUT] [N]     (default measurements/validation-repeat, 6)
set -euo pipefail
out=${1:-measurements/validation-repeat}
n=${2:-6}
source docs/validation/lab.sh
start_sitting

probe 1gbit
for i in $(seq "$n"); do
  train 1gbit "base$i"
done
echo "sitting done: $(date -u +%FT%TZ)"
