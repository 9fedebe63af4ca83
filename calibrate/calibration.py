"""A calibration (``calib.json``, schema ``ddplab-calib`` v1) as typed records.

``calibrate/calib.py`` fits one from probe runs; ``Calibration.read`` checks a file once,
on load (every key, every type, named on failure), and every consumer reads attributes
from then on: ``calib.compute.step_s.seconds(tokens)``, never ``calib["compute"]...``.
``to_json`` gives the file's content back (calibrate/typed_json.py does the mapping).
Every measured value keeps where it came from: its samples and a ``source`` line.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from calibrate import typed_json
from sim.readfile import MIB, read_text

CALIB_CAP = 64 * MIB  # a calib.json is tens of kilobytes

SCHEMA, SCHEMA_VERSION = "ddplab-calib", 1


class AffineFit(NamedTuple):
    """Seconds per micro-step, affine in tokens (calibrate/compute_fit.py fits it)."""

    intercept_s: float
    per_token_s: float
    r2: float
    points: list[tuple[int, float]]  # (tokens, mean seconds) the fit saw

    def seconds(self, tokens: float) -> float:
        return self.intercept_s + self.per_token_s * tokens

    def at(self, tokens: float) -> tuple[float, str]:
        """(seconds, how): the measured means themselves where the probe timed this many tokens,
        straight between the two nearest measured sizes inside their range, the affine fit
        outside it. Time per token falls as the matrices grow (gpt2-mini on the 2-core box:
        the fit missed its own points by -1.5 % at 256 tokens and +1.8 % at 1024), so between
        and at measured sizes the measurements predict better than the line through them."""
        pts = sorted(self.points)
        xs = [x for x, _ in pts]
        if len(pts) < 2 or not xs[0] <= tokens <= xs[-1]:
            return self.seconds(tokens), f"affine fit in tokens at {tokens:g} (R^2 {self.r2:.4f})"
        for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
            if tokens == x0 or tokens == x1:
                return (y0 if tokens == x0 else y1), f"measured at {tokens:g} tokens"
            if x0 < tokens < x1:
                y = y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
                return y, f"between the measured {x0} and {x1} tokens"
        raise AssertionError("unreachable: tokens lies in the measured range")


class CollectiveFit(NamedTuple):
    """An alpha-beta fit of one collective at one world size (calibrate/collective_fit.py)."""

    op: str
    ranks: int
    sizes: int  # sizes fitted
    samples: int  # timed iterations behind them
    alpha_s: float  # latency term
    alpha_ci_s: tuple[float, float]  # 95 % bootstrap interval
    busbw_gb_s: float
    busbw_ci_gb_s: tuple[float, float | None]  # None: the sizes measured set no upper bound
    hop_latency_us: float  # alpha / ring steps
    r2_log: float  # R^2 of log time, medians against the fit


class NoiseCandidate(NamedTuple):
    """One jitter distribution fitted to the compute multipliers (calibrate/noise_fit.py)."""

    distribution: str
    sigma: float  # as sim/noise.py reads it
    loglik: float
    aic: float
    ks: float  # Kolmogorov-Smirnov statistic against the data
    params: tuple[float, ...]  # scipy's fitted parameters (for the plot)


@dataclass(frozen=True, kw_only=True)
class Measured:
    value: float
    samples: int | None = None
    source: str | None = None


@dataclass(frozen=True, kw_only=True)
class Gamma(Measured):
    raw: float  # as fitted; ``value`` is it floored at 0


@dataclass(frozen=True, kw_only=True)
class Achieved(Measured):
    at_tokens: int


@dataclass(frozen=True, kw_only=True)
class ReadyProfile:
    value: dict[str, float]  # parameter -> fraction of backward done when its gradient was ready
    samples: int
    source: str


@dataclass(frozen=True, kw_only=True)
class Collective:
    fit: CollectiveFit = field(metadata=typed_json.FLAT)  # its fields sit in this table on disk
    holdout_rel_err: dict[int, float]  # held-out size -> relative error of the median
    holdout_within_10pct_from_bytes: int | None = None  # the smallest size from which all are within 10 %
    times_s: dict[int, list[float]]  # size -> per-iteration times


@dataclass(frozen=True, kw_only=True)
class CommJitter:
    """How a collective's time varies from one call to the next on this network: every timed
    allreduce from ``from_bytes`` up over its size's median (the collective fit is of medians,
    so the simulator resamples these as they are)."""

    multipliers: list[float]
    from_bytes: int
    sd: float
    source: str
    # The size each multiplier was timed at, in order, which the simulator draws a collective's
    # from (sim/noise.py SizePools); files written before 2026-12-06 (evening) have none: one pool.
    sizes_bytes: list[int] | None = None

    @classmethod
    def of(cls, times: dict[int, list[float]], *, from_bytes: int, source: str) -> "CommJitter | None":
        """Every time from ``from_bytes`` up over its size's median; None for fewer than 8 such
        calls (sim/config.py MIN_SAMPLES, what the simulator resamples from)."""
        big = {size: np.asarray(t, float) / np.median(t) for size, t in sorted(times.items()) if size >= from_bytes}
        x = np.concatenate(list(big.values())) if big else np.array([])
        if len(x) < 8:
            return None
        return cls(
            multipliers=[round(float(v), 6) for v in x],
            from_bytes=from_bytes,
            sd=float(np.std(x)),
            source=source,
            sizes_bytes=[int(size) for size, m in big.items() for _ in m],
        )


@dataclass(frozen=True, kw_only=True)
class Network:
    """One measured network (a lab link rate, or a run directory's name on real machines)."""

    run: str
    collectives: dict[str, Collective]
    collectives_sched: str = "other"  # fifo | other (...): the scheduler the sweep ran under
    link_gbit_s: Measured  # raw TCP, slowest direction
    rtt_p50_us: Measured | None = None
    interference_gamma: Gamma
    stack_efficiency: Measured  # fitted allreduce busbw / raw link rate
    allreduce_jitter: CommJitter | None = None  # files from before 2026-12 have none

    @property
    def allreduce(self) -> CollectiveFit:
        return self.collectives["allreduce"].fit


@dataclass(frozen=True, kw_only=True)
class ComputePeak:
    intercept_bytes: float
    per_token_bytes: float
    points: list[tuple[int, float]]


@dataclass(frozen=True, kw_only=True)
class DdpPeak:
    value: float  # peak allocated bytes of one DDP training step
    reserved: float | None = None
    tokens: int
    micro_batch: int


@dataclass(frozen=True, kw_only=True)
class Memory:
    compute_peak_bytes: ComputePeak
    ddp_peak_bytes: DdpPeak
    source: str

    def peak_bytes_at(self, tokens: float) -> float:
        """A DDP training step's peak at ``tokens`` per micro-step: the measured step's peak
        moved along the measured per-token slope (activations grow linearly in tokens)."""
        ddp = self.ddp_peak_bytes
        return ddp.value + self.compute_peak_bytes.per_token_bytes * (tokens - ddp.tokens)


@dataclass(frozen=True, kw_only=True)
class BucketReady:
    bucket: int
    bytes: int
    ready_fraction: float


@dataclass(frozen=True, kw_only=True)
class TpBlock:
    """realrun/probe_tp.py, per micro-batch size of the probe: what a TP split adds to one block
    (TP minus unsharded, medians over the ranks' iterations), one in-step send, and the whole
    model's forward and backward run bare (no DDP: as a TP or pipeline run computes)."""

    tp: int
    # [tokens, forward extra s, backward extra s, send s or -1 (none), model forward s, model backward s]
    points: list[list[float]]
    samples: int
    source: str

    def at(self, tokens: float) -> tuple[float, float, float | None]:
        """(forward extra, backward extra, send) at ``tokens``: the least-squares line through
        the probed sizes' medians (the extra is mostly latency, so a line over all sizes is
        steadier than any one size's median), held at the nearest probed size outside them."""
        pts = sorted(self.points)
        t = min(max(tokens, pts[0][0]), pts[-1][0])
        f, b = (_line([p[0] for p in pts], [p[i] for p in pts], t) for i in (1, 2))
        sends = [(p[0], p[3]) for p in pts if p[3] >= 0]
        send = _line(*zip(*sends, strict=True), t) if sends else None
        return f, b, send

    def model_fit(self, column: int) -> tuple[float, float]:
        """(intercept s, per-token s) of the bare model's forward (column 4) or backward (5):
        least squares over the probed sizes' medians, the slope held at >= 0."""
        pts = sorted(self.points)
        xs, ys = np.array([p[0] for p in pts]), np.array([p[column] for p in pts])
        if len(xs) < 2:
            return float(ys[0]), 0.0
        slope, intercept = np.polyfit(xs, ys, 1)
        if slope < 0:
            return float(ys.mean()), 0.0
        return float(intercept), float(slope)


@dataclass(frozen=True, kw_only=True)
class PpSchedule:
    """realrun/probe_pp.py, one of torch.distributed.pipelining's schedules run by the probe's
    ranks (one stage each): what it costs per forward or backward action beyond the stage's own
    compute, solved so that sim/pipeline.py's replay of the probed step (each stage at its
    measured compute, no sends: the action cost holds them) equals the step's median."""

    pp: int
    micro_batches: int
    virtual: int = 1  # model chunks a stage (the interleaved schedule's)
    # [tokens per micro-batch, action s, step s (median over iterations of the slowest stage's
    # schedule.step)] per probed micro-batch size
    points: list[list[float]]
    samples: int
    source: str

    def action_at(self, tokens: float) -> float:
        """The action cost at ``tokens``: the least-squares line through the probed sizes (the
        last stage's loss, outside its timed forward, grows with them), held at the nearest
        probed size outside them, at >= 0."""
        pts = sorted(self.points)
        t = min(max(tokens, pts[0][0]), pts[-1][0])
        return max(_line([p[0] for p in pts], [p[1] for p in pts], t), 0.0)


def _line(xs, ys, x: float) -> float:
    if len(xs) < 2:
        return float(ys[0])
    slope, intercept = np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)
    return float(intercept + slope * x)


