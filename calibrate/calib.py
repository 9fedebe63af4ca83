"""``ddplab calibrate``: probe runs in, one calibration (calibrate/calibration.py) out.

Every fitted value carries where it came from: the run directories, the sample
count and the fit's quality. Networks are kept apart by label (the emulated lab's
link rate, or the run directory's name on real machines), so probes over several
links calibrate one file; compute, noise and per-rank speed pool every run.
"""

import time
from pathlib import Path

import numpy as np

from calibrate import collective_fit, compute_fit, noise_fit
from calibrate.calibration import (
    Achieved,
    Calibration,
    Collective,
    CommJitter,
    Compute,
    Gamma,
    Measured,
    Network,
    RankSpeed,
    ReadyProfile,
)
from calibrate.devices import device_class
from calibrate.records import Run, collective_times, link_gbit_s, read_run
from sim.transformer import flops_per_token, model_shape

# Collective jitter is taken from the sizes whose time is mostly transfer: DDP's buckets that
# matter are MiBs (25 MiB by default, 63 MB for gpt2-mini's last), and below a few MiB the
# emulator's token bucket and the scheduler shape the time (docs/validation.md).
JITTER_FROM_BYTES = 4 << 20


def _need(value, run_or_what, kind: str, part: str):
    if value is None:
        raise ValueError(f"{run_or_what}: no {kind} records (missing probe kind: probe with --parts {part})")
    return value


def read_probe_runs(paths: list[Path]) -> list[Run]:
    runs = []
    for p in paths:
        run = read_run(p)
        if run.verb != "probe":
            raise ValueError(f"{p}: a {run.verb} run; calibrate reads probe runs (validate takes train runs)")
        if run.config.get("quick"):
            raise ValueError(f"{p}: a --quick probe (one 64 MB allreduce); calibrate needs a full probe")
        runs.append(run)
    first = runs[0]
    for run in runs[1:]:
        for what in ("world_size", "backend", "device", "precision", "compiled"):
            if getattr(run, what) != getattr(first, what):
                raise ValueError(
                    f"{run.path}: {what} {getattr(run, what)} differs from {first.path}'s {getattr(first, what)}"
                )
    return runs


def _holds_from(errors: dict[int, float], tolerance: float) -> int | None:
    """The smallest held-out size from which every larger one is predicted within tolerance."""
    sizes = sorted(errors)
    for i, s in enumerate(sizes):
        if all(abs(errors[t]) < tolerance for t in sizes[i:]):
            return s
    return None


def _network(run: Run, rng: np.random.Generator) -> Network:
    times = collective_times(run)
    if not any(op == "allreduce" for op, _ in times):
        raise ValueError(f"{run.path}: no allreduce records (missing probe kind: probe with --parts collectives)")
    link = _need(link_gbit_s(run), run.path, "link", "link")
    rtts = run.of("rtt", 0)
    collectives = {}
    for (op, ranks), by_size in sorted(times.items()):
        fit = collective_fit.fit_collective(op, ranks, by_size, rng=rng)  # before the holdout: one rng, in order
        holdout = collective_fit.holdout_errors(op, ranks, by_size, rng=rng) if len(by_size) >= 6 else {}
        collectives[op] = Collective(
            fit=fit,
            holdout_rel_err=holdout,
            holdout_within_10pct_from_bytes=_holds_from(holdout, 0.10),
            times_s=dict(sorted(by_size.items())),
        )
    gamma = _need(compute_fit.interference_gamma([run]), run.path, "overlap", "overlap")
    allreduce = collectives["allreduce"].fit
    jitter = _comm_jitter(collectives["allreduce"].times_s)
    return Network(
        run=str(run.path),
        collectives=collectives,
        # Probes before --sched existed ran the sweep under the normal scheduler.
        collectives_sched=next((c.get("collective_sched") for c in run.of("complete", 0)), None) or "other",
        link_gbit_s=Measured(value=link[0], samples=link[1], source="raw TCP, slowest direction, median"),
        rtt_p50_us=Measured(value=max(r["p50_us"] for r in rtts), samples=sum(len(r["samples_us"]) for r in rtts))
        if rtts
        else None,
        # Per network: gloo's TCP work competes with compute for the same cores, more of it
        # the faster the link moves bytes (measured here: 0.19 at 1 Gbit/s, 0.68 at 10).
        interference_gamma=Gamma(
            value=max(gamma[0], 0.0),
            raw=gamma[0],
            samples=gamma[1],
            source="overlap probe: compute with 16 MiB allreduces in flight / alone - 1",
        ),
        stack_efficiency=Measured(
            value=allreduce.busbw_gb_s * 8.0 / link[0], source="fitted allreduce busbw / raw TCP link rate"
        ),
        allreduce_jitter=jitter,
    )


