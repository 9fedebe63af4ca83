"""``ddplab validate``: predict each real training run from the calibration alone,
then compare with what it measured.

For a ``ddplab train`` run the simulator gets the same configuration (model,
sequence, micro-batch per rank, accumulation, bucket cap, comm hook, overlap,
injected straggler, and from probes its slowed loader: ``loader_scenario``) on the
calibrated machines (calibrate/apply.py, mode ``all``, the network the run used).
Nothing of the train run's own timing enters the prediction. Definitions match on both sides:

- step time: a step's ``step_wall_s`` (mean over ranks), p50, p95 and p99 over the steps
  after the first ``WARMUP_STEPS`` (step 0 runs DDP's single bootstrap bucket and
  allocates; step 1 is the first with rebuilt buckets), each the same percentile
  (numpy's linear interpolation) on both sides;
- wait: the time from a rank's last bucket being ready until backward returned
  (realrun's ``wait_s``; sim's exposed comm + straggler wait), mean over ranks;
- exposed comm: the least-waiting rank's wait (the slowest rank waits only for
  communication it could not hide); straggler wait: mean wait - that;
- the distribution: the p95 and p99 errors beside the p50's, and the two-sample
  Kolmogorov-Smirnov test between the measured and the simulated step times
  (scipy.stats.ks_2samp: the distance ``ks`` and its p-value ``ks_p``; a run passes at
  ``ks_p >= KS_ALPHA``). The test takes steps as independent draws; the measured steps'
  lag-1 autocorrelation ``lag1`` says how far they are not (slow stretches on a shared
  box), and the plain p-value is reported as it is (docs/validation.md says what
  autocorrelation does to it). Beside it the same test with the run's level taken out
  (``ks_shape``, ``ks_shape_p``: the measured steps scaled to the predicted median, the
  p-value by a bootstrap of the model's steps; calibrate/stepdist.py shape_test): whether a
  refusal is the level, which moves with the box from run to run, or the spread and tails;
- over runs, what the plain KS count can say at the level scatter these runs show
  (calibrate/stepdist.py ks_reach): how many a model right in all but each run's level would pass.
"""

from pathlib import Path

import numpy as np
from scipy.stats import binomtest

from calibrate.apply import apply_calibration
from calibrate.calibration import Calibration
from calibrate.records import Run, read_run
from calibrate.refusal import scenario_or_refusal
from calibrate.stepdist import KS_ALPHA, compare, ks_reach, lag1_autocorrelation, percentiles, shape_rng
from calibrate.validate3d import layout_of, row_3d
from scenarios import load_models

WARMUP_STEPS = 2
# Simulated steps per run: the predicted distribution's sample. Five times or more the measured
# runs' ~100 steps, so the two-sample test is nearly the one-sample test against the model
# itself, and the simulated p99 rests on 20 steps above it.
SIM_STEPS = 2000


def _measured(run: Run) -> dict:
    steps, kept = run.complete_steps(WARMUP_STEPS)
    if "wait_s" not in steps[kept[0]][0]:
        raise ValueError(f"{run.path}: an uninstrumented run (--no-instrument) has no per-step timing to validate")
    total = np.array([[steps[s][r]["step_wall_s"] for r in range(run.world_size)] for s in kept])
    wait = np.array([[steps[s][r]["wait_s"] for r in range(run.world_size)] for s in kept])
    compute = np.array(
        [[steps[s][r]["forward_s"] + steps[s][r]["backward_s"] for r in range(run.world_size)] for s in kept]
    )
    step_s = total.mean(axis=1)
    return {
        "steps": len(kept),
        "step_s": step_s,
        **percentiles(step_s),
        "mean_s": float(step_s.mean()),
        "lag1": lag1_autocorrelation(step_s),
        "wait_s": float(wait.mean()),
        "exposed_comm_s": float(wait.min(axis=1).mean()),
        "straggler_wait_s": float((wait.mean(axis=1) - wait.min(axis=1)).mean()),
        "compute_s": float(compute.mean()),
    }


