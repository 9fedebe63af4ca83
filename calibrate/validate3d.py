"""``ddplab validate`` for a tensor/pipeline-parallel train run (`ddplab train --tp/--pp`):
the 3D scenario built from the run's own records (tp, pp, dp, schedule, micro-batches from the
meta record's ``layout``), replayed by sim/parallel3d.py on the calibrated machine, compared
with the measured steps as calibrate/validate.py compares DDP runs.

Where each cost comes from (nothing of the train run's own timing enters; docs/parallelism.md,
"Prediction"):
- compute: the probe's forward and backward at this micro-batch, a fixed cost plus a per-token
  cost: the bare model's (realrun/probe_tp.py) when the probe has it, else the compute probe's
  (DDP's training path). The fixed cost is the operators' dispatch: every TP rank pays all of it,
  a pipeline stage its operators' share (sim/roofline.py's kernels, counted). The per-token cost
  is split over stages and TP shards by the simulator's own roofline (sim/tp.py, kernel by
  kernel). The embedding and output layer are whole on every TP rank in these runs
  (realrun/tp.py), so they are timed at tp = 1;
- TP: with the probe's TP part at this tp, each block is its bare self plus the measured
  (TP model - bare model) / blocks, as sync time no rank's speed or noise scales; else the four
  alpha-beta allreduces of sim/parallel3d.py on the calibrated link;
- the pipeline: with the probe's pipeline part (realrun/probe_pp.py) at this depth, each forward and
  backward action of this schedule costs the probe's action time on top (sync time, the sends in
  it); without it the sends below and nothing else;
- sends: the probe's in-step send, else sim/parallel3d.py's on gloo's calibrated hop; the
  data-parallel reduction: sim/parallel3d.py's, on the calibrated link, every rank as on its
  own host (gpus_per_node 1, as validate's DDP scenarios);
- the optimizer: the probe's, each stage its parameter tensors' share; speed: every rank at the
  ranks' mean calibrated speed (at 1 with the TP probe, whose times are medians over ranks);
  per-step jitter: the calibration's.
"""

import numpy as np

from calibrate.apply import apply_calibration
from calibrate.calibration import Calibration
from calibrate.records import Run
from calibrate.stepdist import KS_ALPHA, compare, lag1_autocorrelation, percentiles, shape_rng
from scenarios import load_models

WARMUP_STEPS = 2  # calibrate/validate.py's; step 1 also ran under MemTracker (realrun/train3d.py)
SIM_STEPS = 500  # one simulate_3d call draws one step; 500 draws take a few seconds here


def layout_of(run: Run) -> dict | None:
    """The run's layout (realrun/SCHEMA.md, "train"), or None for a DDP run."""
    lay = run.layout
    return lay if lay and lay["tp"] * lay["pp"] > 1 else None