def _comm_jitter(times: dict[int, list[float]]) -> CommJitter | None:
    """Every timed allreduce from JITTER_FROM_BYTES up over its size's median; None when the
    sweep stopped below that size or timed fewer than 8 such calls."""
    sizes = len([s for s in times if s >= JITTER_FROM_BYTES])
    how = f"allreduce time / its size's median, {sizes} sizes from {JITTER_FROM_BYTES >> 20} MiB up"
    return CommJitter.of(times, from_bytes=JITTER_FROM_BYTES, source=how)


def calibrate(paths: list[Path], *, seed: int = 0, command: str = "", progress=None) -> Calibration:
    """The calibration of these probe runs; ``progress(line)`` is told when the fitting starts
    (after the records are read and checked, so a corrupt record is the only line printed)."""
    runs = read_probe_runs(paths)
    if progress:
        progress(f"calibrate: fitting {len(runs)} probe run(s)")
    rng = np.random.default_rng(seed)
    networks = {}
    for run in runs:
        if not run.of("collective"):  # one rank (a single GPU): nothing measured between ranks
            continue
        if run.label in networks:
            raise ValueError(f"{run.path}: network {run.label!r} is also measured by {networks[run.label].run}")
        networks[run.label] = _network(run, rng)

    where = ", ".join(str(r.path) for r in runs)
    samples = _need(compute_fit.compute_samples(runs), where, "compute", "compute")
    factors = compute_fit.speed_factors(samples)
    fits = compute_fit.fit_compute(samples, factors)
    opt = _need(compute_fit.optimizer_s(runs), where, "optimizer", "compute")
    ready = _need(compute_fit.ready_profile(runs), where, "grad_ready", "compute")
    per_rank = compute_fit.normalised_compute(samples)
    casts = compute_fit.hook_cast_s_per_gb(runs)

    shape = model_shape(samples.model)
    top_tokens = fits.step.points[-1][0]
    achieved = flops_per_token(shape, samples.seq_len) * top_tokens / fits.step.seconds(top_tokens) / 1e12
    first = runs[0]
    return Calibration(
        created_unix=time.time(),
        command=command,
        seed=seed,
        runs=[str(r.path) for r in runs],
        world_size=first.world_size,
        backend=first.backend,
        device=first.device,
        device_info=first.device_info,
        device_class=device_class((first.device_info or {}).get("name")),
        precision=first.precision,
        compiled=first.compiled,
        networks=networks,
        compute=Compute(
            model=samples.model,
            seq_len=samples.seq_len,
            runs=samples.files,
            samples=fits.samples,
            step_s=fits.step,
            forward_s=fits.forward,
            backward_s=fits.backward,
            achieved_tflop_s=Achieved(
                value=achieved,
                at_tokens=top_tokens,
                source="model FLOPs per token (sim/transformer.py) x tokens / fitted step time, fastest rank",
            ),
            optimizer_s=Measured(value=opt[0], samples=opt[1], source=_optimizer_source(runs)),
            ready_fractions=ReadyProfile(value=ready[0], samples=ready[1], source="grad_ready, mean over ranks"),
            buckets_default_cap=compute_fit.bucket_profile(runs),
            memory=compute_fit.memory_fit(runs),
            tp_block=compute_fit.tp_block_fit(runs),
            pp_schedules=compute_fit.pp_schedules_fit(runs),
            hook_cast_s_per_gb=None
            if casts is None
            else {
                hook: Measured(
                    value=v,
                    samples=n,
                    source=f"{hook}_compress_hook's cast, divide and copy back over all gradients, less the"
                    " plain hook's divide; slowest rank's mean, per GB of gradient",
                )
                for hook, (v, n) in casts.items()
            },
        ),
        # Pooled, not step by step: each rank times its compute alone (its own process group,
        # realrun/probe_compute.py), so the ranks' k-th iterations are not one moment.
        noise=noise_fit.measured_noise(
            samples,
            count=fits.samples,
            source="per-iteration forward+backward / its (rank, micro-batch) mean; MLE, the best AIC"
            " the simulator takes (normal up to sigma 0.25); empirical when KS rejects each at 1 %",
            steps_together=False,
        ),
        ranks={
            r: RankSpeed(**v, noise=noise_fit.rank_noise(per_rank[r]))
            for r, v in noise_fit.straggler_scores(factors).items()
        },
    )


def _optimizer_source(runs: list[Run]) -> str:
    if all("adamw_s" in r for run in runs for r in run.of("optimizer")):
        return "slowest rank's mean of a training step outside forward and backward (AdamW, zero_grad, data)"
    return "slowest rank's mean AdamW step (repeated on fixed gradients: a probe from before 2026-12)"
