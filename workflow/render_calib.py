"""What the calibration commands print for people, as lines: `ddplab calibrate`'s fits (and what
only a profiler trace shows), `validate`'s measured-against-predicted table and `validate
--public`'s published records. Each reads what its workflow/calibration.py function returned."""

import numpy as np

from workflow.units import fmt_bytes, fmt_seconds


def trace_lines(c) -> list[str]:
    """What only a trace shows: per rank, its steps' breakdown; the job's collectives; overlap,
    the slowest rank and what stragglers cost; what the trace does not say."""
    t, out = c.trace, []

    def ms(xs) -> str:
        return f"{np.mean(xs) * 1e3:8.3f}" if xs else "  absent"

    out.append(f"{'trace':<10} {'rank':>4} {'steps':>7} {'step ms':>8} {'compute':>8} {'fwd':>8} {'bwd':>8}"
               f" {'optim':>8} {'other':>8} {'comm':>8} {'exposed':>8} {'buckets':>7} {'jitter':>6}")  # fmt: skip
    for r, x in sorted(t.ranks.items()):
        steps = f"{x.steps[0]}-{x.steps[-1]}"
        out.append(
            f"{'':<10} {r:>4} {steps:>7} {ms(x.step_s)} {ms(x.compute_s)} {ms(x.forward_s)} {ms(x.backward_s)}"
            f" {ms(x.optimizer_s)} {ms(x.outside_s)} {ms(x.comm_s)} {ms(x.exposed_comm_s)} {x.bucket_count:>7}"
            f" {x.jitter_sd:>6.3f}"
        )
    out.append(
        "          other: the step outside forward, backward, the gradient wait and the optimizer (data, host"
        " work, GPU idle, other communication)"
    )
    for r, x in sorted(t.ranks.items()):
        out.append(f"source    rank {r}: {x.provenance}")
    # The profiler's own work per operator is in every traced step; measured on this project's CPU
    # runs (docs/traces.md), not known for the user's job, so said, not subtracted.
    out.append(
        "assumed   the traced steps are the job's: they ran under the profiler, whose own cost is in them"
        " (gpt2-tiny on CPU: traced steps 1.14-1.37x the untraced ones of the same run, docs/traces.md)"
    )
    rest = c.compute.outside_s
    if rest is not None and rest.value > 0:
        out.append(f"assumed   the rest of the step, {fmt_seconds(rest.value)}: {rest.source}")
    if t.buckets:
        sizes = ", ".join(f"{fmt_bytes(b.bytes)} at {b.ready_fraction:.2f}" for b in t.buckets)
        n = len(t.buckets)
        what = f"{n} gradient all-reduce{'s' * (n != 1)} per step"
        out.append(f"buckets   {what} (size at fraction of backward): {sizes}")
    for s in t.collectives:
        out.append(
            f"collective {s.op} {fmt_bytes(s.bytes)} on {s.ranks} ranks: {s.calls} calls, median"
            f" {fmt_seconds(s.median_s)}, busbw {s.busbw_gb_s:.4g} GB/s"
        )
    for op, f in sorted(t.alpha_beta.items()):
        out.append(f"alpha-beta {op}: alpha {fmt_seconds(f.alpha_s)}, busbw {f.busbw_gb_s:.4g} GB/s ({f.sizes} sizes)")
    out.append(
        f"overlap   {t.overlap_fraction.value:.1%} of communication ran during compute; exposed"
        f" {fmt_seconds(t.exposed_comm_s.value)} per step on the least-waiting rank"
    )
    cost = t.straggler_cost.value
    if len(t.ranks) < 2:  # the what-if sets every rank to the median rank's speed: one rank is its own median
        out.append(f"stragglers one rank traced of {c.world_size}: no straggler what-if (it compares ranks' speeds)")
    else:
        # At or under zero, ranks at the median speed came out no faster: no straggler cost to see,
        # the rest the steps' own noise (a "-0.1 % less time" would say the opposite of what it means).
        noise = f"; {-cost:.1%} more: noise" if round(-cost, 3) > 0 else ""
        what = f"{cost:.1%} less time" if round(cost, 3) > 0 else f"no less time (no straggler cost{noise})"
        late = ""
        # The rank the others wait for, and how much of its lateness is not compute (a slow data
        # loader, a host stall): the slowest computer need not be it.
        if t.late_rank is not None and t.late_by_s and t.late_by_s > 0:
            lead = t.late_lead_s or 0.0
            why = f"{fmt_seconds(lead)} of it before the sync outside compute" if lead > 0 else "compute"
            late = (
                f"; rank {t.late_rank} joins the gradient sync last, {fmt_seconds(t.late_by_s)} after the other"
                f" ranks' median ({why})"
            )
        # Ranks that compute alike have no slowest one to name ("slowest rank 0 (x1.000)" said one).
        slow = (
            f"slowest rank {t.slowest_rank} (x{t.slowest_factor:.3f} the median rank's compute)"
            if round(t.slowest_factor, 3) > 1
            else "every rank computes at the median rank's speed"
        )
        out.append(f"stragglers {slow}{late}; every rank at the median speed: {what} ({t.straggler_cost.source})")
    delays = c.compute.host_delays_s
    if delays is not None and delays.value:
        # What the simulator puts before each rank's forward (Scenario.host_delays_s), the latest first.
        shown = sorted(delays.value.items(), key=lambda kv: -kv[1])[:8]
        more = f" and {len(delays.value) - len(shown)} more" if len(delays.value) > len(shown) else ""
        each = ", ".join(f"rank {r} {fmt_seconds(d)}" for r, d in shown)
        out.append(
            f"late      {each}{more} a step before the gradient sync outside compute, beyond the least rank's:"
            " host_delays_s, simulated before each one's forward at the traced scale"
        )
    for a in t.absent:
        out.append(f"absent    {a}")
    return out


