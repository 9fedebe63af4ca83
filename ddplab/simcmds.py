"""`ddplab simulate`: one scale or a sweep of a scenario, optionally calibrated
(workflow/simulation.py); the summary, the memory estimate and the sweep table as people read
them, or JSON."""

from ddplab import options
from output.terminal import show
from realrun.signals import sigterm_as_ctrl_c
from workflow import render_sim, simulation, threed
from workflow.progress import StepProgress, say


def simulate(args):
    # SIGTERM as Ctrl-C: a file being written (records.npz takes minutes at 64k ranks) then
    # loses its temporary in output/atomic.py's cleanup, where SIGTERM's default left it behind.
    with sigterm_as_ctrl_c():
        return _simulate(args)


def _simulate(args):
    counts = simulation.rank_counts(args.ranks, args.sweep_ranks)
    tokens, price = options.tokens_and_price(args)
    options.call(simulation.check_options, args)  # what would change nothing is refused
    # Validate every scale before simulating any, so a bad count fails fast.
    scenarios, provenance, warning = simulation.build_scenarios(
        args.scenario, args.set, counts, steps=args.steps, seed=args.seed, device_gib=args.device_gib,
        calib=args.calib, calib_network=args.calib_network, calib_mode=args.calib_mode or "auto",
    )  # fmt: skip
    horizon_h = simulation.horizon_for(scenarios, args.horizon_h)
    if warning:
        say(f"ddplab simulate: warning: {warning}")
    sweep = args.sweep_ranks is not None
    is_3d = any(sc.parallel3d for sc in scenarios)  # tensor/pipeline parallel, zero1: sim/parallel3d.py
    if is_3d and args.engine == "simpy":
        raise ValueError("--engine simpy: the reference models DDP; tp, pp and zero1 run sim/parallel3d.py")
    if args.records and not args.out:
        raise ValueError("--records: needs --out DIR to write them to")
    if not is_3d:
        ranks = f"--sweep-ranks {args.sweep_ranks}" if sweep else f"ranks {scenarios[0].ranks}"
        simulation.check_sizes(
            scenarios, f"{ranks} x steps {scenarios[0].steps}", engine=args.engine, out=args.out is not None,
            records=args.records, yes=args.yes,
        )  # fmt: skip
    if args.out:  # fail before simulating, not after; a reused folder would mix two runs' records
        moved = simulation.claim_out(args.out, force=args.force)
        if moved is not None:
            say(f"--force: moved the earlier run in {args.out} to {moved}")
    if is_3d:
        return _simulate_3d(args, scenarios, sweep, provenance=provenance, to_train=(tokens, price))
    summaries = simulation.simulate_scales(
        scenarios, provenance, engine=args.engine, records=args.records, out=args.out, sweep=sweep,
        horizon_h=horizon_h, tokens=tokens, price=price, ignore_memory=args.ignore_memory,
        progress=step_progress, say=say,
    )  # fmt: skip
    if not all(simulation.simulated(s) for s in summaries):
        args.exit_code = 3
    if args.json:
        return summaries if sweep else summaries[0]
    show(render_sim.simulate_lines(scenarios, summaries, sweep=sweep, provenance=provenance, out_dir=args.out,
                                   records=args.records))  # fmt: skip
    return summaries


def step_progress(sc) -> StepProgress:
    """The engine's progress line for one scale (workflow/progress.py)."""
    return StepProgress(f"simulating {sc.ranks} ranks")


def _simulate_3d(args, scenarios, sweep: bool, *, provenance, to_train: tuple) -> list[dict]:
    """A tensor- or pipeline-parallel scenario: each scale as workflow/threed.py simulates it
    over its steps, printed as it ends, and with --out the records written."""
    runs = threed.simulate(
        scenarios, ignore_memory=args.ignore_memory, records=args.records, out=args.out, sweep=sweep,
        progress=step_progress, provenance=provenance, to_train=to_train,
    )  # fmt: skip
    out = []
    for sc, run, s in runs:
        if "verdict" in s:
            args.exit_code = 3
        out.append(s)
        if not args.json:
            show(render_sim.run3d_lines(sc, run, s))
    if args.out and not args.json and any("verdict" not in s for s in out):
        show([render_sim.tables3d_line(args.out, args.records)])
    if args.json:
        return out if len(out) > 1 else out[0]
    return out
