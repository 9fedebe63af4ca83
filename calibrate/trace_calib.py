"""``ddplab calibrate TRACE...``: PyTorch profiler traces in, the calibration probes give out.

calibrate/trace_fit.py measures per rank and step; this fills the same typed calibration as
calibrate/calib.py does from probe runs (calibrate/calibration.py), with the same fits
(compute_fit's speed factors and per-token fit, noise_fit's jitter candidates) on the traced
steps, and a ``trace`` section with what only a trace shows (per-step breakdown, the sizes and
bus bandwidth of the job's own collectives, overlap, exposed communication, the straggler
what-if). Every value names its source: "measured in <trace>, rank r, steps a-b".

What a trace does not say is named in ``trace.absent``: a raw link rate and the interference
probe (the one network, ``trace``, is the job's all-reduces as they ran: each call's time drawn
from the traced spans, ``_span_jitter``, its busbw set so the simulator waits after backward as
the trace did, ``_tune_network``), and, unless the job
added them (``train --profile`` does, realrun/profiling.py), the model, tokens and precision,
which the caller then passes (``--model``, ``--seq-len``, ``--micro-batch``, ``--precision``).
"""

import time
from dataclasses import dataclass

import numpy as np

from calibrate import collective_fit, compute_fit, noise_fit
from calibrate.calibration import (
    TRACE_NETWORK,
    Achieved,
    BucketReady,
    Calibration,
    Collective,
    CollectiveFit,
    CommJitter,
    Compute,
    Gamma,
    HostDelays,
    Measured,
    Network,
    RankSpeed,
    ReadyProfile,
    TraceCollectiveSize,
    TraceRank,
    TraceSource,
)
from calibrate.devices import device_class
from calibrate.kineto import TraceError, read_trace
from calibrate.trace_fit import TraceFit, fit_traces
from sim.buckets import build_buckets
from sim.collectives import bus_factor
from sim.precision import PRECISIONS
from sim.transformer import flops_per_token, model_shape


@dataclass
class JobShape:
    """What the compute fit needs and a trace may lack: from ddplab's own metadata or the caller."""

    model: str | None = None
    seq_len: int | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None  # None: the forward passes a traced step makes, else 1
    precision: str | None = None
    bucket_cap_mb: float | None = None


def read_traces(paths, progress=None) -> TraceFit:
    return fit_traces([read_trace(p, progress) for p in paths])


def _job(fit: TraceFit, given: JobShape) -> tuple[JobShape, list[str]]:
    own = next((t.meta.get("ddplab") for t in fit.traces.values() if isinstance(t.meta.get("ddplab"), dict)), {})
    prec = own.get("precision")

    def first(*values):  # flags > the trace's own metadata > what the trace shows; a bad 0 stays to be refused
        return next((v for v in values if v is not None), None)

    job = JobShape(
        model=first(given.model, own.get("model")),
        seq_len=first(given.seq_len, own.get("seq_len")),
        micro_batch=first(given.micro_batch, own.get("micro_batch")),
        grad_accum=first(given.grad_accum, own.get("grad_accum"), _traced_micro_steps(fit)),
        precision=first(given.precision, prec.get("name") if isinstance(prec, dict) else prec),
        bucket_cap_mb=first(given.bucket_cap_mb, own.get("bucket_cap_mb")),
    )
    missing = [
        flag
        for flag, v in (
            ("--model", job.model),
            ("--seq-len", job.seq_len),
            ("--micro-batch", job.micro_batch),
            ("--precision", job.precision),
        )
        if v is None
    ]
    return job, missing


def _traced_micro_steps(fit: TraceFit) -> int:
    """Micro-steps per profiled step where the trace shows them: gradient accumulation runs one
    forward pass per micro-step (DDP's forward, annotated by torch), the most common count over
    the rank-steps; 1 without forward annotations (calibration() names it absent)."""
    counts = [s.forwards for f in fit.ranks.values() for s in f.steps if s.forwards]
    return max(set(counts), key=counts.count) if counts else 1