@dataclass(frozen=True, kw_only=True)
class HostDelays:
    """Per rank, seconds a step it spends before the gradient sync outside compute beyond the
    rank least in it (calibrate/trace_fit.py TraceFit.host_delays): Scenario.host_delays_s."""

    value: dict[int, float]
    samples: int  # steps averaged
    source: str


@dataclass(frozen=True, kw_only=True)
class Compute:
    model: str
    seq_len: int
    runs: list[str]
    samples: int
    step_s: AffineFit  # forward + backward of a speed-1 rank
    forward_s: AffineFit
    backward_s: AffineFit
    achieved_tflop_s: Achieved
    optimizer_s: Measured
    # From traces: the step outside forward, backward, the gradient wait and the optimizer (data,
    # host work, GPU idle, other communication; calibrate/trace_calib.py _after_the_wait), held as
    # measured at every scale; a probe's optimizer_s holds its own (AdamW, zero_grad, data), None.
    outside_s: Measured | None = None
    # From traces: the ranks that join the gradient sync late outside compute, and by how much;
    # outside_s is then the rest less the late rank's own delay. None from probes, and in trace
    # calibrations written before 2026-12-07 (second session), whose outside_s holds the delay.
    host_delays_s: HostDelays | None = None
    ready_fractions: ReadyProfile
    buckets_default_cap: list[BucketReady] = field(default_factory=list)
    memory: Memory | None = None
    tp_block: TpBlock | None = None  # probes from before realrun/probe_tp.py have none
    pp_schedules: dict[str, PpSchedule] | None = None  # by schedule; only a probe with --parts ...,pp has them
    # By comm hook (fp16, bf16): its casts' time per GB of gradient beyond the plain hook's
    # divide (realrun/probe_compute.py hook_casts); probes before 2026-12-06 have none.
    hook_cast_s_per_gb: dict[str, Measured] | None = None


