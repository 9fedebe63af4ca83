"""What a run will cost before it runs: the peak memory and the CPU time of a simulation
(sim/engine.py, sim/fsdp.py) and of a goodput campaign (sim/goodput.py), from the sizes
alone. Arithmetic only: nothing here allocates per rank or per step, and nothing reads the
machine; workflow/limits.py compares the estimates with what this machine has.

The constants are upper envelopes of what tracemalloc and the wall clock measured on the
2-core development machine: the engine on h100-1024 at 8-65,536 ranks and 10-4000 steps, with
and without interference, accumulation, records and FSDP (tests/test_reliability_inputs.py
holds each estimate above a measured run). A faster machine finishes sooner than ``seconds`` says;
memory does not depend on speed.
"""

import math
from typing import NamedTuple

from sim.buckets import build_buckets
from sim.config import SHARDED_MODES, Scenario
from sim.workload import measured_ready_order

# --- The engines' memory: slopes of tracemalloc's peak on h100-1024 at 64-16,384 ranks and
# 10-4000 steps (tests/test_reliability_inputs.py holds the estimate above measured runs),
# rounded up. Statistics are kept online (sim/online.py), so without records nothing grows with
# ranks x steps.
# Per step: the (steps,) arrays of sim/results.py (times, ends, comm busy, four per-step means),
# measured 56-57 B.
BYTES_PER_STEP = 64
# Per rank: the workload's arrays, the online sums and a step's scratch (sim/ready.py),
# measured 184 B; each micro-step past the first adds its noise, forward and backward (34 B).
BYTES_PER_RANK = 256
BYTES_PER_RANK_MICRO = 48
# Streaming medians (`simulate --out`): five P-square markers and positions per rank and their
# temporaries, measured 170 B.
MEDIAN_BYTES_PER_RANK = 200
# Records (`--records`): four float64 (steps, ranks) tables, measured 28-40 B per rank-step;
# written out, np.median copies the compute table (output/export.py).
RECORD_BYTES_PER_RANK_STEP = 40
EXPORT_BYTES_PER_RANK_STEP = 8
# Writing them (records.npz, deflated by output/export.py): ~20 B per rank-step on disk, 6-8 us per
# rank-step (h100-64k's 13 M in ~80 s; h100-1024 x 2000 steps in 16 s on a loaded machine).
RECORD_WRITE_SECONDS_PER_RANK_STEP = 8e-6
# Interference: DDP bends its ready lines (sim/ready.py ReadyBent): a step's end of backward and
# np.where's temporaries, measured ~1 B per rank over the plain path at 4096 ranks; 48 B bounds
# them. FSDP's per-rank stream ends, one per collective of a micro-step (measured 28 B per
# rank-unit, 39 B with hsdp's allreduces, ~4 B per further micro-step): 100 B is a bound.
DDP_GAMMA_BYTES_PER_RANK = 48
FSDP_WORK_BYTES_PER_RANK_UNIT_MICRO = 100
# Whatever the size: the workload, its buckets and collectives, the Chrome trace window
# (measured 0.3-2.4 MB at 64-1024 ranks).
FIXED_BYTES = 8e6

# --- The engines' time on the development machine (measured best-to-worst over repeats; the
# larger is kept; measurements/sim-speed.txt, bench/sim_speed.py, on a box shared with other
# jobs). DDP per bucket and step: the stream's scalar recurrence (sim/engine.py stream), ~3 us,
# ~6 us with interference (each launch bent by the collectives before it). Per rank and step:
# ~100-200 ns of element-wise work whatever the buckets (sim/ready.py), ~150 ns more with
# interference (the end of backward bent, and the ranks' times interpolated); ~50 ns per
# micro-step; ~75-100 ns for the streaming median (P-square).
DDP_SECONDS_PER_BUCKET_STEP = 4e-6
DDP_GAMMA_SECONDS_PER_BUCKET_STEP = 4e-6
DDP_SECONDS_PER_RANK_STEP = 100e-9
DDP_GAMMA_SECONDS_PER_RANK_STEP = 150e-9
SECONDS_PER_RANK_MICRO_STEP = 60e-9
MEDIAN_SECONDS_PER_RANK_STEP = 110e-9
# FSDP per unit and micro-step: ~65 us of program per step (~220 us with interference: each
# segment builds the busy intervals issued before it). Per rank and unit (sim/fsdp.py's two
# passes), measured at 65,536 ranks: without interference the closed form ~5 ns (fsdp) to
# ~14 ns (hsdp, whose compute-bound steps split the ranks a few times), the in-place pass it
# gives way to ~12-22 ns; 30 ns bounds a closed form given up at its last split and the
# in-place pass after it. With interference every rank runs in place, each segment slowed by
# the collectives issued before it: ~80 ns x 2.7, as before the two passes (52-168 s at
# 65,536 ranks x 1000 steps then, 128-168 s with interference).
FSDP_SECONDS_PER_UNIT_MICRO = 70e-6
FSDP_GAMMA_SECONDS_PER_UNIT_MICRO = 250e-6
FSDP_SECONDS_PER_RANK_UNIT_MICRO = 30e-9
FSDP_GAMMA_SECONDS_PER_RANK_UNIT_MICRO = 216e-9

