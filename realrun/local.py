"""`ddplab probe` and `ddplab train` on this machine: checks, then torchrun with --nproc ranks
(realrun/launch.py), and after training the per-rank summary (realrun/report.py)."""

import sys

from realrun.cli import check_args
from realrun.launch import run_local
from realrun.report import failure_line, summarize_train, whole_despite, whole_line
from realrun.runfolder import claim


def _worker_argv(argv: list[str]) -> list[str]:
    """The verb's own arguments, less the launcher's --nproc."""
    rest, skip = [], False
    for a in argv[1:]:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    return rest


def launch_local(verb: str, args) -> int:
    """`ddplab probe|train --nproc N`: the flags checked (a bad one is one ValueError line, before
    the run folder exists), the folder claimed, torchrun started; its exit code. A train run's
    per-rank medians are printed after it (unless Ctrl-C ended it: the one line said so)."""
    check_args(verb, args)

    if args.nproc < 1:
        raise ValueError(f"--nproc: must be >= 1, got {args.nproc}")
    for key, flag in (("straggler", "--straggler"), ("loader_straggler", "--loader-straggler")):
        for rank, _ in getattr(args, key, None) or ():
            if rank >= args.nproc:
                raise ValueError(f"{flag}: rank {rank} out of range for --nproc {args.nproc}")
    if getattr(args, "micro_batch_per_rank", None) and len(args.micro_batch_per_rank) != args.nproc:
        raise ValueError(f"--micro-batch-per-rank: {len(args.micro_batch_per_rank)} values for --nproc {args.nproc}")
    if args.backend == "nccl":
        import torch  # check_args has imported it already

        gpus = torch.cuda.device_count()
        if args.nproc > gpus:  # realrun/dist.py puts rank LOCAL_RANK on cuda:LOCAL_RANK
            raise ValueError(
                f"--nproc {args.nproc}: this machine has {gpus} GPU(s); NCCL runs one rank per GPU"
                f" (use --nproc {max(gpus, 1)})"
            )
    folder = claim(args.out, force=args.force)
    try:
        if folder.moved_to:
            print(f"ddplab {verb}: moved the earlier run in {args.out}/ to {folder.moved_to}/", file=sys.stderr)
        code = run_local(verb, _worker_argv(args.argv), args.nproc, folder)
    finally:
        folder.release()
    if whole_despite(args.out, verb, code):
        print(f"ddplab {verb}: {whole_line(code, f'{args.out}/{verb}.log')}", file=sys.stderr)
        code = 0
    if code != 0:
        print(f"ddplab {verb}: {failure_line(args.out, verb, code)}", file=sys.stderr)
    if verb == "train" and code != 130:
        print_train_summary(args.out, code)
    return code


def print_train_summary(out_dir, code: int) -> None:
    """Per-rank medians after torchrun returns; on failure, on stderr with the diagnosis."""
    try:
        lines = summarize_train(out_dir)
    except ValueError as e:  # no readable records (a rank failed before writing any)
        lines = [f"ddplab train: {e}"]
    for line in lines:
        print(line, file=sys.stdout if code == 0 else sys.stderr)