def calibration_lines(c) -> list[str]:
    """A calibration as `ddplab calibrate` prints it: networks, holdout, compute, memory, jitter, ranks."""
    from calibrate.calibration import TRACE_NETWORK  # loaded already: ``c`` is one

    out = []
    compiled = ", torch.compile" if c.compiled else ""
    cls = f"; GPU class {c.device_class}" if c.device_class else ""
    what = "profiler trace(s)" if c.trace is not None else "probe run(s)"
    out.append(f"calibration of {len(c.runs)} {what}: {c.probed_on}, {c.backend}, {c.precision}{compiled}{cls}")
    if not c.networks and c.trace is not None:
        out.append("networks  none: a trace times the job's own collectives (below), not the link beneath them")
    elif not c.networks:
        out.append(
            "networks  none measured (one rank, or a probe without --parts collectives,link,overlap):"
            " this calibration carries compute, memory and jitter (simulate --calib-mode device or shape)"
        )
    else:
        out.append(
            f"{'network':<10} {'op':<15} {'alpha':>9} {'busbw GB/s':>18} {'hop us':>8} {'R2(log)':>8}"
            f" {'link Gbit/s':>12} {'stack eff':>9} {'gamma':>6}"
        )
    for label, n in sorted(c.networks.items()):
        for op, coll in sorted(n.collectives.items()):
            f = coll.fit
            lo, hi = f.busbw_ci_gb_s
            if c.trace is not None and label == TRACE_NETWORK:
                # Neither fitted nor probed: a busbw set to the traced wait (its source says how),
                # beside the spread of the per-step rates; no latency, link, R^2 or gamma exists.
                out.append(
                    f"{label:<10} {op:<15} {'-':>9} {f.busbw_gb_s:>7.4g} [per step {lo:.3g}-{hi:.3g}]"
                    f" {'-':>8} {'-':>8} {'-':>12} {'-':>9} {'-':>6}"
                )
                how = n.link_gbit_s.source.removeprefix("not probed: ").removesuffix(", x 8")
                out.append(f"note      {label}: busbw {how}")
                continue
            out.append(
                f"{label:<10} {op:<15} {fmt_seconds(f.alpha_s):>9} {f.busbw_gb_s:>7.4g}"
                f" [{lo:.3g}-{'unbounded' if hi is None else f'{hi:.3g}'}]"
                f" {f.hop_latency_us:>8.1f} {f.r2_log:>8.4f} {n.link_gbit_s.value:>12.4g}"
                f" {n.stack_efficiency.value:>9.3f} {n.interference_gamma.raw:>6.3f}"
            )
    for label, n in sorted(c.networks.items()):
        for op, coll in sorted(n.collectives.items()):
            errs = coll.holdout_rel_err
            if errs:
                worst = max(errs, key=lambda s: abs(errs[s]))
                start = coll.holdout_within_10pct_from_bytes
                held = f"within 10 % from {fmt_bytes(start)} up" if start else "no size range within 10 %"
                out.append(
                    f"holdout   {label} {op}: fit on half the sizes, the other half {held};"
                    f" worst {errs[worst]:+.0%} at {fmt_bytes(worst)}"
                )
        if n.collectives_sched != "fifo":
            out.append(f"note      {label}: collectives timed under the normal scheduler: {n.collectives_sched}")
    k = c.compute
    s = k.step_s
    # One micro-batch size is a line through 0 and its one point: an R2 of 1 that says nothing.
    fit = f"R2 {s.r2:.4f}" if len({p[0] for p in s.points}) > 1 else "one size: through 0"
    out.append(
        f"compute   {k.model} seq {k.seq_len}: forward+backward = {fmt_seconds(s.intercept_s)}"
        f" + {s.per_token_s * 1e6:.3f} us/token ({fit}, {k.samples} iteration{'s' * (k.samples != 1)});"
        f" {_flop_rate(k.achieved_tflop_s.value)} achieved"
    )
    # A trace's step beyond its compute, wait and optimizer (trace_calib._after_the_wait).
    rest = f"; the rest of the step {fmt_seconds(k.outside_s.value)}" if k.outside_s is not None else ""
    out.append(
        f"          optimizer {fmt_seconds(k.optimizer_s.value)}{rest};"
        f" {len(k.ready_fractions.value)} gradients in the ready profile"
    )
    if k.hook_cast_s_per_gb:
        casts = ", ".join(f"{h} {m.value:.3g} s/GB" for h, m in k.hook_cast_s_per_gb.items())
        out.append(f"          comm hook casts per GB of gradient, beyond the plain hook's divide: {casts}")
    if k.memory:
        ddp, per = k.memory.ddp_peak_bytes, k.memory.compute_peak_bytes.per_token_bytes
        out.append(
            f"memory    DDP step peak {fmt_bytes(ddp.value)} allocated at micro-batch {ddp.micro_batch}"
            f" ({ddp.tokens} tokens); {fmt_bytes(per)} per token (max_memory_allocated)"
        )
    nz = c.noise
    out.append(_jitter_line(nz))
    if nz.multipliers_by_micro_batch:
        sizes = ", ".join(f"{b}: {np.std(x):.4f}" for b, x in sorted(nz.multipliers_by_micro_batch.items()))
        out.append(
            f"          sd by micro-batch {sizes} (on the measured machines the simulator draws the run's own size)"
        )
    for label, n in sorted(c.networks.items()):
        j = n.allreduce_jitter
        if j is None:
            continue
        how = "resampled as measured"
        if j.sizes_bytes:  # the simulator draws a collective's from the calls of its nearest timed size
            x, b = np.asarray(j.multipliers), np.asarray(j.sizes_bytes)
            by_size = ", ".join(f"{fmt_bytes(s)} {np.std(x[b == s]):.3f}" for s in np.unique(b))
            how = f"each collective's drawn from its nearest size: sd {by_size}"
        out.append(
            f"comm      {label} allreduce jitter sd {j.sd:.4f} over the median ({len(j.multipliers)} calls from"
            f" {fmt_bytes(j.from_bytes)} up; p99 x{np.percentile(j.multipliers, 99):.3f}; {how})"
        )
    ranks = "  ".join(
        f"rank {r}: x{v.speed_factor:.3f}{' FLAGGED' if v.flagged else ''} (jitter {_rank_jitter(v.noise)})"
        for r, v in sorted(c.ranks.items())
    )
    out.append(f"ranks     {ranks}  (straggler flag: score = fastest/this < 0.75)")
    return out