def _device(fit: TraceFit) -> tuple[str, dict | None, list[str]]:
    t = next(iter(fit.traces.values()))
    own = t.meta.get("ddplab") or {}
    props = t.meta.get("deviceProperties") or t.meta.get("computeProperties") or []  # the latter: 2021's name
    gpu = any(f.gpu for f in fit.ranks.values())
    absent = []
    if own.get("device_info"):
        info = own["device_info"]
    elif props and isinstance(props[0], dict):
        p = props[0]
        sms = p.get("numSms", p.get("multiProcessorCount"))
        info = {"name": p.get("name"), "memory_bytes": p.get("totalGlobalMem"), "multiprocessors": sms}
    else:
        info = None
        absent.append("device name: no deviceProperties in the trace" + (" (a CPU-only trace)" if not gpu else ""))
    return ("cuda" if gpu else own.get("device", "cpu")), info, absent


def calibrate_traces(
    paths, *, given: JobShape | None = None, seed: int = 0, command: str = "", progress=None
) -> Calibration:
    fit = read_traces(paths, progress)
    job, missing = _job(fit, given or JobShape())
    if missing:
        raise ValueError(
            f"{paths[0]}: the trace does not say its {', '.join(m[2:] for m in missing)}"
            f" (not a `ddplab train --profile` trace): pass {' '.join(missing)}"
        )
    return calibration(fit, job, seed=seed, command=command)


