"""Arguments of the worker verbs, shared by `ddplab probe/train` (which validates them
before starting any process) and the workers torchrun starts. torch-free."""

import argparse
import errno
import math
import os
import re
import sys
from pathlib import Path

OPS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
PROBE_PARTS = ("collectives", "link", "compute", "overlap", "tp", "pp")
# "tp" (the tensor-parallel model, realrun/probe_tp.py) and "pp" (the pipeline schedules,
# realrun/probe_pp.py) only when asked: only a TP or PP prediction reads them
# (calibrate/validate3d.py), and the TP model adds 10-20 s to a CPU probe.
DEFAULT_PROBE_PARTS = ("collectives", "link", "compute", "overlap")
# sim/ has twins of OPS and COMM_HOOKS (realrun may not import sim); tests/test_twins.py holds them equal.
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")
# torch DDP's default bucket_cap_mb: realrun/ddp_wrap.py passes a cap to DDP only when it is
# another (tests/test_realrun_probe.py holds the two equal)
BUCKET_CAP_MB = 25.0
# realrun/precision.py's names; repeated here so that importing this module stays torch-free.
PRECISIONS = ("auto", "fp32", "tf32", "bf16-amp", "bf16", "fp16-amp")
MAX_SIZE_BYTES = 1 << 50  # sim/units.py's bound, held equal by tests/test_twins.py


class DefaultsFormatter(argparse.HelpFormatter):
    """--help shows each option's default, unless it has none (None, False, empty) or the help
    already says it; argparse's ArgumentDefaultsHelpFormatter would also print "(default: None)"."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if default in (None, False, argparse.SUPPRESS) or default == [] or "default" in text.lower():
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"  # as the option is written, not a repr


class EpilogFormatter(argparse.RawDescriptionHelpFormatter, DefaultsFormatter):
    """DefaultsFormatter for a command whose epilog (examples, syntax) keeps its own lines."""


class Parser(argparse.ArgumentParser):
    """Every ddplab and realrun command line: a usage error is one line and exit 2
    (argparse would print the whole usage first). Help shows defaults (DefaultsFormatter)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        """Python's float() reads "nan" and "inf"; no option of ours means either, and a NaN
        compares False with every bound, so it would slip past each range check."""
        ns, rest = super().parse_known_args(args, namespace)
        for action in self._actions:
            if any(not math.isfinite(v) for v in _floats(getattr(ns, action.dest, None))):
                name = "/".join(action.option_strings) or action.dest
                self.error(f"argument {name}: {getattr(ns, action.dest)!r} holds a NaN or an infinity")
        return ns, rest


