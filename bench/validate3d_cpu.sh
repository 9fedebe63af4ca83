#!/bin/bash
# One repeat of docs/parallelism.md's "Prediction" table (issue 28): a fresh probe and calibration,
# then a 2-rank TP run and 2-stage PP runs (1F1B, GPipe) of llama-tiny (or $MODEL), and `ddplab validate`.
# usage: bench/validate3d_cpu.sh OUTDIR   (about 2-3 minutes on the 2-core box)
#        MODEL=llama-mini SEQ=256 MB=4 bench/validate3d_cpu.sh OUTDIR   (a model whose steps are compute)
set -e
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
PY=${PYTHON:-python}
O=$1
MODEL=${MODEL:-llama-tiny} SEQ=${SEQ:-32} MB=${MB:-2}
mkdir -p "$O"
$PY -m ddplab probe --nproc 2 --out "$O/probe" --model "$MODEL" --seq-len "$SEQ" --sizes 64K:4M --iters 12 \
    --warmup 2 --micro-batches 1,2,4,8 --parts collectives,link,compute,overlap,tp,pp > "$O/probe.log" 2>&1
$PY -m ddplab calibrate "$O/probe" -o "$O/calib.json" > "$O/calib.log" 2>&1
C="--model $MODEL --seq-len $SEQ --micro-batch $MB --grad-accum 4 --steps 20"
$PY -m ddplab train --nproc 2 --tp 2 $C --out "$O/tp2" > "$O/tp2.log" 2>&1
$PY -m ddplab train --nproc 2 --pp 2 --pp-schedule 1f1b $C --out "$O/pp2" > "$O/pp2.log" 2>&1
$PY -m ddplab train --nproc 2 --pp 2 --pp-schedule gpipe $C --out "$O/pp2g" > "$O/pp2g.log" 2>&1
$PY -m ddplab validate --calib "$O/calib.json" "$O/tp2" "$O/pp2" "$O/pp2g" | tee "$O/validate.txt"
