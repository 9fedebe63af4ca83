# Shared by docs/validation/measure.sh and repeat.sh (sourced, not run): the emulated two-host home
# lab (`ddplab netlab`, root), the model, and one probe or training run at a link rate. The caller
# sets `out` and calls start_sitting first.
#
# A sitting is all or nothing: probes and runs from different sittings disagree by more than the
# model's error (the shared box's compute moved 4 % between two sittings, docs/validation.md), so
# start_sitting clears OUT's earlier runs. While it runs, /tmp/dist-measuring exists (others on the
# box hold back heavy work), and docs/validation/cpu_watch.py logs the CPU time other processes took
# to OUT/cpu-watch.jsonl.

# Each rank's heap touched at start (realrun/cpu_alloc.py), so that its first steps run at the
# steady pace instead of faulting the heap in over six of them.
export DDPLAB_CPU_PREFAULT_GIB=${DDPLAB_CPU_PREFAULT_GIB:-2}
ddplab=${DDPLAB:-.venv/bin/ddplab}
model=(--model gpt2-mini --seq-len 128)
steps=102

start_sitting() {
  rm -rf "$out"/{200mbit,1gbit,10gbit} "$out/cpu-watch.jsonl"
  mkdir -p "$out"
  touch /tmp/dist-measuring
  trap 'rm -f /tmp/dist-measuring' EXIT
  python3 docs/validation/cpu_watch.py $$ "$out/cpu-watch.jsonl" &
}

# The sweep under the scheduler the training runs have (--sched other): each emulated host's
# gloo threads share its one core with compute, and under the normal scheduler a hand-off
# between them can wait for a tick; the probe's default (fifo) times the link without that,
# and predicted these runs' 63 MB allreduce 12-27 ms short (docs/validation.md, fourth sitting).
probe() {  # RATE
  "$ddplab" netlab run --name val --rate "$1" -- probe --out "$out/$1/probe" "${model[@]}" \
    --ops allreduce --sizes 4K:64M --iters 20 --warmup 3 --micro-batches 1,2,4,8 --sched other
}

train() {  # RATE NAME OPTIONS...
  local rate=$1 name=$2
  shift 2
  "$ddplab" netlab run --name val --rate "$rate" -- train --out "$out/$rate/train-$name" "${model[@]}" \
    --steps $steps "$@"
}