def _floats(value) -> list[float]:
    """The floats in an option's value: a float, or one inside a list or tuple (one level down)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for item in items:
        out += [v for v in (item if isinstance(item, (list, tuple)) else [item]) if isinstance(v, float)]
    return out


def _csv(choices):
    def parse(text: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        bad = [s for s in items if s not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {','.join(choices)}")
        return items

    return parse


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers like 1,2,4")
    return values


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
        return value

    return parse


def _nonnegative(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = -1
        if not value >= 0:  # `not >=`: a NaN is refused too
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what} >= 0")
        return value

    return parse


def parse_sizes(text: str) -> list[int]:
    """``"1K:256M"`` (doubling) or ``"1M,16M"``; binary suffixes as nccl-tests' -b/-e.
    sim/units.py reads the same notation (realrun may not import sim);
    tests/test_twins.py holds the two readings equal."""

    def one(s: str) -> int:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", s, re.IGNORECASE)
        suffix = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        value = float(m.group(1)) * suffix[m.group(2).upper()] if m else 0.0
        if not 1 <= value <= MAX_SIZE_BYTES:
            raise argparse.ArgumentTypeError(f"{text!r}: sizes like 1K, 16M, 1G, from 1 B to 1 PiB")
        return int(value)

    if ":" in text:
        lo, hi = (one(s) for s in text.split(":", 1))
        if hi < lo:
            raise argparse.ArgumentTypeError(f"{text!r}: range end below its start")
        out = [lo]
        while out[-1] * 2 <= hi:
            out.append(out[-1] * 2)
        return out
    return [one(s) for s in text.split(",") if s.strip()] or [one(text)]


def _rank_value(valid, expected: str):
    """An argparse type for ``RANK:VALUE``, the value held to ``valid`` (NaN fails any bound)."""

    def parse(text: str) -> tuple[int, float]:
        rank, sep, value = text.partition(":")
        try:
            r, v = int(rank), float(value)
        except ValueError:
            r, v = -1, float("nan")
        if not (sep and r >= 0 and valid(v)):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
        return r, v

    return parse


_straggler = _rank_value(lambda f: f >= 1.0, "RANK:FACTOR with FACTOR >= 1, like 1:1.5")
_loader_straggler = _rank_value(lambda ms: 0 < ms < float("inf"), "RANK:MS with MS > 0, like 1:20")


def _add_placement(p: argparse.ArgumentParser) -> None:
    """--backend and --device, chosen apart (realrun/device_choice.py)."""
    p.add_argument(
        "--backend",
        choices=["auto", "nccl", "gloo"],
        default="auto",
        help="auto: nccl when every rank has a CUDA GPU (agreed at start-up), else gloo, which also"
        " reduces CUDA tensors (and MPS ones through the CPU)",
    )
    p.add_argument(
        "--device",
        choices=["auto", "cuda", "mps", "cpu"],
        default="auto",
        help="where each rank computes, whatever the backend: auto = CUDA, then Apple MPS, then CPU",
    )


def _add_numerics(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="auto (default): bf16-amp on GPUs with native bf16, fp32 on CPU; fp32: float32, TF32 off;"
        " tf32: float32 on TF32 tensor cores (GPUs); bf16-amp/fp16-amp: float32 weights, forward"
        " under autocast (fp16 with a gradient scaler); bf16: weights and gradients in bfloat16",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model (nn.Module.compile(), in place)")


def probe_parser(prog: str = "ddplab probe", add_help: bool = True) -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="collective, link, compute and overlap probes", add_help=add_help)
    p.add_argument("--out", type=Path, required=True, help="run directory for the records (a new or empty one)")
    p.add_argument("--force", action="store_true", help="--out holds an earlier run: move it aside (never deleted)")
    _add_placement(p)
    p.add_argument(
        "--parts",
        type=_csv(PROBE_PARTS),
        default=list(DEFAULT_PROBE_PARTS),
        help="which probes to run; tp (the TP model) and pp (the pipeline schedules),"
        " for --tp/--pp predictions, only when named",
    )
    p.add_argument(
        "--ops", type=_csv(OPS), default=["allreduce", "allgather", "reduce_scatter"], help="collectives to sweep"
    )
    # The defaults: a full probe takes ~4-5 min over 1GbE (gloo ~110 MB/s), <1 min on loopback.
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1K:256M"), help="1K:256M or 1M,16M")
    p.add_argument("--iters", type=_positive(int), default=20, help="timed iterations per size")
    p.add_argument("--warmup", type=_nonnegative(int), default=5, help="untimed iterations per size")
    p.add_argument("--link-bytes", type=parse_sizes, default=parse_sizes("32M"), help="bytes per TCP throughput test")
    p.add_argument("--model", default="gpt2-tiny", help="preset for the compute and overlap probes")
    p.add_argument("--seq-len", type=_positive(int), help="tokens per sequence (default: the model's context)")
    p.add_argument("--micro-batches", type=_positive_ints, default=[1, 2, 4, 8], help="micro-batch sizes")
    p.add_argument(
        "--bucket-cap-mb",
        type=_positive(float),
        default=BUCKET_CAP_MB,
        help="DDP's bucket_cap_mb for the compute probe's training step and its bucket-ready profile",
    )
    p.add_argument("--quick", action="store_true", help="the seed's 64 MB allreduce health check only")
    p.add_argument(
        "--sched",
        choices=["fifo", "other"],
        default="fifo",
        help="scheduler for the collective sweep: fifo (real-time, where permitted: the link's own speed)"
        " or other (normal: what training's gloo threads get where they share cores with CPU compute,"
        " as on the emulated home lab; docs/validation.md)",
    )
    p.add_argument("--timeout-s", type=_positive(float), default=120.0, help="collective timeout")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the synthetic tokens")
    _add_numerics(p)
    return p


def train_parser(prog: str = "ddplab train", add_help: bool = True) -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="real DDP training with per-rank per-step records", add_help=add_help)
    p.add_argument("--out", type=Path, required=True, help="run directory for the records (a new or empty one)")
    p.add_argument("--force", action="store_true", help="--out holds an earlier run: move it aside (never deleted)")
    _add_placement(p)
    p.add_argument("--model", default="gpt2-tiny", help="model preset (scenarios/models.toml)")
    p.add_argument("--steps", type=_positive(int), default=20, help="optimizer steps")
    p.add_argument("--micro-batch", type=_positive(int), default=4, help="sequences per rank per micro-step")
    p.add_argument("--micro-batch-per-rank", type=_positive_ints, help="uneven work, e.g. 8,4 (reweighted)")
    p.add_argument("--seq-len", type=_positive(int), help="tokens per sequence (default: the model's context)")
    p.add_argument("--grad-accum", type=_positive(int), default=1, help="micro-steps per optimizer step")
    p.add_argument("--bucket-cap-mb", type=_positive(float), default=BUCKET_CAP_MB, help="DDP's bucket_cap_mb")
    p.add_argument("--comm-hook", choices=COMM_HOOKS, default="none", help="gradient compression hook")
    p.add_argument("--no-overlap", action="store_true", help="launch every bucket after backward ends")
    p.add_argument(
        "--straggler",
        type=_straggler,
        action="append",
        default=[],
        metavar="RANK:FACTOR",
        help="make RANK's compute FACTOR x slower with real work (repeatable; FACTOR 1 only records its compute)",
    )
    p.add_argument("--grad-staging", choices=["none", "cpu"], default="none", help="reduce through CPU tensors")
    p.add_argument("--data", type=Path, help="train on this text file (byte tokens)")
    p.add_argument(
        "--loader-workers",
        type=_nonnegative(int),
        default=0,
        help="build batches in a torch DataLoader with this many worker processes; 0 = in the training loop",
    )
    p.add_argument(
        "--loader-prefetch", type=_positive(int), default=2, help="DataLoader prefetch_factor (with --loader-workers)"
    )
    p.add_argument(
        "--loader-delay-ms",
        type=_nonnegative(float),
        default=0.0,
        help="a slow loader: each batch takes this much longer to build (a sleep, as I/O waits)",
    )
    p.add_argument(
        "--loader-straggler",
        type=_loader_straggler,
        action="append",
        default=[],
        metavar="RANK:MS",
        help="one rank's slow loader: its batches each take MS ms longer to build (repeatable)",
    )
    p.add_argument("--lr", type=_positive(float), default=3e-4, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the data order")
    p.add_argument("--timeout-s", type=_positive(float), default=120.0, help="collective timeout")
    p.add_argument("--no-instrument", action="store_true", help="plain DDP, no timing hooks (overhead baseline)")
    p.add_argument(
        "--profile",
        type=_positive(int),
        nargs="?",
        const=5,  # 2 ranks x 5 steps: past the 8 rank-steps calibrate's jitter fit needs
        metavar="STEPS",
        help="write a PyTorch profiler (Kineto) trace per rank of STEPS steps (default 5, after 2 warm-up"
        " steps) beside the records, trace-rankNNNN.json.gz (`ddplab calibrate` reads them; docs/traces.md)",
    )
    _add_numerics(p)
    _add_3d(p)

    # Test-only, hidden: inject a fault; save step 0's batches, weights and reduced gradients.
    def fault(text: str) -> tuple[int, int, str]:
        parts = text.split(":")
        if len(parts) != 3 or parts[2] not in ("kill", "hang") or not all(x.isdigit() for x in parts[:2]):
            raise argparse.ArgumentTypeError(f"{text!r}: expected RANK:STEP:kill|hang")
        return int(parts[0]), int(parts[1]), parts[2]

    p.add_argument("--fault", type=fault, action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--save-grads", action="store_true", help=argparse.SUPPRESS)
    return p


def _add_3d(p: argparse.ArgumentParser) -> None:
    """Tensor and pipeline parallelism (realrun/train3d.py); data parallelism over the rest."""
    p.add_argument("--tp", type=_positive(int), default=1, help="tensor-parallel ranks per group (Megatron-style)")
    p.add_argument("--pp", type=_positive(int), default=1, help="pipeline stages (--grad-accum micro-batches a step)")
    p.add_argument(
        "--pp-schedule", choices=("gpipe", "1f1b", "interleaved"), default="1f1b", help="pipeline schedule (with --pp)"
    )
    p.add_argument(
        "--pp-virtual-stages",
        type=_positive(int),
        help="model chunks per stage, with --pp-schedule interleaved alone (default 2 there)",
    )


# What the 3D trainer (realrun/train3d.py) does not do; each refused in one line with --tp/--pp.
_NOT_3D = (
    ("compile", "--compile"),
    ("micro_batch_per_rank", "--micro-batch-per-rank"),
    ("no_overlap", "--no-overlap"),
    ("straggler", "--straggler"),
    ("loader_workers", "--loader-workers"),
    ("loader_delay_ms", "--loader-delay-ms"),
    ("loader_straggler", "--loader-straggler"),
    ("no_instrument", "--no-instrument"),
    ("save_grads", "--save-grads"),
    ("fault", "--fault"),
)


def check_3d(args: argparse.Namespace, shape: dict) -> None:
    """--tp/--pp: a layout the ranks and the model allow, and only what the 3D trainer does.
    A schedule option the job would not use is refused, as simulate refuses its keys
    (sim/config.py unused_keys): else the run says 1f1b where its user asked for chunks."""
    if args.pp == 1 and args.pp_schedule != "1f1b":
        raise ValueError(f"--pp-schedule {args.pp_schedule}: schedules pipeline stages, and --pp is 1")
    if args.pp_virtual_stages is not None and (args.pp == 1 or args.pp_schedule != "interleaved"):
        raise ValueError(
            f"--pp-virtual-stages {args.pp_virtual_stages}: only --pp-schedule interleaved (with --pp > 1)"
            f" splits a stage into chunks, and this run's is {args.pp_schedule} at --pp {args.pp}"
        )
    if args.tp * args.pp == 1:
        return
    from realrun.parallel import layout_problem, virtual_stages

    # `ddplab train`'s --nproc, or a worker's world size; neither where `ddplab launch` checks.
    world = getattr(args, "nproc", None) or (int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else None)
    v = virtual_stages(args)
    problem = layout_problem(args.tp, args.pp, world, shape, virtual=v, micro_batches=args.grad_accum)
    if problem:
        raise ValueError(problem)
    for key, flag in _NOT_3D:
        if getattr(args, key, None):
            raise ValueError(f"{flag}: not supported with --tp/--pp (realrun/train3d.py)")
    if args.comm_hook != "none" or args.grad_staging != "none":
        raise ValueError(f"--comm-hook {args.comm_hook} / --grad-staging {args.grad_staging}: not with --tp/--pp")
    if args.precision not in ("auto", "fp32"):
        raise ValueError(f"--precision {args.precision}: --tp/--pp runs train in fp32")


PARSERS = {"probe": probe_parser, "train": train_parser}


# Which probe parts read each option (realrun/probe.py): the model's parts build and step it.
MODEL_PARTS = ("compute", "overlap", "tp", "pp")
PART_OPTIONS = (
    ("--model", "model", MODEL_PARTS),
    ("--seq-len", "seq_len", MODEL_PARTS),
    ("--micro-batches", "micro_batches", MODEL_PARTS),
    ("--bucket-cap-mb", "bucket_cap_mb", MODEL_PARTS),
    ("--ops", "ops", ("collectives",)),
    ("--sizes", "sizes", ("collectives",)),
    ("--sched", "sched", ("collectives",)),
    ("--link-bytes", "link_bytes", ("link",)),
)


def check_probe_parts(args: argparse.Namespace) -> None:
    """An option set away from its default that no probe part asked for reads is refused, as
    train refuses a schedule it would not use: else `probe --parts collectives --model gpt2-760m`
    records a sweep its user takes for the 760M model's. --quick runs the health check alone."""
    defaults = probe_parser(add_help=False)
    parts = () if args.quick else tuple(args.parts)
    for flag, dest, readers in PART_OPTIONS:
        value = getattr(args, dest)
        if value != defaults.get_default(dest) and not set(readers) & set(parts):
            shown = ",".join(map(str, value)) if isinstance(value, list) else value
            asked = "--quick runs the 64 MB allreduce alone" if args.quick else f"--parts is {','.join(parts)}"
            raise ValueError(f"{flag} {shown}: only the {'/'.join(readers)} probe reads it, and {asked}")