def _jitter_line(nz) -> str:
    """The jitter fit: the best by AIC, the others, and what the simulator gets; or why none was fitted."""
    if not nz.candidates:
        # each rank's multipliers are over its own mean: with one step a rank, all are 1
        sd = f" (sd {nz.sigma:.4f})" if np.ptp(nz.multipliers) else ""
        return f"jitter    not fitted: {nz.chosen_because}{sd}; a scenario keeps its own jitter"
    others = ", ".join(f"{x.distribution} AIC {round(x.aic)}" for x in nz.candidates[1:])  # round: never "-0"
    best = nz.candidates[0]
    chosen = next((x for x in nz.candidates if x.distribution == nz.distribution), None)
    if nz.chosen_because:  # the best by AIC is one the simulator refuses
        kept = (
            f"{nz.distribution} sigma {nz.sigma:.4f} (KS {chosen.ks:.3f} <= {nz.ks_critical_1pct:.3f})"
            if chosen
            else f"the {nz.samples} measured multipliers (empirical, sd {nz.sigma:.4f})"
        )
        verdict = f"{nz.chosen_because}; the simulator gets {kept}"
    elif nz.distribution == "empirical":
        verdict = (
            f"rejected (KS {best.ks:.3f} > {nz.ks_critical_1pct:.3f} at 1 %): the simulator resamples"
            f" the {nz.samples} measured multipliers (empirical, sd {nz.sigma:.4f})"
        )
    else:
        verdict = f"KS {best.ks:.3f} <= {nz.ks_critical_1pct:.3f}"
    return f"jitter    best fit {best.distribution} sigma {best.sigma:.4f} (AIC {round(best.aic)}; {others}): {verdict}"


