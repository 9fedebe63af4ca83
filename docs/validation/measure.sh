#!/usr/bin/env bash
# The measurements behind docs/validation.md: on the emulated two-host home lab
# (`ddplab netlab`, root), one probe per link rate (what calibrate reads) and
# training runs in 16 configurations (what validate compares against; the
# calibration never sees them). About 20 minutes on a 2-core box.
#
#   bash docs/validation/measure.sh [OUT]      (default measurements/validation)
set -euo pipefail
out=${1:-measurements/validation}
ddplab=${DDPLAB:-.venv/bin/ddplab}
model=(--model gpt2-mini --seq-len 128)

probe() {  # RATE
  local dir="$out/$1/probe"
  [ -f "$dir/probe-rank0001.jsonl" ] && tail -n1 "$dir/probe-rank0000.jsonl" | grep -q '"complete"' && return
  rm -rf "$dir"
  "$ddplab" netlab run --name val --rate "$1" -- probe --out "$dir" "${model[@]}" \
    --ops allreduce --sizes 4K:64M --iters 20 --warmup 3 --micro-batches 1,2,4,8
}

train() {  # RATE NAME OPTIONS...
  local rate=$1 name=$2 dir="$out/$1/train-$2"
  shift 2
  [ -f "$dir/train-rank0001.jsonl" ] && tail -n1 "$dir/train-rank0000.jsonl" | grep -q '"complete"' && return
  rm -rf "$dir"
  "$ddplab" netlab run --name val --rate "$rate" -- train --out "$dir" "${model[@]}" --steps 12 "$@"
}

for rate in 1gbit 200mbit 10gbit; do probe "$rate"; done

train 1gbit base
train 1gbit cap5 --bucket-cap-mb 5
train 1gbit cap100 --bucket-cap-mb 100
train 1gbit accum4 --grad-accum 4
train 1gbit fp16 --comm-hook fp16
train 1gbit mb8 --micro-batch 8
train 1gbit mb2 --micro-batch 2
train 1gbit no-overlap --no-overlap
train 1gbit straggler1.5 --straggler 1:1.5
train 200mbit base
train 200mbit fp16 --comm-hook fp16
train 200mbit accum4 --grad-accum 4
train 200mbit cap5 --bucket-cap-mb 5
train 10gbit base
train 10gbit cap5 --bucket-cap-mb 5
train 10gbit straggler2 --straggler 1:2
