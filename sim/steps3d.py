"""Many steps of a 3D-parallel job: sim/parallel3d.py's step (``step_3d``) replayed step after
step, each with its own draws, and what every GPU did in each, kept as sim/engine.py keeps
DDP's (the RANK_FIELDS of sim/online.py, plus the bubble).

Draws, in sim/engine.py's spirit: the persistent speeds once (``group_factors``: the spread and
the stragglers), then every step each GPU's per-operation noise (``op_noise``), in that order
from the scenario's seed, so that step 0 is ``simulate_3d``'s one step exactly. The network's
per-collective jitter (``network.jitter_sigma`` or ``jitter_samples``) comes from its own
stream (seed, JITTER_STREAM), so turning it on changes no compute draw: it is drawn for each
bucket of each stage's data-parallel reduction, for each of the stage's tp concurrent groups
(one per TP position), and the stage's reduction ends with its slowest group's. Not jittered:
the TP collectives (inside the block times), the sends between stages, FSDP's first gather and
the tied embedding's allreduce.

Per GPU and step (rank r in stage i = r // (tp dp), replica j; the ranks of a TP group share
their group's numbers) the step splits exactly:

    step = compute + bubble + exposed_comm + straggler_wait + optimizer

- compute: its stage's forwards and backwards in its pipeline (the exposed TP collectives in them);
- exposed_comm: the stage's data-parallel reduction (and the tie) after the slowest replica's
  last backward of the stage, and under fsdp, hsdp and zero1 the part of the weight gather before the
  first forward that the stage waited for (``gather_exposed``);
- bubble: the idle the same GPU has in this layout on identical GPUs without noise (the
  schedule's fill and drain, stage imbalance, the other stages' later reductions), at most its
  idle time in this step;
- straggler_wait: the rest of its idle time: waiting for a slower GPU (in its own pipeline, in
  another replica at the reduction, in another stage at the step's end). ``collective_wait_s``
  is the same number, as `ddplab stragglers` reads a rank's wait from it.
"""

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from sim.config import Scenario
from sim.noise import SizePools, comm_multipliers
from sim.online import RANK_FIELDS
from sim.parallel3d import (
    Layout,
    Step3D,
    StepCosts,
    group_factors,
    layout,
    memory_by_stage,
    op_noise,
    step_3d,
    step_costs,
)

JITTER_STREAM = 3  # the jitter generator's second seed word: default_rng((seed, JITTER_STREAM))
FIELDS = ("compute_s", "bubble_s", "exposed_comm_s", "straggler_wait_s", "collective_wait_s")
assert set(RANK_FIELDS) <= set(FIELDS)
ASSUMED = (
    "steps drawn one by one (noise per GPU and operation, jitter per bucket of the DP reductions); loader waits,"
    " episodes, pauses, compute.interference_gamma and jitter on TP collectives and sends are not applied"
    " (sim/steps3d.py)"
)


def jittered(sc: Scenario, lay: Layout, costs: StepCosts, rng: np.random.Generator) -> StepCosts:
    """``costs`` with this step's jitter on each stage's data-parallel reduction (module
    docstring); unchanged, and nothing drawn, without jitter. A stage's reduction is n equal
    buckets (parallel3d.py bucketed_s: all of them over the last one); the whole is scaled by
    the mean of n draws and the last bucket by its own draw, for the concurrent group whose
    buckets took longest. The per-chunk shares the overlapped reduction reads (dp_chunk_s,
    dp_chunk_last_s) scale with the stage's: each chunk's by the same mean, its last bucket by
    the last draw. Measured multipliers that carry their sizes (network.jitter_samples_bytes)
    are drawn from the timed size nearest the stage's collective (StepCosts.dp_bucket_bytes;
    sim/noise.py SizePools), as the DDP and FSDP engines draw them."""
    net = sc.network
    if not net.jitter_samples and net.jitter_sigma == 0.0:
        return costs
    dp_s, last = costs.dp_s.copy(), costs.dp_last_bucket_s.copy()
    chunk = None if costs.dp_chunk_s is None else costs.dp_chunk_s.copy()
    chunk_last = None if costs.dp_chunk_last_s is None else costs.dp_chunk_last_s.copy()
    for i in range(lay.pp):
        if last[i] <= 0.0:
            continue
        n = max(1, round(dp_s[i] / last[i]))
        sizes = [] if costs.dp_bucket_bytes is None else [costs.dp_bucket_bytes[i]] * n
        pools = SizePools.of(net.jitter_samples, net.jitter_samples_bytes, sizes)
        draws = comm_multipliers(rng, net.jitter_sigma, net.jitter_samples, (lay.tp, n), pools)
        slowest = draws[int(np.argmax(draws.sum(axis=1)))]
        dp_s[i] *= slowest.mean()
        last[i] *= slowest[-1]
        if chunk is not None and chunk_last is not None:
            chunk[i] *= slowest.mean()
            chunk_last[i] *= slowest[-1]
    return costs._replace(dp_s=dp_s, dp_last_bucket_s=last, dp_chunk_s=chunk, dp_chunk_last_s=chunk_last)


