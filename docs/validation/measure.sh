#!/usr/bin/env bash
# The measurements behind docs/validation.md, in one sitting: on the emulated two-host home lab
# (`ddplab netlab`, root), per link rate one probe (what calibrate reads) and then that rate's
# training runs (what validate compares against; the calibration never sees them). Ten
# configurations of 102 steps each (validate drops the first 2), about 50 minutes on a 2-core box.
# The lab, the probe and the runs: docs/validation/lab.sh.
#
#   bash docs/validation/measure.sh [OUT]      (default measurements/validation)
#
# Left out for time: the accumulation runs (--grad-accum 4: 3.8 s a step at 1 Gbit/s, 5.9 s at
# 200 Mbit/s, 16 minutes for both at 102 steps), --micro-batch 8, the 100 MiB cap (at 1 Gbit/s
# within 1 % of base in the 12-step sitting of 2026-11-29) and 10 Gbit/s cap 5.
set -euo pipefail
out=${1:-measurements/validation}
source docs/validation/lab.sh
start_sitting

probe 1gbit
train 1gbit base
train 1gbit cap5 --bucket-cap-mb 5
train 1gbit fp16 --comm-hook fp16
train 1gbit mb2 --micro-batch 2
train 1gbit no-overlap --no-overlap
train 1gbit straggler1.5 --straggler 1:1.5
probe 200mbit
train 200mbit base
train 200mbit fp16 --comm-hook fp16
probe 10gbit
train 10gbit base
train 10gbit straggler2 --straggler 1:2
echo "sitting done: $(date -u +%FT%TZ)"