@dataclass(frozen=True, kw_only=True)
class Noise:
    distribution: str  # lognormal | gamma | normal | empirical (no candidate the simulator takes held)
    sigma: float
    best_fit: str
    ks: float
    ks_critical_1pct: float
    samples: int
    source: str
    candidates: list[NoiseCandidate]  # best AIC first
    multipliers: list[float]
    chosen_because: str | None = None  # why ``distribution`` is not ``best_fit`` (calibrate/noise_fit.py choose)
    # The same multipliers per micro-batch size (over that size's own mean): jitter is not one
    # multiplier at every size (sd 5-8 % at 1 sequence, ~1 % at 2-8 on the 2-core box), so on
    # the measured machines the simulator draws from the run's own size (calibrate/apply.py).
    multipliers_by_micro_batch: dict[int, list[float]] | None = None
    # Per rank, its multipliers step by step, when the ranks ran their steps together (a trace's
    # ProfilerStep#k; a probe's ranks time compute each on its own, out of step): the simulator
    # then draws whole steps, so the ranks' common slowdowns stay common (sim/noise.py).
    by_rank_step: dict[int, list[float]] | None = None


@dataclass(frozen=True, kw_only=True)
class RankNoise:
    best_fit: str
    sigma: float
    ks: float
    samples: int
    sd: float