def scenario_for(run: Run, calib: Calibration, calib_path: str, *, seed: int) -> tuple[dict, str]:
    """The simulator's scenario data for this run on the calibrated machines."""
    cfg = run.config
    model = cfg["model"]
    models = load_models()
    if model not in models:
        raise ValueError(f"{run.path}: model {model!r} is not a preset here")
    seq = cfg.get("seq_len") or models[model]["block_size"]
    nets = calib.networks
    label = run.label if run.label in nets else None
    if label is None and len(nets) > 1:
        raise ValueError(
            f"{run.path}: ran on network {run.label!r}; the calibration measured {', '.join(sorted(nets))}"
        )
    label = calib.network(label)[0] if nets else None  # a one-rank run communicates nothing
    per_rank = cfg.get("micro_batch_per_rank") or [cfg["micro_batch"]] * run.world_size
    if len(per_rank) != run.world_size:
        raise ValueError(f"{run.path}: --micro-batch-per-rank has {len(per_rank)} entries for {run.world_size} ranks")
    base_mb = max(per_rank)
    data = {
        "name": f"validate:{run.path}",
        "ranks": run.world_size,
        "steps": SIM_STEPS,
        "seed": seed,
        "model": {"preset": model},
        "training": {
            "micro_batch_size": base_mb,
            "seq_len": seq,
            "grad_accum": cfg.get("grad_accum", 1),
            "bucket_cap_mb": cfg.get("bucket_cap_mb", 25.0),
            "precision": run.precision,  # as the run trained: its gradient dtype fills DDP's buckets
            "overlap": not cfg.get("no_overlap", False),
            "comm_hook": cfg.get("comm_hook", "none"),
        },
        "network": {"backend": run.backend, "algorithm": "ring", "gpus_per_node": 1, "nics_per_node": 1},
        "noise": {},
        "compute": {},
    }
    applied = apply_calibration(data, calib, calib_path=calib_path, network=label, mode="all")
    data = applied.data
    # Per-rank work: the measured speed factor, times the injected straggler's burn, times
    # this rank's share of micro-batch compute (uneven micro-batches, as apply_calibration
    # takes compute: measured means where probed, the affine fit outside).
    fit = calib.compute.step_s
    factors = {r: v.speed_factor for r, v in calib.ranks.items()}
    for rank, factor in cfg.get("straggler") or []:
        factors[rank] = factors.get(rank, 1.0) * factor
    for rank, mb in enumerate(per_rank):
        factors[rank] = factors.get(rank, 1.0) * fit.at(mb * seq)[0] / fit.at(base_mb * seq)[0]
    data["stragglers"] = ",".join(f"{r}:{f:.6g}" for r, f in sorted(factors.items()) if r < run.world_size)
    if calib.trace is None:  # a trace measured the run's loader in its ranks' time before the sync
        loader_compute, loader_top = loader_scenario(cfg, run.path)
        data["compute"] = {**data.get("compute", {}), **loader_compute}
        data |= loader_top
    scenario_or_refusal(data, applied.measured, calib, calib_path, can_set=False)  # names the file and the fix
    return data, label


def loader_scenario(cfg: dict, path) -> tuple[dict, dict]:
    """(compute keys, top-level keys): the run's slowed loader as the simulator's (sim/loader.py,
    docs/loader.md): ``--loader-delay-ms`` is each batch's build time with ``--loader-workers``
    and ``--loader-prefetch``; a ``--loader-straggler RANK:MS`` rank's batches take MS longer,
    a factor on that time where there is one, else (no base delay, built in the loop) K x MS
    late before its forward each step (``host_delays_s``: blocking, the same wait). A probe
    calibration knows nothing of either, so without this the prediction left them out. Only the
    delays are the run's; each batch's own build (a few ms of random tokens) is in the probe's
    optimizer term. A straggler with workers and no base delay is refused: sim/loader.py scales
    one base time per rank."""
    b = float(cfg.get("loader_delay_ms") or 0.0) / 1e3
    workers = int(cfg.get("loader_workers") or 0)
    extra = {int(r): ms / 1e3 for r, ms in cfg.get("loader_straggler") or []}  # seconds more a batch
    compute, top = {}, {}
    if b > 0 or workers:
        compute = {"dataloader_batch_s": b, "dataloader_workers": workers}
        compute["dataloader_prefetch_factor"] = int(cfg.get("loader_prefetch") or 2)
    if not extra:
        return compute, top
    if b > 0:
        top["loader_stragglers"] = ",".join(f"{r}:{(b + e) / b:.6g}" for r, e in sorted(extra.items()))
    elif workers == 0:
        k = int(cfg.get("grad_accum") or 1)
        top["host_delays_s"] = ",".join(f"{r}:{k * e:.6g}" for r, e in sorted(extra.items()))
    else:
        raise ValueError(
            f"{path}: --loader-straggler with --loader-workers {workers} and no --loader-delay-ms: the simulator's"
            " loader scales one base build time per rank (sim/loader.py), which 0 cannot express"
        )
    return compute, top


def _how(precision: str, compiled: bool) -> str:
    return f"{precision}{' + torch.compile' if compiled else ''}"


def _predicted(data: dict) -> dict:
    from sim.engine import simulate
    from sim.scenario_file import scenario_from_dict

    # A measured run's size (a few ranks): the per-step minimum over ranks needs the tables.
    res = simulate(scenario_from_dict(data), trace_steps=0, records=True)
    s = res.summary()
    wait = res.exposed_comm_s + res.straggler_wait_s  # (steps, ranks)
    return {
        "step_s": res.step_time_s,
        **percentiles(res.step_time_s),
        "mean_s": float(np.mean(res.step_time_s)),
        "wait_s": float(wait.mean()),
        "exposed_comm_s": float(wait.min(axis=1).mean()),
        "straggler_wait_s": float((wait.mean(axis=1) - wait.min(axis=1)).mean()),
        "compute_s": s.compute_s,
    }


