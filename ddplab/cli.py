"""`ddplab`: the command users type. It parses, calls the libraries, prints.

Bad input (a ValueError from any library) becomes one line naming the field and
the value, exit code 2, no traceback.
"""

import argparse
import os
import sys
from functools import partial
from pathlib import Path

from ddplab import (
    calcmds,
    commands,
    comparecmd,
    goodputcmd,
    netcmds,
    options,
    plancmd,
    simcmds,
    straggcmd,
    sweepcmd,
    whatifcmd,
)
from output import jsonfile, terminal
from realrun import netlab_verbs
from realrun.cli import Parser, probe_parser, train_parser
from realrun.doctor import add_arguments as doctor_arguments
from realrun.launch_node import add_arguments as launch_arguments
from realrun.local import launch_local
from realrun.signals import unwinding_an_interrupt


def version() -> str:
    """The installed package's version; from a checkout that was never installed, pyproject's."""
    from importlib import metadata

    try:
        return metadata.version("ddplab")
    except metadata.PackageNotFoundError:
        import tomllib

        with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
            return tomllib.load(f)["project"]["version"]


# What `ddplab --help` opens with: what the tool does, for someone who has never seen it.
DESCRIPTION = (
    "ddplab predicts how fast data-parallel training (PyTorch DDP, FSDP) of a transformer runs on a"
    " cluster you describe, from a home lab of 2 GPUs to 65,536: step time, where it goes (compute,"
    " communication, stragglers), memory per GPU, and time and money to train. It also runs real DDP"
    " jobs on your own machines, measures them, and calibrates the predictions with what it measured."
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ddplab", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"ddplab {version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    c = sub.add_parser("cost", help="ring allreduce cost per step on each link, in closed form")
    c.add_argument("--params", default="760M", help="parameters: 124M, 1.3B, 760e6 (K, M, B or G, T: 1e3 to 1e12)")
    c.add_argument(
        "--precision",
        default="bf16",
        help="training precision, as simulate's training.precision: its gradients are what DDP reduces"
        " (fp32, tf32, bf16-amp, fp16-amp: 4 B per parameter; bf16: 2 B). Default bf16, the seed's arithmetic",
    )
    c.add_argument("--bytes-per-param", type=float, help="gradient bytes per parameter, overriding --precision's")
    c.add_argument("--ranks", type=int, default=2, help="data-parallel ranks N")
    c.add_argument("--efficiency", type=float, default=0.85, help="effective fraction of line rate")
    c.add_argument(
        "--link", action="append", metavar="NAME=GBIT_S", help="a link (repeatable); default the seed's four"
    )
    c.add_argument("--compute-s", type=float, help="compute time per micro-step, seconds")
    c.add_argument("--grad-accum", type=int, default=1, help="micro-steps per allreduce K")
    options.json_flag(c, "a list, per link: link, link_gbit_s, traffic_bytes, seconds_per_step")
    c.set_defaults(func=commands.cost)

    s = sub.add_parser("simulate", help="simulate DDP steps of a scenario (one scale or a sweep)")
    s.add_argument("scenario", help="preset name (see `ddplab scenarios`) or a .toml file")
    options.sets(s)
    s.add_argument("--ranks", type=int, help="ranks (default: the scenario's)")
    s.add_argument("--sweep-ranks", metavar="N,N,...", help="simulate each rank count, e.g. 2,8,64,1024")
    s.add_argument("--steps", type=int, help="optimizer steps")
    s.add_argument("--seed", type=int, help="random seed")
    s.add_argument(
        "--horizon-h",
        type=float,
        help="with fail-slow, throttling or diurnal episodes: the hours their expected cost is stated over"
        " (default 24; --json: the key episodes)",
    )
    s.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write per-step and per-rank tables, Chrome trace and breakdown.png here (a sweep: scaling.png"
        " and scaling.csv)",
    )
    s.add_argument(
        "--force",
        action="store_true",
        help="with --out: an earlier simulation there is moved aside to DIR.old-<time> (never deleted)",
    )
    s.add_argument(
        "--engine",
        choices=("fast", "simpy"),
        default="fast",
        help="fast (default): the vectorised recurrence, any size; simpy: the reference model, a SimPy process"
        " per rank and per bucket collective (DDP, up to 256 ranks; same numbers to 1e-12, no trace window)",
    )
    s.add_argument(
        "--records",
        action="store_true",
        help="with --out, also keep and write every rank's every step (records.npz, what `ddplab stragglers`"
        " reads); memory then grows with ranks x steps",
    )
    options.json_flag(
        s,
        "(a list for a sweep) scenario, model, mode, ranks, nodes, steps, seed, step_time_s {mean, p5, p50, p95,"
        " p99}, compute_s, exposed_comm_s, straggler_wait_s, optimizer_s, dataloader_s, host_delay_s, comm_s,"
        " scaling_efficiency, tokens_per_s, memory_gib, mfu, stack, params, model_shape, to_train (with --tokens), ...",
    )
    s.add_argument(
        "--device-gib",
        type=float,
        help="one device's memory, GiB (default: the scenario's compute.device_memory_gib); a configuration"
        " whose per-GPU estimate exceeds it is not simulated: exit 3, naming what would fit",
    )
    options.guards(s, "scales")
    options.calib(s, "measured values replace the preset's")
    options.to_train(s)
    s.set_defaults(func=simcmds.simulate)

    plancmd.add_arguments(sub)

    k = sub.add_parser("collective", help="predicted collective times, as an nccl-tests table")
    k.add_argument("scenario", help="preset name (see `ddplab scenarios`) or a .toml file")
    options.sets(k)
    k.add_argument(
        "--op",
        default="allreduce",
        choices=["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"],  # sim/collectives.py OPS
        help="the collective",
    )
    k.add_argument("--ranks", type=int, help="ranks (default: the scenario's)")
    k.add_argument("--sizes", default="1M,16M,256M,1G", help="sizes: 1M,16M,1G or a range 8:1G (x2 steps)")
    options.json_flag(k, "a list, per size: op, size_bytes, ranks, algorithm, time_us, algbw_gb_s, busbw_gb_s, why")
    k.set_defaults(func=commands.collective)

    m = sub.add_parser("models", help="model presets (GPT-2, Llama) with parameter counts from the built module")
    options.json_flag(m, "a list, per model: model, n_layer, n_embd, n_head, params, ...")
    m.set_defaults(func=commands.models)

    for verb, parent, what in (
        ("probe", probe_parser, "measure collectives, the link, compute and overlap (torchrun, gloo/nccl)"),
        ("train", train_parser, "real DDP GPT-2 training with per-rank per-step records (torchrun)"),
    ):
        v = sub.add_parser(verb, parents=[parent(add_help=False)], help=what)
        v.add_argument("--nproc", type=int, default=2, help="processes (ranks) to start on this machine")
        v.set_defaults(func=partial(launch_local, verb), json=False, returns_code=True)

    # doctor/launch: the seed's section 2.2 (discovery and NIC choice) on real machines.
    dr = sub.add_parser(
        "doctor",
        help="interfaces, route, gloo/NCCL picks, port: this node's torchrun line",
        epilog="exit status: 0 no problems found, 1 the report lists problems, 2 bad input",
    )
    doctor_arguments(dr)
    dr.set_defaults(func=netcmds.doctor)

    la = sub.add_parser(
        "launch",
        help="torchrun commands for N machines (or --exec this one's), and a Slurm script",
        usage="ddplab launch --nodes N --master ADDR:PORT [options] [-- VERB ARGS...]",
    )
    launch_arguments(la)
    la.set_defaults(func=netcmds.launch)

    netlab_verbs.add_parser(sub, Parser)
    _add_calibration(sub)
    comparecmd.add_parser(sub)
    whatifcmd.add_parser(sub)
    sweepcmd.add_parser(sub)
    goodputcmd.add_parser(sub)
    straggcmd.add_parser(sub)

    sc = sub.add_parser("scenarios", help="list the scenario presets (--keys: every key a scenario file may set)")
    sc.add_argument("--keys", action="store_true", help="every scenario key with its unit, default and meaning")
    options.json_flag(sc, "a list, per preset: name, description, ranks")
    sc.set_defaults(func=commands.scenarios)
    return p


def _add_calibration(sub) -> None:
    ca = sub.add_parser(
        "calibrate", help="fit probe runs or profiler traces to simulation parameters: calib.json and plots"
    )
    ca.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR|TRACE",
        help="probe run directories, or PyTorch profiler traces (.json/.json.gz, one per rank; docs/traces.md)",
    )
    tr = ca.add_argument_group("traces without ddplab's metadata (a `train --profile` trace carries these)")
    tr.add_argument("--model", help="the traced job's model preset (scenarios/models.toml)")
    tr.add_argument("--seq-len", type=int, help="its tokens per sequence")
    tr.add_argument("--micro-batch", type=int, help="its sequences per rank per micro-step")
    tr.add_argument("--precision", help="its precision (fp32, bf16-amp, ...)")
    tr.add_argument("--grad-accum", type=int, help="its micro-steps a profiled step (default: forward passes counted)")
    ca.add_argument("-o", "--output", type=Path, default=Path("calib.json"), help="calib.json path (plots beside)")
    ca.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    ca.add_argument("--json", action="store_true", help="print calib.json's content")
    ca.set_defaults(func=calcmds.calibrate)

    va = sub.add_parser(
        "validate",
        help="predict real train runs from a calibration and compare (MAPE, p95, KS); --public: the published record",
    )
    va.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR", help="train run directories")
    va.add_argument("--calib", type=Path, help="calib.json from `ddplab calibrate` (with RUN_DIR)")
    va.add_argument(
        "--public",
        action="store_true",
        help="instead: the presets against published collectives and step times (docs/validation-public.md);"
        " --plot draws each row's error against its tier",
    )
    va.add_argument("--plot", type=Path, help="PNG: predicted vs measured (default: validation.png by --calib)")
    va.add_argument(
        "--seed", type=int, help="simulation seed (default 0; not with --public, whose rows keep their own)"
    )
    options.json_flag(
        va,
        "rows (per run: name, predicted_p50_s, measured_p50_s, error_p50, error_p95, error_p99, ks, ks_p, ks_shape,"
        " ks_shape_p, lag1, ...), mape, mean_error_p50, over, under, ks_pass, ks_shape_pass, ks_reach, plot; with"
        " --public a list, per row: what, source, bytes, measured, predicted, error, bound, held_out, within",
    )
    va.set_defaults(func=calcmds.validate)

    de = sub.add_parser("demo", help="the whole loop here: probe, train, calibrate, validate, simulate, report")
    de.add_argument("--out", type=Path, default=Path("runs/demo"), help="directory for everything (default runs/demo)")
    de.add_argument("--quick", action="store_true", help="smaller probe and run, fewer rank counts (~1.5 min)")
    de.add_argument("--fresh", action="store_true", help="redo every stage (default: reuse finished ones)")
    de.add_argument("--no-lab", action="store_true", help="two processes on loopback even where netlab could run")
    de.set_defaults(func=calcmds.demo, json=False, returns_code=True)

    re_ = sub.add_parser("report", help="the HTML report of a demo directory (report.html beside its PNGs)")
    re_.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a `ddplab demo --out` directory")
    re_.set_defaults(func=calcmds.report, json=False)


def json_text(out) -> str:
    """Standard JSON; a NaN or infinity (the inputs are checked, so one here is a bug) is one
    line naming it rather than output no strict parser reads."""
    try:
        return jsonfile.json_text(out, indent=2)
    except ValueError as e:
        raise ValueError(f"--json: {e}") from None


def main(argv: list[str] | None = None) -> int:
    """``ddplab ARGV``, printing through EscapingStream: text from a scenario file never
    reaches the terminal as control codes (output/terminal.py)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = terminal.EscapingStream(out), terminal.EscapingStream(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        out = args.func(args)
        if getattr(args, "returns_code", False):  # probe/train: the ranks' exit status
            return out
        if args.json:
            print(json_text(out))
        return getattr(args, "exit_code", 0)  # doctor: 1 when its report lists problems
    except BrokenPipeError:  # `ddplab ... | head` (an OSError, so first)
        # Python would fail again flushing stdout at exit; send what is left nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, OSError) as e:
        if unwinding_an_interrupt(e):  # e.g. zipfile's open write handle under SIGTERM
            print(f"ddplab {args.command}: interrupted", file=sys.stderr)
            return 130
        if isinstance(e, ValueError):
            print(f"ddplab {args.command}: error: {e}", file=sys.stderr)
            return 2
        # e.g. --out names a file, a folder we may not write, a full disk
        where = f"{e.filename}: " if e.filename else ""
        print(f"ddplab {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # probe/train handle their own; this is every other command's
        print(f"ddplab {args.command}: interrupted", file=sys.stderr)
        return 130