@dataclass(frozen=True, kw_only=True)
class RankSpeed:
    speed_factor: float  # compute time / the fastest rank's
    score: float  # 1 / speed_factor
    flagged: bool
    noise: RankNoise


@dataclass(frozen=True, kw_only=True)
class TraceRank:
    """One rank's profiled steps (calibrate/trace_fit.py): per step, in step order."""

    trace: str
    provenance: str  # "measured in <trace>, rank r, steps a-b"
    gpu: bool
    steps: list[int]
    step_s: list[float]
    compute_s: list[float]
    forward_s: list[float] | None = None  # None: not annotated in the trace
    backward_s: list[float] | None = None
    optimizer_s: list[float] | None = None
    # The step outside forward, backward, the gradient wait and the optimizer (trace_fit.py
    # StepFit.outside_s); None in calibrations written before it was carried (2026-12-07).
    outside_s: list[float] | None = None
    # When the rank joins the gradient sync (StepFit.ready_s: on a CPU from the step's start, on a
    # GPU from the previous step's sync), per step, None for a step that does not show it (a GPU
    # trace's first); None throughout where no step does, or written before 2026-12-07.
    ready_s: list[float | None] | None = None
    lead_s: list[float | None] | None = None  # ready_s less forward and backward compute (StepFit.lead_s)
    comm_s: list[float]
    exposed_comm_s: list[float]
    overlap_s: list[float]
    bucket_count: int  # gradient all-reduces per step (the median step's)
    jitter_sd: float  # sd of compute / this rank's mean
    hta: dict[str, float] | None = None  # Holistic Trace Analysis' whole-trace figures, same definitions


@dataclass(frozen=True, kw_only=True)
class TraceCollectiveSize:
    op: str
    bytes: int
    ranks: int
    calls: int
    median_s: float
    busbw_gb_s: float  # bytes x bus factor / median time


# The one network a trace calibration carries: the job's gradient all-reduces as they ran
# (calibrate/trace_calib.py), not a probed link.
TRACE_NETWORK = "trace"