def summarise(rows: list[dict]) -> dict:
    """Over runs: MAPEs, the mean signed p50 error with how many runs are over and under
    (and the two-sided sign test's p-value against no bias), the same for the mean step, how
    many pass KS, as it is and with each run's level taken out, how many have autocorrelated
    steps."""
    errs = [r["error_p50"] for r in rows]
    over, under = int(sum(e > 0 for e in errs)), int(sum(e < 0 for e in errs))
    means = [r["error_mean"] for r in rows]
    return {
        "mape": float(np.mean(np.abs(errs))),
        "mape_p95": float(np.mean([abs(r["error_p95"]) for r in rows])),
        "mape_p99": float(np.mean([abs(r["error_p99"]) for r in rows])),
        "mean_error_p50": float(np.mean(errs)),
        "over": over,
        "under": under,
        # With no bias each run is over or under as a coin falls: P(a split this uneven or more).
        "sign_test_p": float(binomtest(over, over + under).pvalue) if over + under else 1.0,
        # The same for the mean step time (less sensitive than the median to a lumpy distribution).
        "mape_mean": float(np.mean(np.abs(means))),
        "mean_error_mean": float(np.mean(means)),
        "over_mean": int(sum(e > 0 for e in means)),
        "under_mean": int(sum(e < 0 for e in means)),
        "ks_mean": float(np.mean([r["ks"] for r in rows])),
        "ks_max": float(max(r["ks"] for r in rows)),
        "ks_alpha": KS_ALPHA,
        "ks_pass": int(sum(r["ks_p"] >= KS_ALPHA for r in rows)),
        "ks_shape_pass": int(sum(r["ks_shape_p"] >= KS_ALPHA for r in rows)),
        "autocorrelated": int(sum(r["lag1"] > 2 / np.sqrt(r["steps"]) for r in rows)),
        "worst": max(rows, key=lambda r: abs(r["error_p50"]))["name"],
    }


def validate(calib: Calibration, calib_path: str, paths: list[Path], *, seed: int = 0, progress=None) -> dict:
    """{"rows": [...], and summarise()'s keys}; refuses calibration runs."""
    used = {Path(p).resolve() for p in calib.runs}
    runs = []
    for p in paths:
        run = read_run(p)
        if run.path.resolve() in used:
            raise ValueError(f"{p}: used to make the calibration; validate with runs it never saw")
        if run.verb != "train":
            raise ValueError(f"{p}: a {run.verb} run; validate compares against train runs")
        if run.world_size != calib.world_size or run.backend != calib.backend:
            raise ValueError(
                f"{p}: {run.world_size} ranks on {run.backend}; the calibration is {calib.world_size}"
                f" ranks on {calib.backend}"
            )
        trained = _how(run.precision, run.compiled)
        probed = _how(calib.precision, calib.compiled)
        if trained != probed:  # the compute of one precision says nothing exact of another's
            raise ValueError(f"{p}: trained in {trained}; the calibration probed {probed}")
        runs.append(run)
    rows = []
    for i, run in enumerate(runs, 1):
        lay = layout_of(run)
        if lay is not None:  # --tp/--pp: the 3D model (calibrate/validate3d.py)
            row = row_3d(run, lay, calib, calib_path, seed=seed)
            rows.append(row)
            if progress:
                progress(
                    f"[{i}/{len(runs)}] {row['name']} (tp {lay['tp']} x pp {lay['pp']} x dp {lay['dp']}): predicted"
                    f" p50 {row['predicted_p50_s']:.3f} s, measured {row['measured_p50_s']:.3f} s"
                )
            continue
        data, label = scenario_for(run, calib, calib_path, seed=seed)
        m, p = _measured(run), _predicted(data)
        row = {"run": str(run.path), "name": f"{run.path.parent.name}/{run.path.name}", "network": label}
        row["steps"], row["simulated_steps"] = m["steps"], len(p["step_s"])
        keys = ("p50_s", "p95_s", "p99_s", "mean_s", "wait_s", "exposed_comm_s", "straggler_wait_s", "compute_s")
        for key in keys:
            row[f"predicted_{key}"] = p[key]
            row[f"measured_{key}"] = m[key]
        row |= compare(m["step_s"], p["step_s"], shape_rng(seed, row["name"]))
        row["lag1"] = m["lag1"]
        row["ks_alpha"] = KS_ALPHA
        row["measured_step_s"] = [float(x) for x in m["step_s"]]  # the sample the test saw
        # The simulated distribution in 100 numbers (its 0.5th, 1.5th, ... 99.5th percentiles),
        # for the CDF plot; the test itself took all SIM_STEPS.
        row["predicted_quantiles_s"] = [float(x) for x in np.percentile(p["step_s"], np.arange(0.5, 100, 1.0))]
        rows.append(row)
        if progress:
            progress(f"[{i}/{len(runs)}] {row['name']}: predicted p50 {p['p50_s']:.3f} s, measured {m['p50_s']:.3f} s")
    # Its own generator from the seed: the reach does not move when a run's shape test draws more.
    reach = ks_reach(rows, np.random.default_rng(seed))
    return {"calib": calib_path, **summarise(rows), "ks_reach": reach, "rows": rows}