def calibration(fit: TraceFit, job: JobShape, *, seed: int = 0, command: str = "") -> Calibration:
    from scenarios import load_models

    for flag, v in (("--seq-len", job.seq_len), ("--micro-batch", job.micro_batch), ("--grad-accum", job.grad_accum)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{flag}: {v!r}: expected a positive integer")
    if job.precision not in PRECISIONS:
        raise ValueError(f"--precision: {job.precision!r}: one of {', '.join(PRECISIONS)}")
    if job.model not in load_models():
        raise ValueError(f"--model: {job.model!r} is not a preset here (ddplab scenarios lists them)")
    ranks = fit.ranks
    n_samples = sum(len(f.steps) for f in ranks.values())
    absent: list[str] = [
        "raw link rate and interference probe: a trace times the job, not the link (the network `trace` is the"
        " gradient all-reduces as the job ran them)"
    ]
    if n_samples < noise_fit.MIN_FIT_SAMPLES:
        plural = ("s" if n_samples != 1 else "", "s" if len(ranks) != 1 else "")
        absent.append(
            f"jitter: {n_samples} profiled rank-step{plural[0]} ({len(ranks)} rank{plural[1]}), a distribution fit"
            f" needs {noise_fit.MIN_FIT_SAMPLES}: not fitted, a scenario keeps its own (profile more steps: train"
            " --profile N, or the schedule's active=N)"
        )
    device, info, dev_absent = _device(fit)
    absent += dev_absent
    ep = sum(f.ep_kernels for f in ranks.values())
    if ep:
        absent.append(
            f"sizes of {ep} expert-parallel all-to-all kernels (DeepEP's): timed as communication, left out of"
            " compute, no busbw (calibrate/kineto.py EP_COMM)"
        )
    split = all(s.forward_s is not None and s.backward_s is not None for f in ranks.values() for s in f.steps)
    if not split:
        absent.append(
            "forward/backward annotations: compute split 1/3 forward, 2/3 backward by FLOPs (sim/transformer.py);"
            f" no forward passes to count the micro-steps a step by, taken as {job.grad_accum} (--grad-accum)"
        )
    # Per micro-step, as the probe times it: the traced step holds grad_accum micro-steps.
    k = job.grad_accum
    by_rank = {}
    for r, f in ranks.items():
        rows = [((s.forward_s, s.backward_s) if split else (s.fwd_bwd_s / 3, 2 * s.fwd_bwd_s / 3)) for s in f.steps]
        by_rank[r] = {job.micro_batch: np.array(rows) / k}
    where = "; ".join(f.provenance for f in ranks.values())
    samples = compute_fit.ComputeSamples(job.model, job.seq_len, by_rank, [f.path for f in ranks.values()])
    factors = compute_fit.speed_factors(samples)
    fits = compute_fit.fit_compute(samples, factors)
    per_rank = compute_fit.normalised_compute(samples)
    shape = model_shape(job.model)
    tokens = fits.step.points[-1][0]
    achieved = flops_per_token(shape, job.seq_len) * tokens / fits.step.seconds(tokens) / 1e12
    late = fit.last_to_sync()  # the rank the others wait for, where the trace shows when each joins
    delays = _host_delays(fit)
    optimizer, outside = _after_the_wait(fit, late, delays, absent)
    buckets = _buckets(fit)
    ready, ready_source = _ready_fractions(job, buckets)
    if not ready:
        absent.append(f"per-parameter gradient-ready profile: {ready_source}")
    world = fit.world_size
    dist = next(iter(fit.traces.values())).meta.get("distributedInfo") or {}
    backend = dist.get("backend") or (next(iter(fit.traces.values())).meta.get("ddplab") or {}).get("backend")
    if not backend:
        absent.append("backend: no distributedInfo.backend in the trace")
    sizes = fit.size_bandwidth()
    alpha_beta = {}
    rng = np.random.default_rng(seed)
    for op in sorted({s.op for s in sizes}):
        of_op = [s for s in sizes if s.op == op]
        spread = max(s.bytes for s in of_op) / min(s.bytes for s in of_op)
        # Three sizes at least (collective_fit's floor), over a 4x range: sizes within a few % of
        # each other (gpt2-tiny's 66-82 KB buckets) pin neither the latency nor the bandwidth.
        if len({s.bytes for s in of_op}) >= 3 and spread >= 4 and len({s.ranks for s in of_op}) == 1:
            times = {}
            for f in ranks.values():
                for st in f.steps:
                    for c in st.collectives:
                        if c.op == op and c.bytes:
                            times.setdefault(c.bytes, []).append(c.seconds)
            alpha_beta[op] = collective_fit.fit_collective(op, of_op[0].ranks, times, rng=rng)
    networks = _trace_network(fit, where)
    if not networks:
        absent.append("the gradient all-reduces' sizes and times: no network (the scenario's stays)")
    comm = sum(s.comm_s for f in ranks.values() for s in f.steps)
    over = sum(s.overlap_s for f in ranks.values() for s in f.steps)
    slow, slow_factor = fit.slowest_rank()
    cost = fit.straggler_cost()
    how = (
        "forward and backward scaled to the median rank's, and the time before the gradient sync outside them"
        " moved to the median rank's"
        if cost["sync"]
        else "compute scaled to the median rank's; the traces do not show when each rank joins the gradient sync"
    )
    trace = TraceSource(
        traces=[f.path for f in ranks.values()],
        absent=absent,
        ranks={r: _trace_rank(f) for r, f in ranks.items()},
        buckets=buckets,
        collectives=[
            TraceCollectiveSize(
                op=s.op, bytes=s.bytes, ranks=s.ranks, calls=s.calls, median_s=s.median_s, busbw_gb_s=s.busbw_gb_s
            )
            for s in sizes
        ],
        alpha_beta=alpha_beta,
        overlap_fraction=Measured(
            value=over / comm if comm else 0.0,
            samples=n_samples,
            source=f"communication during compute / communication, every rank-step; {where}",
        ),
        exposed_comm_s=_exposed(fit, where, n_samples),
        slowest_rank=slow,
        slowest_factor=slow_factor,
        straggler_cost=Measured(
            value=cost["fraction"],
            samples=cost["steps"],
            source=(
                f"1 - {cost['at_median_speed_s']:.6g} s at the median rank's speed ({how}) / {cost['measured_s']:.6g}"
                f" s measured over {cost['steps']} step{'s' * (cost['steps'] != 1)}"
                " (calibrate/trace_fit.py straggler_cost)"
            ),
        ),
        late_rank=late[0] if late else None,
        late_by_s=late[1] if late else None,
        late_lead_s=late[2] if late else None,
    )
    name = (info or {}).get("name")
    calib = Calibration(
        created_unix=time.time(),
        command=command,
        seed=seed,
        runs=[f.path for f in ranks.values()],
        world_size=world,
        backend=backend or "absent",
        device=device,
        device_info=info,
        device_class=device_class(name),
        precision=job.precision,
        compiled=bool((next(iter(fit.traces.values())).meta.get("ddplab") or {}).get("compile", False)),
        networks=networks,
        compute=Compute(
            model=job.model,
            seq_len=job.seq_len,
            runs=[f.path for f in ranks.values()],
            samples=fits.samples,
            step_s=fits.step,
            forward_s=fits.forward,
            backward_s=fits.backward,
            achieved_tflop_s=Achieved(
                value=achieved,
                at_tokens=tokens,
                source=(
                    f"model FLOPs per token (sim/transformer.py) x tokens / traced compute per micro-step"
                    f" ({job.grad_accum} a step); {where}"
                ),
            ),
            optimizer_s=optimizer,
            outside_s=outside,
            host_delays_s=delays,
            ready_fractions=ReadyProfile(value=ready, samples=len(buckets), source=ready_source),
            buckets_default_cap=buckets,
            memory=None,
        ),
        # Step by step per rank as well as pooled: ProfilerStep#k is one step on every rank
        # (check_same_run holds the ranks to the same steps), and on one shared box the ranks
        # slow down together (docs/validation.md), which only whole steps resampled keep.
        noise=noise_fit.measured_noise(
            samples, count=fits.samples, source=f"per-step compute / its rank's mean; {where}", steps_together=True
        ),
        ranks={
            r: RankSpeed(**v, noise=noise_fit.rank_noise(per_rank[r]))
            for r, v in noise_fit.straggler_scores(factors).items()
        },
        trace=trace,
    )
    return _tune_network(calib, fit, job, where)


TUNE_STEPS = 300  # simulated steps per trial: the mean wait to ~1 %


def _tune_network(calib: Calibration, fit: TraceFit, job: JobShape, where: str) -> Calibration:
    """The trace network's busbw set so that the simulator, on the traced job with every other
    value of this calibration, waits after backward as long as the trace did (realrun's
    ``wait_s``; the mean over rank-steps). The all-reduces' own spans overstate the transfer:
    on gloo they include waiting for the peer and, with two worker threads, each other; what the
    step pays is the wait. Bisection in log busbw (the wait falls as busbw grows); the median-rate
    guess stays, with the reason, when the simulator refuses the job or the wait is 0."""
    from dataclasses import replace

    from calibrate.apply import apply_calibration
    from sim.engine import simulate
    from sim.scenario_file import scenario_from_dict

    if TRACE_NETWORK not in calib.networks:
        return calib
    # Each step's least wait over the ranks (that step's last to join the sync): the
    # communication left after every rank is ready; the simulated side is measured the same
    # way. A faster rank's wait adds its wait for that one, which the simulator draws from the
    # ranks' own speeds: a data loader's delay or a host stall in it would otherwise be tuned
    # into the network (a slower link), and show as communication.
    n = min(len(f.steps) for f in fit.ranks.values())
    target = float(np.mean(np.min([[s.wait_s for s in f.steps[:n]] for f in fit.ranks.values()], axis=0)))
    guess = calib.networks[TRACE_NETWORK].allreduce.busbw_gb_s
    data = {
        "name": "calibrate:trace",
        "ranks": calib.world_size,
        "steps": TUNE_STEPS,
        "model": {"preset": job.model},
        "training": {
            "micro_batch_size": job.micro_batch,
            "seq_len": job.seq_len,
            "grad_accum": job.grad_accum,
            "bucket_cap_mb": job.bucket_cap_mb or 25.0,
            "precision": job.precision,
        },
        "network": {"backend": calib.backend, "algorithm": "ring", "gpus_per_node": 1, "nics_per_node": 1},
        "noise": {},
        "compute": {},
    }

    def wait_at(busbw: float) -> float:
        trial = _with_busbw(calib, busbw, "")
        d = apply_calibration(data, trial, calib_path="trace", network=TRACE_NETWORK, mode="all").data
        res = simulate(scenario_from_dict(d), trace_steps=0, records=True)
        return float((res.exposed_comm_s + res.straggler_wait_s).min(axis=1).mean())

    try:
        if target <= 0:
            raise ValueError("no wait after backward in the trace")
        lo, hi = np.log(guess / 100), np.log(guess * 100)
        if not wait_at(np.exp(hi)) <= target <= wait_at(np.exp(lo)):
            raise ValueError("the traced wait lies outside 1/100-100x the median rate")
        for _ in range(14):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if wait_at(np.exp(mid)) > target else (lo, mid)
        busbw = float(np.exp((lo + hi) / 2))
        how = (
            f"set so the simulated wait after backward equals the traced {target * 1e3:.3f} ms (each"
            f" step's least wait over the ranks, mean over steps; bisection, {TUNE_STEPS} simulated steps a trial); the"
            f" median rate per step was {guess:.4g} GB/s"
        )
    except ValueError as e:
        return replace(calib, trace=replace(calib.trace, absent=[*calib.trace.absent, f"busbw tuning: {e}"]))
    return _with_busbw(calib, busbw, how)


def _with_busbw(calib: Calibration, busbw: float, how: str) -> Calibration:
    from dataclasses import replace

    net = calib.networks[TRACE_NETWORK]
    coll = net.collectives["allreduce"]
    fit = coll.fit._replace(busbw_gb_s=busbw)
    link = replace(
        net.link_gbit_s, value=busbw * 8, source=f"not probed: {how}, x 8" if how else net.link_gbit_s.source
    )
    net = replace(net, collectives={"allreduce": replace(coll, fit=fit)}, link_gbit_s=link)
    return replace(calib, networks={TRACE_NETWORK: net})


def _trace_network(fit: TraceFit, where: str) -> dict[str, Network]:
    """The job's gradient all-reduces as one measured network: the serial-equivalent bus
    bandwidth of every rank-step (bytes of its gradient all-reduces x bus factor / the union of
    its communication time, the median over rank-steps) with no latency term: what the
    simulator's one-at-a-time ring needs to spend the traced time. No link was probed: the link
    rate is set so that link x stack efficiency (1) is that busbw. Gamma is 0: the traced
    compute ran with the communication in flight, so its interference is in it already. How one
    all-reduce's time varies from call to call: ``_span_jitter``. The busbw is then tuned with
    that jitter in (``_tune_network``)."""
    world = fit.world_size
    rates, times = [], {}
    for f in fit.ranks.values():
        for s in f.steps:
            sizes = [b.bytes for b in s.buckets]
            if not sizes or any(not b for b in sizes) or s.comm_s <= 0:
                continue
            rates.append(sum(sizes) * bus_factor("allreduce", world) / s.comm_s / 1e9)
            for c in s.collectives:
                if c.op == "allreduce" and c.bytes:
                    times.setdefault(c.bytes, []).append(c.seconds)
    if world < 2 or not rates:
        return {}
    busbw = float(np.median(rates))
    lo, hi = (float(x) for x in np.percentile(rates, [2.5, 97.5]))
    samples = sum(len(v) for v in times.values())
    fit_ = CollectiveFit(
        op="allreduce", ranks=world, sizes=len(times), samples=samples, alpha_s=0.0, alpha_ci_s=(0.0, 0.0),
        busbw_gb_s=busbw, busbw_ci_gb_s=(lo, hi), hop_latency_us=0.0, r2_log=0.0,  # no line fitted: no R^2
    )  # fmt: skip
    source = f"gradient all-reduce bytes x bus factor / communication time per step, median of {len(rates)}"
    return {
        TRACE_NETWORK: Network(
            run=where,
            collectives={"allreduce": Collective(fit=fit_, holdout_rel_err={}, times_s=dict(sorted(times.items())))},
            collectives_sched="other (the traced job's own)",
            link_gbit_s=Measured(value=busbw * 8, samples=len(rates), source=f"not probed: {source}, x 8"),
            interference_gamma=Gamma(
                value=0.0, raw=0.0, samples=len(rates), source="in the traced compute already (communication in flight)"
            ),
            stack_efficiency=Measured(value=1.0, source="not probed: the link rate is the traced busbw"),
            allreduce_jitter=_span_jitter(fit),
        )
    }


def _span_jitter(fit: TraceFit) -> CommJitter | None:
    """How a gradient all-reduce's time varies from call to call: each all-reduce span of the
    least-waiting rank over its size's median, which the simulator draws per collective from the
    nearest traced size (sim/noise.py SizePools), as it does a probe's (calibrate/calib.py). That
    rank joins the sync last, so its spans are the transfers; another rank's also hold its wait
    for that one, which the simulator draws from the ranks' own speeds and delays. With one rate
    for every call the simulated steps were narrower than the traced ones: on eight 2-rank gloo
    runs of 202 steps, each validated both ways, p95 -7.4 to -16.2 % and KS 0.22-0.37 at one
    rate, -1.6 to -6.5 % and 0.07-0.13 with these draws, the p50 unmoved (docs/traces.md, "The
    all-reduces' jitter"; measurements/trace_validate.txt)."""
    least = fit.least_waiting()
    times: dict[int, list[float]] = {}
    for s in fit.ranks[least].steps:
        for c in s.collectives:
            if c.op == "allreduce" and c.bytes:
                times.setdefault(c.bytes, []).append(c.seconds)
    if not times:
        return None
    how = (
        f"all-reduce span / its size's median, {len(times)} size{'s' * (len(times) != 1)}, rank {least}'s (the"
        f" least-waiting: the last to join the sync, so its spans are transfers, not waits);"
        f" {fit.ranks[least].provenance}"
    )
    return CommJitter.of(times, from_bytes=min(times), source=how)


def _exposed(fit: TraceFit, where: str, samples: int) -> Measured:
    """Communication outside compute per step, the least-waiting rank's mean (TraceFit.least_waiting,
    the rank _span_jitter draws from): the rank that waits for no other has only communication
    there, while another rank's also holds its wait for that one (a data loader's delay, a slower
    GPU), which is no communication cost. The most-waiting rank's is said beside it."""
    mean = {r: float(np.mean([s.exposed_comm_s for s in f.steps])) for r, f in fit.ranks.items()}
    least, most = fit.least_waiting(), max(mean, key=mean.get)
    also = (
        f"; rank {most}'s, the most-waiting, {mean[most] * 1e3:.4g} ms, its wait for the others in it"
        if most != least
        else ""
    )
    return Measured(
        value=mean[least],
        samples=samples,
        source=f"communication outside compute per step, the least-waiting rank's (rank {least}) mean{also}; {where}",
    )


def _host_delays(fit: TraceFit) -> HostDelays | None:
    """The ranks late to the gradient sync outside compute (TraceFit.host_delays), those late at
    all; None where the trace does not show when each rank joins."""
    found = fit.host_delays()
    if found is None:
        return None
    delays, least, steps = found
    where = "; ".join(fit.ranks[r].provenance for r in sorted(delays))
    return HostDelays(
        value={r: d for r, d in sorted(delays.items()) if d > 0},
        samples=steps,
        source=(
            "each rank's mean time before the gradient sync outside forward and backward compute, less rank"
            f" {least}'s, the least (which stays in the rest of the step), over {steps} step{'s' * (steps != 1)}"
            f" (calibrate/trace_fit.py host_delays); {where}"
        ),
    )


def _after_the_wait(
    fit: TraceFit, late: tuple | None, delays: HostDelays | None, absent: list[str]
) -> tuple[Measured, Measured]:
    """(optimizer, the rest of the step): what a step spends outside forward and backward compute
    and the wait for the gradients, as a probe's optimizer term measures it (AdamW, zero_grad,
    data). The optimizer is Optimizer.step + zero_grad where annotated; the rest is data loading,
    host work, a GPU's idle time, communication other than the gradient all-reduces, which would
    otherwise go missing from the predicted step (about 80 % of HTA's sampled 128-GPU job,
    tests/data/hta). calibrate/apply.py scales the optimizer with the parameters and holds the
    rest as measured.

    Both from the rank the others wait for: every rank's step is as long as the others' (they
    meet in their collectives), so the time to add is what that rank spends beyond its compute
    and its wait; a faster rank's rest holds its wait for that one instead (on HTA's sampled
    pair, rank 0's 505 ms against rank 1's 477). That rank is the one that joins the gradient
    sync last where the trace shows when each joins (a slow data loader paces the step with
    compute as fast as the others', ``late``: TraceFit.last_to_sync), else the one that computes
    slowest. That rank's own delay before the sync (``delays``) is taken out of its rest: the
    simulator puts it before that rank's forward, where the others wait for it."""
    ranks = fit.ranks
    r = late[0] if late else max(ranks, key=lambda k: np.mean([s.fwd_bwd_s for s in ranks[k].steps]))
    who = f"rank {r}'s, the last to join the gradient sync," if late else f"the slowest-computing rank's (rank {r})"
    steps, where = ranks[r].steps, ranks[r].provenance
    annotated = any(s.optimizer_s is not None for f in ranks.values() for s in f.steps)
    if not annotated:
        absent.append("optimizer annotation (Optimizer.step#...): the optimizer is inside the rest of the step")
    harness = float(np.mean([s.harness_s for s in steps]))
    own = f"; ddplab's own {harness * 1e3:.3g} ms a step (records, the profiler's step) left out" if harness else ""
    optimizer = Measured(
        value=float(np.mean([s.optimizer_s or 0.0 for s in steps])),
        samples=len(steps) if annotated else 0,
        source=f"{who} mean Optimizer.step + zero_grad; {where}"
        if annotated
        else "absent: no Optimizer.step annotation in the traces (the rest of the step holds it)",
    )
    # Communication outside compute beyond the gradients' wait: the part of the rest that would
    # not stay the same at another scale (HTA's sampled job: its SendRecv and all-to-all).
    comm = float(np.mean([min(max(s.exposed_comm_s - s.wait_s, 0.0), s.outside_s) for s in steps]))
    of_it = f", {comm * 1e3:.3g} ms of it communication outside compute and the gradient wait" if comm else ""
    mine = delays.value.get(r, 0.0) if delays and late else 0.0
    less = f", less its {mine * 1e3:.3g} ms late before the sync (compute.host_delays_s)" if mine else ""
    rest = Measured(
        value=max(float(np.mean([s.outside_s for s in steps])) - mine, 0.0),
        samples=len(steps),
        source=(
            f"{who} mean step outside forward, backward, the wait for the"
            f" gradients and the optimizer (data loading, host work, GPU idle, other communication{of_it}){less},"
            f" held at every scale{own}; {where}"
        ),
    )
    return optimizer, rest


def _trace_rank(f) -> TraceRank:
    st = f.steps
    comp = np.array([s.compute_s for s in st])

    def col(key):
        vals = [getattr(s, key) for s in st]
        return None if any(v is None for v in vals) else vals

    def some(key):  # per step, None where a step does not show it
        vals = [getattr(s, key) for s in st]
        return None if all(v is None for v in vals) else vals

    counts = sorted(len(s.buckets) for s in st)
    return TraceRank(
        trace=f.path,
        provenance=f.provenance,
        gpu=f.gpu,
        steps=[s.step for s in st],
        step_s=[s.step_s for s in st],
        compute_s=comp.tolist(),
        forward_s=col("forward_s"),
        backward_s=col("backward_s"),
        optimizer_s=col("optimizer_s"),
        outside_s=[s.outside_s for s in st],
        ready_s=some("ready_s"),
        lead_s=some("lead_s"),
        comm_s=[s.comm_s for s in st],
        exposed_comm_s=[s.exposed_comm_s for s in st],
        overlap_s=[s.overlap_s for s in st],
        bucket_count=counts[len(counts) // 2],
        jitter_sd=float(np.std(comp / comp.mean())) if comp.mean() > 0 else 0.0,
        hta=vars(f.hta) if f.hta else None,
    )


def _buckets(fit: TraceFit) -> list[BucketReady]:
    """The first rank's gradient all-reduces in issue order: the sizes most of its steps issue in
    (two buckets ready together are issued microseconds apart, and on a loaded box a step now and
    then issues them swapped: tests/test_traces_realrun.py) and the mean ready fraction over the
    steps that issued that order."""
    f = next(iter(fit.ranks.values()))
    lists = [s.buckets for s in f.steps if s.buckets]
    if not lists:
        return []
    orders = [tuple(b.bytes for b in x) for x in lists]
    modal = max(set(orders), key=orders.count)
    same = [x for x, o in zip(lists, orders, strict=True) if o == modal]
    n = len(modal)
    return [
        BucketReady(
            bucket=i,
            bytes=int(same[0][i].bytes or 0),
            ready_fraction=float(np.mean([x[i].ready_fraction for x in same])),
        )
        for i in range(n)
    ]


def _ready_fractions(job: JobShape, buckets: list[BucketReady]) -> tuple[dict[str, float], str]:
    """Per parameter, its bucket's ready fraction, where the traced buckets are DDP's layout of
    the model (sim/buckets.py: same sizes in the same order); the simulator then issues each
    bucket when the trace did. Empty, with the reason, otherwise."""
    if not buckets:
        return {}, "absent: no gradient all-reduce issued inside backward in the trace"
    if any(not b.bytes for b in buckets):
        return {}, "absent: the traced all-reduces carry no sizes (record_shapes off, no NCCL kernel args)"
    shape = model_shape(job.model)
    cap = job.bucket_cap_mb or 25.0
    for per in (4, 2):
        layout = build_buckets(
            shape, job.seq_len, bytes_per_grad=per, bucket_cap_mb=cap, first_bucket_mb=1.0 if cap == 25.0 else cap
        )
        if [b.size_bytes for b in layout] == [b.bytes for b in buckets]:
            out = {}
            for b, traced in zip(layout, buckets, strict=True):
                for name in b.params:
                    out[name] = traced.ready_fraction
            return out, f"each parameter at its bucket's traced issue, {len(buckets)} buckets (sim/buckets.py layout)"
    return {}, (
        f"absent: the {len(buckets)} traced buckets ({', '.join(str(b.bytes) for b in buckets[:4])}...) are not"
        f" DDP's layout of {job.model} at {cap:g} MB"
    )


__all__ = ["JobShape", "TraceError", "calibrate_traces", "calibration", "read_traces"]