@dataclass(frozen=True, kw_only=True)
class TraceSource:
    """What a calibration from profiler traces measured beyond the probe's fields
    (`ddplab calibrate TRACE...`; docs/traces.md)."""

    traces: list[str]
    absent: list[str]  # what the traces do not say, each with what was done instead
    ranks: dict[int, TraceRank]
    buckets: list[BucketReady]  # rank 0's gradient all-reduces in issue order, mean over steps
    collectives: list[TraceCollectiveSize]
    alpha_beta: dict[str, CollectiveFit]  # per op, where the trace has >= 3 sizes
    overlap_fraction: Measured  # communication during compute / communication
    exposed_comm_s: Measured  # per step, the least-waiting rank's mean (its source: the most-waiting's)
    slowest_rank: int
    slowest_factor: float  # its median compute / the median rank's
    straggler_cost: Measured  # 1 - time at the median speed / measured time
    # The rank the others wait for at the gradient sync (trace_fit.py TraceFit.last_to_sync): how
    # much later than the other ranks' median it joins, and how much of that is time outside compute
    # (a slow data loader). None where the trace does not show it (or written before 2026-12-07).
    late_rank: int | None = None
    late_by_s: float | None = None
    late_lead_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Calibration:
    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION
    created_unix: float
    command: str
    seed: int
    runs: list[str]
    world_size: int
    backend: str
    device: str
    device_info: dict | None = None  # the device's name, memory and SM/CU count
    device_class: str | None = None  # calibrate/devices.py
    precision: str = "fp32"  # files from before --precision were fp32
    compiled: bool = False
    networks: dict[str, Network]
    compute: Compute
    noise: Noise
    ranks: dict[int, RankSpeed]
    plots: list[str] = field(default_factory=list)
    trace: TraceSource | None = None  # a calibration from profiler traces (docs/traces.md)

    @property
    def probed_on(self) -> str:
        """Where it was measured, e.g. "NVIDIA H200, 1 GPU" or "cpu, 2 ranks"."""
        name = (self.device_info or {}).get("name") or self.device
        unit = "GPU" if self.device != "cpu" else "rank"
        return f"{name}, {self.world_size} {unit}{'s' if self.world_size != 1 else ''}"

    def network(self, label: str | None) -> tuple[str, Network]:
        """The named network, or the only one; ``--calib-network`` errors otherwise."""
        nets = self.networks
        if not nets:
            raise ValueError("--calib-network: the calibration measured no network (a one-rank probe)")
        if label is None:
            if len(nets) != 1:
                raise ValueError(f"--calib-network: the calibration measured {', '.join(sorted(nets))}; name one")
            label = next(iter(nets))
        if label not in nets:
            raise ValueError(f"--calib-network: {label!r} not in the calibration ({', '.join(sorted(nets))})")
        return label, nets[label]

    def to_json(self) -> dict:
        return typed_json.dump(self)

    @classmethod
    def from_json(cls, data, where: str) -> "Calibration":
        if not isinstance(data, dict) or (data.get("schema"), data.get("schema_version")) != (SCHEMA, SCHEMA_VERSION):
            raise ValueError(f"{where}: not a {SCHEMA} v{SCHEMA_VERSION} file (made by `ddplab calibrate`)")
        calib = typed_json.load(cls, data, f"{where}:")
        for label, net in calib.networks.items():
            if "allreduce" not in net.collectives:
                raise ValueError(f"{where}: networks.{label}.collectives.allreduce: missing")
        from calibrate import plausible  # it reads these records, so imported here, not above

        plausible.check(calib, where, "rerun `ddplab calibrate` on a probe that measured it")
        return calib

    @classmethod
    def read(cls, path: Path, what: str = "--calib") -> "Calibration":
        try:
            # A regular file of bounded size: a FIFO or /dev/zero is one line (sim/readfile.py).
            data = json.loads(read_text(path, CALIB_CAP, what))
        except json.JSONDecodeError:
            raise ValueError(f"{what}: {path}: not JSON") from None
        except RecursionError:  # json recurses once per level: [[[[...]]]] thousands deep
            raise ValueError(f"{what}: {path}: nested too deeply to be a calibration") from None
        return cls.from_json(data, f"{what}: {path}")