def scenario_3d(run: Run, lay: dict, calib: Calibration, calib_path: str, *, seed: int) -> tuple[dict, str]:
    cfg = run.config
    models = load_models()
    seq = cfg.get("seq_len") or models[cfg["model"]]["block_size"]
    label = calib.network(run.label if run.label in calib.networks else None)[0]
    training = {
        "micro_batch_size": cfg["micro_batch"],
        "seq_len": seq,
        "grad_accum": lay["micro_batches"],
        "precision": run.precision,
        "overlap": False,  # realrun/train3d.py reduces over DP after the pipeline drains
        "comm_hook": "none",
    }
    data = {
        "name": f"validate:{run.path}",
        "ranks": run.world_size,
        "steps": 1,
        "seed": seed,
        "model": {"preset": cfg["model"]},
        "training": training,
        "network": {"backend": run.backend, "algorithm": "ring", "gpus_per_node": 1, "nics_per_node": 1},
        "noise": {},
        "compute": {},
    }
    data = apply_calibration(data, calib, calib_path=calib_path, network=label, mode="all").data
    # Calibrated as DDP's one-rank-per-host scenario, then made 3D: the simulator keeps TP inside
    # a node, so every rank on one "node" whose links are the calibrated ones (the probe measured
    # gloo between these very processes, over loopback).
    net = data["network"]
    net |= {"gpus_per_node": run.world_size, "intra_link": "pci"}
    net |= {"intra_gb_s": net["nic_gbit_s"] / 8.0, "intra_efficiency": net.get("nic_efficiency", 1.0)}
    data["training"] |= {"tp": lay["tp"], "pp": lay["pp"], "sequence_parallel": False}
    if lay["pp"] > 1:
        data["training"]["pp_schedule"] = lay["schedule"]
        data["training"]["pp_virtual_stages"] = lay.get("virtual", 1)  # interleaved's chunks per stage
    # The 3D model times kernels by the roofline (it refuses a whole-step compute time); the
    # probe's whole-model time scales the roofline's split instead (predict_3d).
    for key in ("step_compute_s", "mfu"):
        data["compute"].pop(key, None)
    # Every rank at the ranks' mean calibrated speed, not each at its own: `train --tp/--pp`
    # refuses --straggler, so these runs' ranks are alike, and on a shared CPU the compute
    # probe's per-rank speed is the scheduler's share in that minute, not the rank's (three
    # probes within an hour here flagged rank 0 at 2.2x and 4.4x and rank 1 at 3.3x; the runs
    # after them computed alike on both ranks). The calibration's compute is its fastest rank's
    # (speed 1), so the mean is the expected speed of a rank. The per-micro-step jitter, drawn per
    # rank, stays. calibrate/validate.py (DDP) keeps each rank's: its runs can carry an injected
    # straggler.
    # With the TP block probe the compute is its bare model's median over every rank and
    # iteration, already a typical rank's: no factor on it.
    speeds = [v.speed_factor for r, v in calib.ranks.items() if r < run.world_size]
    mean = float(np.mean(speeds)) if speeds and calib.compute.tp_block is None else 1.0
    data["stragglers"] = ",".join(f"{r}:{mean:.6g}" for r in range(run.world_size)) if mean != 1.0 else ""
    return data, label


def _kernel_counts(shape, seq_len: int, tokens: float, dt) -> dict:
    """Kernels (operators) per micro-batch: one block's forward and backward, the embedding's and
    the output layer's (sim/roofline.py's inventory), what the probe's fixed cost is spread over."""
    from sim.roofline import EMBEDDING_KERNELS, block_kernels, head_kernels

    blk = block_kernels(shape, seq_len, tokens, dt)
    counts = {"bf": sum(not k.backward for k in blk), "bb": sum(k.backward for k in blk)}
    for key in ("ef", "eb", "of", "ob"):
        counts[key] = 0
    for k in head_kernels(shape, tokens, dt):
        counts[("e" if k.name.startswith(EMBEDDING_KERNELS) else "o") + ("b" if k.backward else "f")] += 1
    return counts


def stage_tensors(shape, sizes: list[int]) -> np.ndarray:
    """Parameter tensors per stage (sim/transformer.py's list): the embedding's on the first, the
    final norm's and output layer's on the last, the blocks' as ``sizes`` places them."""
    from sim.transformer import param_tensors

    tensors = param_tensors(shape)
    per_block = sum(t.name.startswith("transformer.h.0.") for t in tensors)
    blocks = per_block * shape.n_layer
    first = sum(t.name.startswith(("transformer.wte", "transformer.wpe")) for t in tensors)
    out = np.array([per_block * n for n in sizes], dtype=float)
    out[0] += first
    out[-1] += len(tensors) - blocks - first
    return out