def _rank_jitter(noise) -> str:
    """A rank's own jitter: its best fit, or its sd alone where it has too few steps to fit
    (calibrate/noise_fit.py rank_noise's "none")."""
    if noise.best_fit == "none":
        return f"sd {noise.sd:.3f} over {noise.samples} step{'s' * (noise.samples != 1)}, too few to fit"
    return f"{noise.best_fit} sd {noise.sd:.3f}"


def _p_value(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.0e}"


def _flop_rate(tflop_s: float) -> str:
    return f"{tflop_s:.4g} TFLOP/s" if tflop_s >= 1 else f"{tflop_s * 1e3:.3g} GFLOP/s"


def validation_lines(v: dict) -> list[str]:
    """`ddplab validate RUN_DIR... --calib`: per run predicted against measured, then the errors' summary."""
    out = []
    out.append(
        f"{'run':<26} {'p50 pred':>9} {'p50 meas':>9} {'p50 err':>7} {'p95 err':>7} {'p99 err':>7}"
        f" {'KS':>5} {'KS p':>6} {'shape p':>7} {'lag1':>5} {'wait pred':>9} {'wait meas':>9} {'cmp pred':>9}"
        f" {'cmp meas':>9}"
    )
    for r in v["rows"]:
        out.append(
            f"{r['name']:<26} {fmt_seconds(r['predicted_p50_s']):>9} {fmt_seconds(r['measured_p50_s']):>9}"
            f" {r['error_p50']:>+7.1%} {r['error_p95']:>+7.1%} {r['error_p99']:>+7.1%}"
            f" {r['ks']:>5.2f} {_p_value(r['ks_p']):>6} {_p_value(r['ks_shape_p']):>7} {r['lag1']:>+5.2f}"
            f" {fmt_seconds(r['predicted_wait_s']):>9} {fmt_seconds(r['measured_wait_s']):>9}"
            f" {fmt_seconds(r['predicted_compute_s']):>9} {fmt_seconds(r['measured_compute_s']):>9}"
        )
    for r in v["rows"]:
        if r.get("unprobed_schedule"):
            what = f"its {r['unprobed_schedule']} schedule was not probed at its depth and chunks"
            out.append(
                f"  {r['name']}: {what} (probe --parts ...,pp): the framework's cost"
                " per action is not in this prediction"
            )
    n = len(v["rows"])
    steps = sorted({r["steps"] for r in v["rows"]})
    measured = f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"
    out.append(
        f"step time p50: MAPE {v['mape']:.1%} over {n} runs (worst {v['worst']}); mean signed error"
        f" {v['mean_error_p50']:+.2%}, {v['over']} over and {v['under']} under (sign test p"
        f" {_p_value(v['sign_test_p'])}); p95 MAPE {v['mape_p95']:.1%}, p99 MAPE {v['mape_p99']:.1%}"
    )
    out.append(
        f"step time mean: MAPE {v['mape_mean']:.1%}; mean signed error {v['mean_error_mean']:+.2%},"
        f" {v['over_mean']} over and {v['under_mean']} under"
    )
    out.append(
        f"distribution: {v['ks_pass']} of {n} runs pass the two-sample KS test at p >= {v['ks_alpha']:g}"
        f" ({measured} measured against {v['rows'][0]['simulated_steps']} simulated steps; distance mean"
        f" {v['ks_mean']:.2f}, max {v['ks_max']:.2f}); {v['autocorrelated']} of {n} with lag-1"
        f" autocorrelation above 2/sqrt(steps); plots {v['plot']}, {v['plot_cdf']}"
    )
    out.append(
        f"shape: {v['ks_shape_pass']} of {n} pass it with each run's level taken out (`shape p`: the measured"
        " steps scaled to the predicted median, p by a bootstrap of the model's steps): a run that passes"
        " only this is refused by its level, not by its spread or tails"
    )
    reach = v.get("ks_reach")
    if reach:
        low, high = reach["level_range"]
        out.append(
            f"level: compute per run {low:+.1%} to {high:+.1%} of the prediction (sd {reach['level_sd']:.1%});"
            f" a model right in all but each run's level, off by that much, would pass the plain KS test in"
            f" {reach['reach_expected']:.1f} of {reach['reach_runs']} runs on average, {reach['reach_need']} or more"
            f" with probability {_p_value(reach['reach_p_bar'])} (calibrate/stepdist.py ks_reach)"
        )
    return out