def check_args(verb: str, args: argparse.Namespace, *, this_machine: bool = True) -> None:
    """What a parser cannot check alone, checked once for every entry (ddplab probe/train,
    netlab run, launch, the workers), so a bad value fails before any process starts.
    ``this_machine`` False: the ranks run elsewhere (`ddplab launch`), so the GPU and
    compiler checks are left to their workers, which check again on their own machine."""
    from scenarios import load_models

    models = load_models()
    if args.model not in models:
        raise ValueError(f"--model: unknown preset {args.model!r} (known: {', '.join(models)})")
    context = models[args.model]["block_size"]
    if args.seq_len and args.seq_len > context:
        raise ValueError(f"--seq-len: {args.seq_len} exceeds {args.model}'s context {context}")
    if verb == "train" and args.grad_staging == "cpu" and args.comm_hook == "powersgd":
        raise ValueError("--grad-staging cpu: works with --comm-hook none|fp16|bf16, not powersgd")
    if this_machine:  # the environment a CPU rank reads at start (realrun/cpu_alloc.py)
        from realrun.cpu_alloc import prefault_bytes

        prefault_bytes(getattr(args, "nproc", 1))
    from realrun.profiling import FIRST_PROFILED_STEP

    if verb == "train" and getattr(args, "profile", None) and args.steps < FIRST_PROFILED_STEP + args.profile:
        raise ValueError(
            f"--profile {args.profile}: needs --steps >= {FIRST_PROFILED_STEP + args.profile}"
            f" (profiling starts at step {FIRST_PROFILED_STEP}, after DDP's bucket rebuild)"
        )
    if args.compile and args.bucket_cap_mb < 1.0:
        # Under compile, dynamo's DDPOptimizer splits the graph at DDP's bucket cap and asserts
        # that its first bucket, fixed at c10d's 1 MiB, is no larger than the others
        # (torch/_dynamo/backends/distributed.py, DDPOptimizer.__init__; seen failing here).
        raise ValueError(
            f"--bucket-cap-mb {args.bucket_cap_mb:g}: with --compile it must be >= 1 (torch's 1 MiB first bucket)"
        )
    seq_len = args.seq_len or context
    if verb == "probe":
        check_probe_parts(args)
    if verb == "train":
        check_3d(args, models[args.model])
    if verb == "train" and args.data is not None and this_machine:  # elsewhere: the path is the node's
        from realrun.footprint import check_data_file

        check_data_file(args.data, models[args.model]["vocab_size"], seq_len)
    # The hardware checks import torch (~2 s), so only here, never at import: ddplab imports
    # this module at startup.
    from realrun.precision import preflight

    straggler = getattr(args, "straggler", ())
    precision = preflight(
        args.backend, args.precision, args.compile, straggler, this_machine=this_machine, device=args.device
    )
    if this_machine:
        _check_memory(verb, args, models[args.model], seq_len, precision)


