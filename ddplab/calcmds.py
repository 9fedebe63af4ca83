"""`ddplab calibrate`, `ddplab validate`, `ddplab demo` and `ddplab report`. Like commands.py, each
returns what `--json` prints and otherwise prints for people. Output files are written whole
(output/jsonfile.py), so an error leaves nothing half-written."""

import sys

from output.terminal import show
from workflow import render_calib
from workflow.progress import StatusLine, StepProgress, say

# workflow.calibration is imported where it is used: it brings scipy.optimize, scipy.stats and
# matplotlib, 1.1 s of every `ddplab` start on the 2-core box (python -X importtime), whatever
# the command, since the parser is built whole.


def calibrate(args):
    from workflow import calibration

    calib = calibration.calibrate_runs(
        args.runs, args.output, seed=args.seed, command=" ".join(["ddplab", *args.argv]), model=args.model,
        seq_len=args.seq_len, micro_batch=args.micro_batch, precision=args.precision, grad_accum=args.grad_accum,
        say=say,
        # Bytes of each file read so far: silent for a small trace, a line per quarter for a large one.
        trace_progress=lambda: StepProgress("calibrate: reading traces"),
    )  # fmt: skip
    if args.json:
        return calib.to_json()
    show(render_calib.calibration_lines(calib))
    if calib.trace is not None:
        show(render_calib.trace_lines(calib))
    print(f"wrote {args.output} and {', '.join(calib.plots)}")
    return calib.to_json()


def validate(args):
    if args.public:
        if args.runs or args.calib:
            raise ValueError("--public: takes no RUN_DIR or --calib (it predicts published measurements)")
        return _validate_public(args)
    if not args.runs or args.calib is None:
        raise ValueError("validate: needs RUN_DIR... and --calib calib.json (or --public)")
    from workflow import calibration

    out = calibration.validate_runs(
        args.runs, args.calib, plot=args.plot, seed=args.seed or 0, say=None if args.json else say
    )
    if args.json:
        return out
    show(render_calib.validation_lines(out))
    return out


def _validate_public(args):
    """The public-record table (workflow/calibration.py): measured, predicted, error, tier, held out."""
    from workflow import calibration

    rows, h = calibration.public_validation(plot=args.plot, seed=args.seed)
    if args.json:
        return rows
    show(render_calib.public_lines(rows, h))
    if args.plot is not None:
        print(f"plot: {args.plot}")
    return rows


def demo(args) -> int:
    from workflow.demo import Demo, headlines

    d = Demo(args.out, quick=args.quick, fresh=args.fresh, lab=not args.no_lab, status=StatusLine, say=say)
    try:
        state = d.run()
    except RuntimeError as e:  # a stage failed: what ran is kept, a rerun resumes there
        print(f"ddplab demo: {e}", file=sys.stderr)
        return 1
    total = sum(s["seconds"] for s in state["stages"].values())
    for line in headlines(args.out):
        print(line)
    print(f"report: {args.out / 'report.html'} (stages took {total:.0f} s in all)")
    return 0


def report(args):
    from workflow.report import write_report

    problems: list[str] = []
    path = write_report(args.run_dir, problems)
    for p in problems:  # the page says so too, in the section that could not be drawn
        say(f"ddplab report: warning: {args.run_dir}/{p}")
    print(f"wrote {path}")
    return str(path)