def public_lines(rows: list[dict], h: dict) -> list[str]:
    """`ddplab validate --public`: measured, predicted, error, tier and held out, per published record."""
    out = []
    out.append(f"{'what':<46} {'measured':>15} {'predicted':>10} {'error':>8}  bound  held out")
    for r in rows:
        flag = "" if r["within"] else "  MISS"
        held = "yes" if r["held_out"] else "fitted"
        out.append(
            f"{r['what']:<46} {r['measured']:>10.4g} {r['unit']:<4} {r['predicted']:>10.4g} {r['error']:>+8.1%}"
            f"  {r['bound']:>4.0%}  {held}{flag}"
        )
    for name in ("held_out", "in_sample"):
        part = h[name]
        worst = part["worst"]
        out.append(
            f"{name.replace('_', '-')}: {part['within']} of {part['rows']} rows within their tier, median |error|"
            f" {part['median_abs_error']:.1%}, worst {worst['what']} ({worst['error']:+.0%})"
        )
    out.append(
        "held-out by source: " + ", ".join(f"{k} {v['within']}/{v['rows']}" for k, v in h["held_out_by_source"].items())
    )
    out.append("step rows by class of job (what `simulate` prints beside a step time; minus: predicted faster):")
    for c in h["step_classes"]:
        spread = f"{c['step_error_min']:+.1%} to {c['step_error_max']:+.1%}, median {c['step_error_median']:+.1%}"
        out.append(
            f"  {c['regime']:<45} {c['within']:>3} of {c['rows']:>3} within, {spread} ({', '.join(c['sources'])})"
        )
    out.append(f"{h['sources']} sources; conditions, citations and commands: ddplab validate --public --json")
    return out