def _check_memory(verb: str, args: argparse.Namespace, shape: dict, seq_len: int, precision: str) -> None:
    """Refuse before launch what cannot fit: ``--nproc`` ranks in host memory, one micro-batch
    in a GPU's (realrun/footprint.py: floors, never a run that would fit)."""
    from realrun import footprint
    from realrun.device_choice import compute_device

    micro = max(args.micro_batches) if verb == "probe" else max(args.micro_batch_per_rank or [args.micro_batch])
    need = footprint.rank_bytes_at_least(shape, micro, seq_len, precision)
    on_gpu = compute_device(args.device, 0).type == "cuda"  # MPS shares the host's memory: the host check
    nproc = getattr(args, "nproc", 1)
    if verb == "probe":  # the largest collective and TCP buffers, before the model's checks
        _check_probe_buffers(args, nproc, on_gpu)
    footprint.check_host(nproc, 0 if on_gpu else need, footprint.available_bytes(), micro)
    if on_gpu:
        import torch

        props = torch.cuda.get_device_properties(0)
        footprint.check_device(need, props.total_memory, props.name, micro)


def _check_probe_buffers(args: argparse.Namespace, nproc: int, on_gpu: bool) -> None:
    """Every rank allocates its largest collective (and the chunk allgather and reduce-scatter
    use beside it) and the link test's buffer, so ``--sizes 64G`` is refused here rather than
    by the kernel after torchrun started."""
    from realrun import footprint

    size = max(args.sizes) if "collectives" in args.parts else 0
    link = max(args.link_bytes) if "link" in args.parts else 0
    largest, flag, value = max((size + size // max(nproc, 1), "--sizes", size), (link, "--link-bytes", link))
    what = f"{flag}: the largest, {footprint.gib(value)}, takes {footprint.gib(largest)} per rank"
    if on_gpu and flag == "--sizes":
        import torch

        props = torch.cuda.get_device_properties(0)
        if largest > props.total_memory:
            raise ValueError(f"{what}, is more than {props.name}'s {footprint.gib(props.total_memory)}")
    footprint.check_buffers(nproc, largest, footprint.available_bytes(), what)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in PARSERS:
        print(f"usage: torchrun ... -m realrun {{{','.join(PARSERS)}}} [options]", file=sys.stderr)
        return 2
    verb, rest = argv[0], argv[1:]
    from realrun.lifeline import watch

    watch(_end_this_rank)  # a no-op unless ddplab launched this rank
    args = PARSERS[verb](f"realrun {verb}").parse_args(rest)
    try:
        check_args(verb, args)
    except ValueError as e:
        print(f"realrun {verb}: error: {e}", file=sys.stderr)
        return 2
    if verb == "probe":
        from realrun.probe import run
    else:
        from realrun.train import run
    try:
        return run(args)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):  # only a full disk is the machine's, not a bug
            raise
        print(f"realrun {verb}: error: {e.filename or 'records'}: {e.strerror}", file=sys.stderr)
        return 1


def _end_this_rank(reason: str) -> None:
    """The launcher is gone or let go: mark the records and leave at once, without tearing
    down a process group whose peers are leaving too (that can block)."""
    from realrun.records import abandon_open

    abandon_open(reason)
    os._exit(1)