def calibrated_costs(sc, calib: Calibration):
    """sim/parallel3d.py's StepCosts with each stage's compute from the probe (module docstring).

    The probe's forward (backward) time at this micro-batch is its affine fit, a fixed cost plus
    a per-token cost (calib.compute, fitted over the probe's micro-batch sizes). On a CPU at these
    sizes the fixed cost is most of it: the operators' dispatch (Python, autograd, ATen), paid once
    per operator whatever its size. A TP rank runs every operator of its blocks on its shards, so
    it pays the whole fixed cost (not 1/tp of it); a pipeline stage pays its operators' share
    (sim/roofline.py's kernels, counted). The per-token cost is split by the roofline (a TP rank's
    block share is the roofline at tp over the roofline at 1), as the matmuls' work is."""
    from sim.parallel3d import dtypes_3d, fabric_for, layout, step_costs
    from sim.roofline import rates
    from sim.tp import block_time, head_time

    lay = layout(sc)
    base = step_costs(sc, lay)
    t, shape = sc.training, sc.model.shape
    dt = dtypes_3d(sc)
    r = rates(sc.compute, dt)
    common = {"sequence_parallel": False}
    blk = block_time(shape, sc.seq_len, t.micro_batch_size, dt, r, tp=lay.tp, recompute="none",
                     fabric=fabric_for(sc, ranks=lay.tp), **common)  # fmt: skip
    one = fabric_for(sc, ranks=1)
    blk1 = block_time(shape, sc.seq_len, t.micro_batch_size, dt, r, tp=1, recompute="none", fabric=one, **common)
    head = head_time(shape, sc.seq_len, t.micro_batch_size, dt, r, tp=1, fabric=one, **common)
    n = shape.n_layer
    tokens = t.micro_batch_size * sc.seq_len
    roof_f = n * blk1.forward_compute_s + head.embedding_forward_s + head.output_forward_s
    roof_b = n * blk1.backward_compute_s + head.embedding_backward_s + head.output_backward_s
    probed = calib.compute.tp_block
    if probed is not None:
        # The bare model (no DDP), as these runs compute: the compute probe's times are DDP's
        # training path over a one-rank group, whose buffer broadcast and bucket allreduce go
        # through gloo's worker thread each step (about twice the bare model here).
        (icpt_f, slope_f), (icpt_b, slope_b) = probed.model_fit(4), probed.model_fit(5)
    else:
        fit_f, fit_b = calib.compute.forward_s, calib.compute.backward_s
        icpt_f, slope_f, icpt_b, slope_b = fit_f.intercept_s, fit_f.per_token_s, fit_b.intercept_s, fit_b.per_token_s
    scale_f = max(slope_f, 0.0) * tokens / roof_f
    scale_b = max(slope_b, 0.0) * tokens / roof_b
    k = _kernel_counts(shape, sc.seq_len, tokens, dt)
    op_f = max(icpt_f, 0.0) / (n * k["bf"] + k["ef"] + k["of"])
    op_b = max(icpt_b, 0.0) / (n * k["bb"] + k["eb"] + k["ob"])
    # One block on one rank of the TP group, one micro-batch.
    blk_f = scale_f * blk.forward_compute_s + op_f * k["bf"] + blk.forward_comm_s
    blk_b = scale_b * blk.backward_compute_s + op_b * k["bb"] + blk.backward_comm_s
    send = None
    if probed is not None:
        extra_f, extra_b, send = probed.at(tokens)
        if lay.tp > 1 and probed.tp == lay.tp:
            # Measured (realrun/probe_tp.py): the block unsharded plus what the split added to it
            # on these ranks (its four collectives as they run between operators, DTensor's
            # dispatch, less the sharded matmuls' saving), in place of the roofline's shares and
            # the tight-loop alpha-beta collectives.
            blk_f = scale_f * blk1.forward_compute_s + op_f * k["bf"] + extra_f
            blk_b = scale_b * blk1.backward_compute_s + op_b * k["bb"] + extra_b
    # (stage, chunk): chunk g of pp x v on stage g % pp (interleaved; one chunk a stage otherwise).
    blocks = np.zeros((lay.pp, lay.v))
    for g, layers in enumerate(base.layers):
        blocks[g % lay.pp, g // lay.pp] = layers
    fwd, bwd = blocks * blk_f, blocks * blk_b
    sync_f = sync_b = None
    if probed is not None and lay.tp > 1 and probed.tp == lay.tp:
        # simulate_3d scales a stage's forward and backward by its TP group's slowest rank and
        # the per-micro-step noise; the probed extra already holds the wait for the slower rank
        # of the group (it was timed on every rank, through their collectives), so it goes in as
        # sync time, neither scaled nor drawn again.
        sync_f, sync_b = blocks * extra_f, blocks * extra_b
        fwd -= sync_f
        bwd -= sync_b
    fwd[0, 0] += scale_f * head.embedding_forward_s + op_f * k["ef"]
    bwd[0, 0] += scale_b * head.embedding_backward_s + op_b * k["eb"]
    fwd[-1, -1] += scale_f * head.output_forward_s + op_f * k["of"]
    bwd[-1, -1] += scale_b * head.output_backward_s + op_b * k["ob"]
    # The probe's optimizer is torch's for-loop AdamW: a few operators per parameter tensor, at
    # these sizes their dispatch, so each rank pays for its tensors (every TP rank holds all of its
    # stage's tensors, sharded), not for its share of the parameters.
    opt = base.optimizer_s
    if calib.compute.optimizer_s is not None:
        tensors = stage_tensors(shape, blocks.sum(axis=1).astype(int).tolist())
        opt = calib.compute.optimizer_s.value * tensors / tensors.sum()
    # An activation send between stages that computed before it (realrun/probe_tp.py), when
    # probed; else sim/parallel3d.py's alpha-beta send on the calibrated link.
    p2p = send if send is not None and lay.pp > 1 else base.p2p_s
    action = probed_action_s(sc, calib)
    if action:
        # The pipeline probe's cost per forward and backward action of this schedule
        # (realrun/probe_pp.py) holds the framework's sends and receives as its step held them, so
        # no send is added again. Sync time: the framework's, neither scaled by a rank's speed nor
        # drawn again (predict_3d keeps it out of the compute the records count).
        p2p = 0.0
        sync_f = (np.zeros_like(fwd) if sync_f is None else sync_f) + action
        sync_b = (np.zeros_like(bwd) if sync_b is None else sync_b) + action
    return base._replace(
        forward_s=fwd, backward_s=bwd, optimizer_s=opt, p2p_s=p2p, sync_forward_s=sync_f, sync_backward_s=sync_b
    )


def probed_action_s(sc, calib: Calibration) -> float:
    """The pipeline probe's action cost for this run's schedule and micro-batch (0: none probed,
    or probed at another pipeline depth or number of chunks)."""
    t = sc.training
    probed = (calib.compute.pp_schedules or {}).get(t.pp_schedule) if t.pp > 1 else None
    v = t.pp_virtual_stages if t.pp_schedule == "interleaved" else 1
    if probed is None or probed.pp != t.pp or probed.virtual != v:
        return 0.0
    return probed.action_at(t.micro_batch_size * sc.seq_len)


def predict_3d(data: dict, calib: Calibration, *, steps: int = SIM_STEPS, seed: int = 0) -> dict:
    from sim.parallel3d import simulate_3d
    from sim.scenario_file import scenario_from_dict

    sc = scenario_from_dict(data)
    costs = calibrated_costs(sc, calib)
    rng = np.random.default_rng(seed)
    draws = [simulate_3d(sc, rng, costs=costs) for _ in range(steps)]
    step_s = np.array([d.step_s for d in draws])
    m = sc.training.grad_accum
    compute = (costs.forward_s.sum(axis=1) + costs.backward_s.sum(axis=1)) * m  # per stage, speed 1
    if costs.sync_forward_s is not None:  # a TP run's records count its collectives in forward/backward
        compute = compute + (costs.sync_forward_s.sum(axis=1) + costs.sync_backward_s.sum(axis=1)) * m
        # The pipeline's own work, in its wait: 2 m actions a chunk.
        compute = compute - 2 * m * costs.forward_s.shape[1] * probed_action_s(sc, calib)
    return {
        "step_s": step_s,
        "mean_s": float(step_s.mean()),
        "compute_s": float(compute.mean()),
        "wait_s": float(np.mean(step_s[:, None] - compute[None, :] - costs.optimizer_s[None, :])),
        "memory": draws[0].memory,
        "costs": costs,
        "action_s": probed_action_s(sc, calib),
    }


def measured_3d(run: Run) -> dict:
    steps, kept = run.complete_steps(WARMUP_STEPS)
    ranks = range(run.world_size)
    total = np.array([[steps[s][r]["step_wall_s"] for r in ranks] for s in kept])
    wait = np.array([[steps[s][r]["wait_s"] for r in ranks] for s in kept])
    compute = np.array([[steps[s][r]["forward_s"] + steps[s][r]["backward_s"] for r in ranks] for s in kept])
    step_s = total.mean(axis=1)
    return {
        "steps": len(kept),
        "step_s": step_s,
        "mean_s": float(step_s.mean()),
        "wait_s": float(wait.mean()),
        "exposed_comm_s": float(wait.min(axis=1).mean()),
        "straggler_wait_s": float((wait.mean(axis=1) - wait.min(axis=1)).mean()),
        "compute_s": float(compute.mean()),
        "loss": [steps[s][0]["loss"] for s in sorted(steps) if 0 in steps[s]],
    }


def row_3d(run: Run, lay: dict, calib: Calibration, calib_path: str, *, seed: int) -> dict:
    """One validate row (calibrate/validate.py's keys) for a 3D run, plus its layout and the
    memory comparison: sim/memory3d.py's estimate per stage against MemTracker's peak."""
    data, label = scenario_3d(run, lay, calib, calib_path, seed=seed)
    m, p = measured_3d(run), predict_3d(data, calib, seed=seed)
    row = {"run": str(run.path), "name": f"{run.path.parent.name}/{run.path.name}", "network": label}
    row["layout"] = {k: lay[k] for k in ("tp", "pp", "dp", "micro_batches", "schedule")}
    row["layout"]["virtual"] = lay.get("virtual", 1)
    if lay["pp"] > 1 and not p["action_s"]:
        # Where a run's schedule was not probed (realrun/probe_pp.py runs GPipe, 1F1B and
        # interleaved at its PP_VIRTUAL chunks), its framework cost per action is not in the
        # prediction: compute, bubble and sends only.
        row["unprobed_schedule"] = lay["schedule"]
    row["steps"], row["simulated_steps"] = m["steps"], len(p["step_s"])
    mp, pp_ = percentiles(m["step_s"]), percentiles(p["step_s"])
    for key in ("p50_s", "p95_s", "p99_s"):
        row[f"predicted_{key}"], row[f"measured_{key}"] = pp_[key], mp[key]
    for key in ("mean_s", "wait_s", "compute_s"):
        row[f"predicted_{key}"], row[f"measured_{key}"] = p[key], m[key]
    row["measured_exposed_comm_s"], row["measured_straggler_wait_s"] = m["exposed_comm_s"], m["straggler_wait_s"]
    row["predicted_exposed_comm_s"] = row["predicted_straggler_wait_s"] = None  # not split in the 3D model
    row |= compare(m["step_s"], p["step_s"], shape_rng(seed, row["name"]))
    row["lag1"] = lag1_autocorrelation(m["step_s"])
    row["ks_alpha"] = KS_ALPHA
    row["measured_step_s"] = [float(x) for x in m["step_s"]]
    row["predicted_quantiles_s"] = [float(x) for x in np.percentile(p["step_s"], np.arange(0.5, 100, 1.0))]
    row["memory"] = memory_rows(run, p["memory"])
    return row


GIB = float(1 << 30)


def memory_rows(run: Run, estimate) -> list[dict]:
    """Per rank: MemTracker's peak (realrun/train3d.py's mem_tracker record) and sim/memory3d.py's
    estimate for its stage without the CUDA context (a CPU run has none): model states,
    activations in flight and the logits."""
    out = []
    for rank in sorted(run.records):
        tracked = run.of("mem_tracker", rank)
        stage = (run.of("step", rank) or [{}])[0].get("stage", 0)
        est = estimate[stage]
        est_bytes = (est.model_states_gib + est.activations_gib + est.logits_gib) * GIB
        measured = tracked[0]["peak_bytes"] if tracked else None
        out.append(
            {
                "rank": rank,
                "stage": stage,
                "measured_peak_bytes": measured,
                "estimated_bytes": est_bytes,
                "error": est_bytes / measured - 1.0 if measured else None,
            }
        )
    return out