# --- sim/reference.py, the SimPy model of a DDP step: a process per rank and per bucket
# collective, ~10-20 us an event, a few events per rank-bucket (~1 s a step at 256 ranks and
# 80 buckets). Past this many ranks `--engine simpy` refuses and names the fast engine.
REFERENCE_MAX_RANKS = 256

# --- Goodput campaigns (sim/goodput.py): the events are failures and stalls, ~25-45 us each
# (measured: `ddplab goodput --mtbf-h 49.5` and x10 its work: 56k and 560k failures).
SECONDS_PER_CAMPAIGN_EVENT = 45e-6
SECONDS_PER_CAMPAIGN = 1e-3  # a campaign's setup (generators, SimPy environment)
STALL_SIGMA = 1.2  # sim/goodput.py's log-sd of stall durations (sim.goodput imports simpy: not here)


class SimCost(NamedTuple):
    """One simulation: its peak memory, what it keeps afterwards, and its CPU time here."""

    peak_bytes: float
    kept_bytes: float  # the result, held while the next scale of a sweep runs
    seconds: float


def _buckets(sc: Scenario) -> int:
    t = sc.training
    return len(
        build_buckets(
            sc.model.shape,
            sc.seq_len,
            bytes_per_grad=t.dtypes.grad_bytes,
            bucket_cap_mb=t.bucket_cap_mb,
            first_bucket_mb=t.effective_first_bucket_mb,
            ready_order=measured_ready_order(sc),
        )
    )


def simulation_cost(sc: Scenario, *, export: bool = False, records: bool = False) -> SimCost:
    """What `simulate(sc)` will need; ``export``: with output/export.py's write_result (and the
    streaming medians it writes), ``records``: keeping every rank's every step."""
    n, steps, k = sc.ranks, float(sc.steps), sc.training.grad_accum
    gamma = sc.compute.interference_gamma > 0
    per_rank = BYTES_PER_RANK + BYTES_PER_RANK_MICRO * (k - 1)
    if export and not records:
        per_rank += MEDIAN_BYTES_PER_RANK
    if sc.training.mode in SHARDED_MODES:  # hsdp: a third more collectives per unit, the same order
        units = sc.model.shape.n_layer + 1
        work_bytes = FSDP_WORK_BYTES_PER_RANK_UNIT_MICRO * units * k
        rank_unit_s = FSDP_GAMMA_SECONDS_PER_RANK_UNIT_MICRO if gamma else FSDP_SECONDS_PER_RANK_UNIT_MICRO
        seconds = (FSDP_GAMMA_SECONDS_PER_UNIT_MICRO if gamma else FSDP_SECONDS_PER_UNIT_MICRO) * units * k
        seconds += n * rank_unit_s * units * k
    else:
        nb = _buckets(sc)
        work_bytes = DDP_GAMMA_BYTES_PER_RANK if gamma else 0.0
        seconds = nb * (DDP_SECONDS_PER_BUCKET_STEP + (DDP_GAMMA_SECONDS_PER_BUCKET_STEP if gamma else 0.0))
        seconds += n * (DDP_SECONDS_PER_RANK_STEP + (DDP_GAMMA_SECONDS_PER_RANK_STEP if gamma else 0.0))
        seconds += n * k * SECONDS_PER_RANK_MICRO_STEP
    if export and not records:
        seconds += n * MEDIAN_SECONDS_PER_RANK_STEP
    if export and records:  # per step here: the write after the run, spread over its steps
        seconds += n * RECORD_WRITE_SECONDS_PER_RANK_STEP
    table_bytes = steps * n * RECORD_BYTES_PER_RANK_STEP if records else 0.0
    kept = FIXED_BYTES + steps * BYTES_PER_STEP + n * per_rank + table_bytes
    peak = kept + n * work_bytes + (steps * n * EXPORT_BYTES_PER_RANK_STEP if export and records else 0.0)
    return SimCost(peak_bytes=peak, kept_bytes=kept, seconds=steps * seconds)


def sweep_cost(costs: list[SimCost]) -> SimCost:
    """Scales run one after another; each result is still held while the next one runs."""
    held = [0.0] + [c.kept_bytes for c in costs[:-1]]
    peak = max(c.peak_bytes + h for c, h in zip(costs, held, strict=True))
    return SimCost(peak_bytes=peak, kept_bytes=costs[-1].kept_bytes, seconds=sum(c.seconds for c in costs))


# ---------------------------------------------------------------------------------------------------------------
# Goodput campaigns


class CampaignCost(NamedTuple):
    """Every simulated campaign of `ddplab goodput` together: the failures and stalls expected
    (their SimPy events are the work), the CPU time here, and what makes the number large."""

    events: float  # math.inf when it overflows a float
    seconds: float
    kind: str  # what makes it large: restart | segment | stalls | work
    why: str  # the same in words