def gather_exposed(sc: Scenario, lay: Layout, costs: StepCosts, calm: Step3D) -> np.ndarray:
    """(dp, pp) how much of each TP group's idle in the calm step is the weight gather before
    the first forward (fsdp, hsdp, zero1): its idle there less its idle in the same step replayed
    without the gather. Zero when nothing is gathered."""
    if not costs.gather_s.any():
        return np.zeros_like(calm.busy_s)
    none = np.zeros_like(costs.gather_s)
    bare = step_3d(sc, lay, costs._replace(gather_s=none, gather_wait_s=none), calm.stage_factor, None,
                   memory=calm.memory)  # fmt: skip
    return np.maximum(0.0, split(calm)["bubble_s"] - split(bare)["bubble_s"])


def split(
    step: Step3D, bubble_s: np.ndarray | None = None, gather_s: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Each TP group's (dp, pp) share of one step (module docstring). ``bubble_s`` (dp, pp):
    the layout's own idle (the same split of a step on identical GPUs without noise); None:
    this step's idle is all bubble (it is that step). ``gather_s`` (dp, pp): the weight gather
    the groups waited for (gather_exposed), counted as exposed communication."""
    end = step.stage_end_s.max(axis=0)  # the slowest replica's last backward of each stage
    exposed = np.broadcast_to(step.reduced_s - end, step.busy_s.shape)
    idle = step.step_s - step.costs.optimizer_s - step.busy_s - exposed
    if gather_s is not None:  # at most the idle this step has (noise upstream may hide the gather)
        gather = np.minimum(gather_s, idle)
        exposed, idle = exposed + gather, idle - gather
    bubble = idle if bubble_s is None else np.minimum(bubble_s, idle)
    wait = idle - bubble
    return {
        "compute_s": step.busy_s,
        "bubble_s": bubble,
        "exposed_comm_s": exposed,
        "straggler_wait_s": wait,
        "collective_wait_s": wait,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run3D:
    """``sc.steps`` steps of a 3D-parallel job."""

    scenario: Scenario
    first: Step3D  # step 0: the layout, its costs and memory, and the draws' persistent speeds
    calm: Step3D  # the same layout's step on identical GPUs without noise or jitter
    step_time_s: np.ndarray  # (steps,)
    pipeline_s: np.ndarray  # (steps,) the slowest pipeline's makespan
    dp_exposed_s: np.ndarray  # (steps,)
    idle_fraction: np.ndarray  # (pp,) the slowest pipeline's stage idle share, mean over steps
    group_mean: dict[str, np.ndarray]  # FIELDS, (dp, pp) mean over steps
    step_mean: dict[str, np.ndarray]  # FIELDS, (steps,) mean over ranks
    records: dict[str, np.ndarray] | None  # FIELDS, (steps, ranks), when asked
    wall_s: float

    @property
    def layout(self) -> Layout:
        return self.first.layout

    def per_rank(self, groups: np.ndarray) -> np.ndarray:
        """(..., dp, pp) per TP group -> (..., ranks): each rank its group's."""
        lay, ranks = self.layout, np.arange(self.scenario.ranks)
        return groups[..., lay.replica_of(ranks), lay.stage_of(ranks)]

    @property
    def rank_mean(self) -> dict[str, np.ndarray]:
        return {k: self.per_rank(v) for k, v in self.group_mean.items()}

    @property
    def speed_factor(self) -> np.ndarray:
        """(ranks,) each rank's TP group's compute-time factor (the pace it runs at)."""
        return self.per_rank(self.first.stage_factor)

    @property
    def mean_step_s(self) -> float:
        return float(self.step_time_s.mean())

    def slowed_group(self) -> tuple[int, int]:
        """(replica, stage) of the TP group whose compute grew most over the calm step's: where
        the records put a straggler."""
        ratio = self.group_mean["compute_s"] / self.calm.busy_s
        j, i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        return int(j), int(i)

    def summary(self) -> dict:
        """Step3D.summary()'s keys, over the steps (the step time, pipeline, exposed reduction,
        idle shares, tokens/s and MFU their means), with the percentiles and each part's mean."""
        st, first = self.step_time_s, self.first
        mean = self.mean_step_s
        flops = first.model_flops_per_step / mean / first.gpus / (first.peak_tflop_s * 1e12)
        return first.summary() | {
            "steps": self.scenario.steps,
            "seed": self.scenario.seed,
            "step_time_s": mean,
            "step_time_percentiles_s": {f"p{q}": float(np.percentile(st, q)) for q in (5, 50, 95, 99)},
            "pipeline_s": float(self.pipeline_s.mean()),
            "dp_exposed_s": float(self.dp_exposed_s.mean()),
            "stage_idle_fraction": [float(x) for x in self.idle_fraction],
            "tokens_per_s": first.tokens_per_step / mean,
            "mfu": flops,
            "parts_s": {k: float(v.mean()) for k, v in self.group_mean.items() if k != "collective_wait_s"},
            "assumed": ASSUMED,
            "wall_s": self.wall_s,
        }


def simulate_3d_steps(
    sc: Scenario, *, records: bool = False, progress: Callable[[int, int], None] | None = None
) -> Run3D:
    """``sc.steps`` steps of ``sc`` (module docstring). ``records``: keep the (steps, ranks)
    tables; ``progress(done, steps)`` after each step (it draws nothing)."""
    wall0 = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    jitter_rng = np.random.default_rng((sc.seed, JITTER_STREAM))
    lay = layout(sc)
    costs = step_costs(sc, lay)
    memory = memory_by_stage(sc, lay, costs)
    factors = group_factors(sc, lay, rng)
    calm = step_3d(sc, lay, costs, np.ones_like(factors), None, memory=memory)
    gathered = gather_exposed(sc, lay, costs, calm)
    bubble = split(calm, gather_s=gathered)["bubble_s"]
    steps = sc.steps
    step_time, pipeline, exposed = np.zeros(steps), np.zeros(steps), np.zeros(steps)
    idle = np.zeros(lay.pp)
    sums = {k: np.zeros((lay.dp, lay.pp)) for k in FIELDS}
    step_mean = {k: np.zeros(steps) for k in FIELDS}
    kept = {k: np.zeros((steps, lay.dp, lay.pp)) for k in FIELDS} if records else None
    first = None
    for k in range(steps):
        noise = op_noise(sc, lay, rng)
        step = step_3d(sc, lay, jittered(sc, lay, costs, jitter_rng), factors, noise, memory=memory)
        first = first or step
        step_time[k], pipeline[k], exposed[k] = step.step_s, step.pipeline_s, step.dp_exposed_s
        idle += step.idle_fraction
        for name, v in split(step, bubble, gathered).items():
            sums[name] += v
            step_mean[name][k] = v.mean()  # every group has tp ranks: the mean over ranks
            if kept is not None:
                kept[name][k] = v
        if progress:
            progress(k + 1, steps)
    run = Run3D(
        scenario=sc,
        first=first,
        calm=calm,
        step_time_s=step_time,
        pipeline_s=pipeline,
        dp_exposed_s=exposed,
        idle_fraction=idle / steps,
        group_mean={name: v / steps for name, v in sums.items()},
        step_mean=step_mean,
        records=None,
        wall_s=0.0,
    )
    kept_ranks = {name: run.per_rank(v) for name, v in kept.items()} if kept is not None else None
    return dataclasses.replace(run, records=kept_ranks, wall_s=time.perf_counter() - wall0)
