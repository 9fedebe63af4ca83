"""What no measurement can be: a calibration is refused, with the reason in one line, before
it is written and wherever it is read (issue 25, D8).

`calibrate` once wrote a busbw of 4.6e13 GB/s (collective times that did not grow with size:
a beta of ~0) and a negative compute time per token (timings that fell as the micro-batch
grew) without a word, and a calib.json edited to a speed factor of 0 was accepted. Each check
below is a physical bound, not a taste: the fastest interconnect shipped moves under 1 TB/s
per GPU, a collective or a step does not get cheaper as it grows, and no step runs its FLOPs
faster than its device's tensor peak.
"""

from calibrate.devices import class_peak_tflop_s

BUSBW_MAX_GB_S = 10_000.0  # 10x NVLink 5's 900 GB/s per GPU: past it, the fit found no bandwidth term
STACK_EFFICIENCY_MAX = 10.0  # busbw / the raw TCP rate on the same link (1.7 measured over loopback)
RERUN = "rerun the probe (more --iters, a wider --sizes or --micro-batches range)"


def problems(calib) -> list[str]:
    """Each impossible value as ``field: why, got value`` (empty when the calibration is possible)."""
    out = []
    for label, net in sorted(calib.networks.items()):
        for op, coll in sorted(net.collectives.items()):
            f, at = coll.fit, f"networks.{label}.collectives.{op}"
            if not 0 < f.busbw_gb_s <= BUSBW_MAX_GB_S:
                out.append(
                    f"{at}.busbw_gb_s: {f.busbw_gb_s:.3g} GB/s is not a bandwidth any link has (0 to"
                    f" {BUSBW_MAX_GB_S:g}): the times did not grow with the size"
                )
            if f.alpha_s < 0:
                out.append(f"{at}.alpha_s: a latency cannot be negative, got {f.alpha_s:.3g} s")
        eff = net.stack_efficiency.value
        if not 0 < eff <= STACK_EFFICIENCY_MAX:
            out.append(
                f"networks.{label}.stack_efficiency: the allreduce ran at {eff:.3g}x the link's raw TCP rate"
                f" (possible: 0 to {STACK_EFFICIENCY_MAX:g})"
            )
    c = calib.compute
    for name in ("step_s", "forward_s", "backward_s"):
        fit = getattr(c, name)
        if fit.per_token_s < 0:
            out.append(
                f"compute.{name}.per_token_s: {fit.per_token_s:.3g} s per token: compute time fell as the"
                " micro-batch grew, so the fit extrapolates to negative times"
            )
        if fit.intercept_s < 0:
            out.append(f"compute.{name}.intercept_s: a time cannot be negative, got {fit.intercept_s:.3g} s")
    if c.step_s.per_token_s == 0 and c.step_s.intercept_s == 0:
        out.append("compute.step_s: zero time at every size")
    if not c.achieved_tflop_s.value > 0:
        out.append(f"compute.achieved_tflop_s: must be > 0, got {c.achieved_tflop_s.value:.3g}")
    elif (peak := class_peak_tflop_s(calib.device_class, calib.precision)) and peak[0] <= 0:
        cls = calib.device_class
        out.append(f"precision: {calib.precision} on the {cls} class, which has no such matmuls ({peak[1]})")
    elif peak and c.achieved_tflop_s.value > peak[0]:
        # The FLOPs are the model's per token x the tokens the caller said the step ran: above the
        # device's peak, that model, sequence or micro-batch is not the job that was timed.
        out.append(
            f"compute.achieved_tflop_s: {c.achieved_tflop_s.value:.4g} TFLOP/s of {c.model} at seq {c.seq_len} is"
            f" above the {calib.device_class} class's {calib.precision} peak, {peak[0]:.4g} TFLOP/s ({peak[1]}):"
            " the model, sequence or micro-batch is not the job that was timed"
        )
    if c.optimizer_s.value < 0:
        out.append(f"compute.optimizer_s: a time cannot be negative, got {c.optimizer_s.value:.3g} s")
    for hook, cast in sorted((c.hook_cast_s_per_gb or {}).items()):
        if cast.value < 0:  # a cast, a divide and a copy against one divide: never less work
            out.append(f"compute.hook_cast_s_per_gb.{hook}: a time cannot be negative, got {cast.value:.3g} s/GB")
    for rank, r in sorted(calib.ranks.items()):
        if not r.speed_factor > 0:  # the simulator divides by it; 0 is a rank that takes no time
            out.append(f"ranks.{rank}.speed_factor: must be > 0, got {r.speed_factor:g}")
    if calib.noise.sigma < 0:
        out.append(f"noise.sigma: must be >= 0, got {calib.noise.sigma:g}")
    return out


def check(calib, where: str, fix: str = RERUN) -> None:
    """ValueError with the first problem (and how many more), naming ``where``."""
    found = problems(calib)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ValueError(f"{where}: {found[0]}{more}; {fix}")