def _log_expm1(x: float) -> float:
    """log(e^x - 1) without overflow."""
    return x + math.log1p(-math.exp(-x)) if x > 30.0 else math.log(math.expm1(x))


def stall_terms(per_min: float, mean_min: float, timeout_min: float) -> tuple[float, float]:
    """(failures per minute that stalls add by outlasting the timeout, minutes stalled per minute
    trained) for lognormal stalls of log-sd STALL_SIGMA with this mean (sim/goodput.py Stalls)."""
    if per_min <= 0:
        return 0.0, 0.0
    mu = math.log(mean_min) - STALL_SIGMA**2 / 2
    z = (math.log(timeout_min) - mu) / STALL_SIGMA
    p_timeout = 0.5 * math.erfc(z / math.sqrt(2))
    # E[min(D, T)] = E[D; D < T] + T P(D >= T); E[D; D < T] = mean x Phi(z - sigma).
    below = mean_min * 0.5 * math.erfc(-(z - STALL_SIGMA) / math.sqrt(2))
    return per_min * p_timeout, per_min * (below + timeout_min * p_timeout)


def _log_wall_per_work(mtbf_min: float, restart_min: float, checkpoint_min: float, interval_min: float) -> float:
    """log of sim/checkpointing.py's wall_per_work_analytic, finite where e^(R/M) is not."""
    m = mtbf_min
    return math.log(m) + restart_min / m + _log_expm1((interval_min + checkpoint_min) / m) - math.log(interval_min)


def campaign_cost(
    *,
    work_min: float,
    mtbf_min: float,
    restart_min: float,
    checkpoint_min: float,
    intervals_min: list[float],
    stalls_per_min: float = 0.0,
    stall_mean_min: float = 5.0,
    timeout_min: float = 10.0,
) -> CampaignCost:
    """One campaign of ``work_min`` per interval in ``intervals_min`` (the first with stalls:
    sim/goodput_estimate.py's estimate; the rest without: its best-interval grid). Failures are a
    Poisson process in wall time, so a campaign sees wall / M of them, wall from Daly's closed
    form; stalls that time out add to the failure rate, and stalled minutes to the wall."""
    fail_add, stalled = stall_terms(stalls_per_min, stall_mean_min, timeout_min)
    m_first = 1.0 / (1.0 / mtbf_min + fail_add)
    first = (m_first, intervals_min[0], stalls_per_min, stalled)
    log_events = [
        _log_events(work_min, m, restart_min, checkpoint_min, tau, per_min, share)
        for m, tau, per_min, share in [first] + [(mtbf_min, tau, 0.0, 0.0) for tau in intervals_min[1:]]
    ]
    top = max(log_events)
    log_total = top + math.log(sum(math.exp(x - top) for x in log_events))
    events = math.exp(log_total) if log_total < 700 else math.inf
    seconds = events * SECONDS_PER_CAMPAIGN_EVENT + len(intervals_min) * SECONDS_PER_CAMPAIGN
    kind, why = _why(work_min, m_first, restart_min, checkpoint_min, intervals_min[0], stalls_per_min, stalled)
    if kind in ("restart", "segment") and fail_add > 1.0 / mtbf_min:
        kind, why = "stalls", f"{why} (most failures are stalls that outlast the timeout)"
    return CampaignCost(events=events, seconds=seconds, kind=kind, why=why)


def _log_events(work_min, m, restart_min, checkpoint_min, interval_min, stalls_per_min, stalled) -> float:
    """log of one campaign's failures and stall arrivals: its wall x their rate."""
    log_wall = math.log(work_min) + _log_wall_per_work(m, restart_min, checkpoint_min, interval_min)
    return log_wall + math.log1p(stalled) + math.log(1.0 / m + stalls_per_min)


def _why(work_min, m, restart_min, checkpoint_min, interval_min, stalls_per_min, stalled) -> tuple[str, str]:
    """The factor that makes the campaign long, and it in words: the largest of the logarithms
    that add up to the events' (e^(R/M), e^((tau+delta)/M), stalls: the wall they add and their
    arrivals per failure, W/M)."""
    segment = interval_min + checkpoint_min
    factors = {
        "restart": restart_min / m,
        "segment": segment / m,
        "stalls": math.log1p(stalled) + math.log1p(stalls_per_min * m),
        "work": math.log(max(work_min / m, 1.0)),
    }
    kind = max(factors, key=factors.get)
    if kind == "restart":
        words = (
            f"a {restart_min:g} min restart completes only once in e^(R/M) = e^{restart_min / m:.4g} tries"
            f" when failures come every {m:.3g} min: the job cannot progress"
        )
    elif kind == "segment":
        words = (
            f"a {segment:.4g} min segment (interval + checkpoint) survives only once in e^((tau+delta)/M)"
            f" = e^{segment / m:.4g} tries when failures come every {m:.3g} min: the job cannot progress"
        )
    elif kind == "stalls":
        words = (
            f"stalls arrive {stalls_per_min:.3g} times a minute and keep the job waiting {stalled:.3g} x as long"
            " as it trains"
        )
    else:
        words = f"{work_min / m:.3g} MTBFs of work per campaign"
    return kind, words
