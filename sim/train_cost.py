"""Time and money to train a number of tokens at a simulated throughput, with fail-stop failures
and checkpoints folded in: the wall clock a campaign takes, not the sum of its steps.

    days      = tokens / (tokens/s) / goodput / 86400
    GPU-hours = days x 24 x GPUs          (every GPU is held, and paid for, the whole wall time)
    dollars   = GPU-hours x price

The goodput is Daly's closed form (sim/checkpointing.py; `ddplab goodput` simulates the same
model and checks it against the formula) at the job's own MTBF, which falls with its GPU count:
independent GPUs' failures superpose, so a job of N GPUs fails N times as often as one GPU.
The default rate is Llama 3's (docs/references.md): 419 unexpected interruptions in 54 days on
16,384 H100s, 0.474 per 1000 GPU-days, 3.09 h MTBF at 16,384 GPUs, 49.5 h at 1,024.
"""

import math
from typing import NamedTuple

from sim.checkpointing import daly_interval_min, job_mtbf_min, wall_per_work_analytic

# Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.4): 419 unexpected
# interruptions over 54 days of pre-training on 16,384 H100 GPUs.
LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_GPUS = 419, 54, 16384
FAILURES_PER_1000_GPU_DAYS = 1000.0 * LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * LLAMA3_GPUS)
RATE_SOURCE = "Llama 3's failure rate, 419 interruptions in 54 days on 16,384 H100s"
# Kokolis et al. (HPCA'25): restarts take 5-20 min; 10 min, as `ddplab goodput` and whatif's
# exclude-and-restart assume.
RESTART_MIN = 10.0
# Assumed, as `ddplab goodput`'s default: docs/references.md's failstop preset spans 0.5-5 min.
CHECKPOINT_MIN = 1.0
SECONDS_PER_DAY = 86400.0


class TrainCost(NamedTuple):
    tokens: float
    tokens_per_s: float  # the simulated step's, failures aside
    gpus: int
    goodput: float  # useful training time / wall time
    mtbf_h: float  # the whole job's
    mtbf_from: str
    restart_min: float
    checkpoint_min: float
    interval_min: float  # Daly's optimum at this MTBF
    failure_free_days: float
    days: float  # wall clock, failures, restarts and checkpoints included
    gpu_hours: float
    usd_per_gpu_hour: float | None
    usd: float | None

    def as_dict(self) -> dict:
        return self._asdict()


def train_cost(
    *,
    tokens: float,
    tokens_per_s: float,
    gpus: int,
    usd_per_gpu_hour: float | None = None,
    failures_per_1000_gpu_days: float = FAILURES_PER_1000_GPU_DAYS,
    restart_min: float = RESTART_MIN,
    checkpoint_min: float = CHECKPOINT_MIN,
    rate_from: str = RATE_SOURCE,
) -> TrainCost:
    """Wall days, GPU-hours and dollars to train ``tokens`` at ``tokens_per_s`` on ``gpus`` GPUs."""
    for name, value in (("tokens", tokens), ("tokens_per_s", tokens_per_s)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: must be > 0 and finite, got {value!r}")
    if usd_per_gpu_hour is not None and not (math.isfinite(usd_per_gpu_hour) and usd_per_gpu_hour > 0):
        raise ValueError(f"usd_per_gpu_hour: must be > 0 and finite, got {usd_per_gpu_hour!r}")
    # Per GPU works as per node (sim/checkpointing.py): the job's rate is gpus x the per-GPU rate.
    mtbf_min = job_mtbf_min(failures_per_1000_node_days=failures_per_1000_gpu_days, nodes=gpus)
    interval_min = daly_interval_min(checkpoint_min=checkpoint_min, mtbf_min=mtbf_min)
    wall_per_work = wall_per_work_analytic(
        mtbf_min=mtbf_min, restart_min=restart_min, checkpoint_min=checkpoint_min, interval_min=interval_min
    )
    failure_free_days = tokens / tokens_per_s / SECONDS_PER_DAY
    goodput = 1.0 / wall_per_work
    days = failure_free_days / goodput
    gpu_hours = days * 24.0 * gpus
    return TrainCost(
        tokens=float(tokens),
        tokens_per_s=float(tokens_per_s),
        gpus=gpus,
        goodput=goodput,
        mtbf_h=mtbf_min / 60.0,
        mtbf_from=f"{gpus:,} GPUs at {failures_per_1000_gpu_days:.3g} failures per 1000 GPU-days, {rate_from}",
        restart_min=restart_min,
        checkpoint_min=checkpoint_min,
        interval_min=interval_min,
        failure_free_days=failure_free_days,
        days=days,
        gpu_hours=gpu_hours,
        usd_per_gpu_hour=usd_per_gpu_hour,
        usd=None if usd_per_gpu_hour is None else gpu_hours * usd_per_gpu_hour,
    )
