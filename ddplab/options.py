"""The options several `ddplab` commands share, spelled once so that each means the same on every
command: scenario overrides, the every-run scale, the size guards, the output folder, --json, the
sweep engines (workflow/sweep_engines.py) and the cost to train (workflow/train_cost.py)."""

import inspect
from pathlib import Path

from workflow import train_cost

# --dashboard alone: Dask's usual port, still on this machine only; 0.0.0.0:8787 serves everyone.
DASHBOARD = "127.0.0.1:8787"


def sets(p, help: str = "override a scenario key (none: unset an optional one); a=1,b=2 sets two") -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def every_run(p, what: str, *, seed: bool = True) -> None:
    """--ranks, --steps (and --seed) applied to every ``what`` of a study, over each scenario's own."""
    for flag in ("ranks", "steps", "seed")[: 3 if seed else 2]:
        p.add_argument(f"--{flag}", type=int, help=f"{flag} of every {what} (default: each scenario's)")


def guards(p, what: str, yes: str = "run even when the estimate says it takes over 5 minutes") -> None:
    """--yes past the size refusal (workflow/limits.py), --ignore-memory past the memory one."""
    p.add_argument("--yes", action="store_true", help=yes)
    p.add_argument(
        "--ignore-memory", action="store_true", help=f"simulate {what} whose memory estimate exceeds the device too"
    )


def out_dir(p, files: str) -> None:
    p.add_argument("--out", type=Path, metavar="DIR", help=f"write {files} here")


def json_flag(p, keys: str = "") -> None:
    p.add_argument("--json", action="store_true", help="print JSON" + (f": {keys}" if keys else ""))


def engines(p, *, local: str, workers_default: int | None, workers_help: str) -> None:
    """--engine, --workers, --scheduler, --dashboard; ``local``: what --engine local means here."""
    p.add_argument(
        "--engine",
        default="local",
        choices=["local", "dask"],
        help=f"local: {local}; dask: a Dask cluster (pip install 'ddplab[dask]')",
    )
    p.add_argument("--workers", type=int, default=workers_default, help=workers_help)
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --engine dask: a running cluster's scheduler (tcp://HOST:8786) instead of a LocalCluster",
    )
    p.add_argument(
        "--dashboard",
        nargs="?",
        const=DASHBOARD,
        metavar="HOST:PORT",
        help=f"with --engine dask and no --scheduler: the LocalCluster's dashboard address (alone: {DASHBOARD};"
        " without it a free port on 127.0.0.1: the dashboard asks no password, so not on every interface)",
    )


def calib(p, what: str) -> None:
    """--calib and the two flags that say how workflow/simulation.py's ``calibrated`` lays it."""
    p.add_argument("--calib", type=Path, help=f"calib.json: {what} (see --calib-mode)")
    p.add_argument("--calib-network", metavar="LABEL", help="which calibrated network (e.g. 1gbit)")
    p.add_argument(
        "--calib-mode",
        choices=["auto", "all", "device", "shape"],
        help="all: the measured machines; device: one GPU of the preset's class (compute, memory, jitter;"
        " the network stays the preset's); shape: only dimensionless values (default auto: decides, says why)",
    )


def to_train(p) -> None:
    """--tokens and --usd-per-gpu-hour: days, GPU-hours and dollars to train at the simulated
    throughput, failures folded in (sim/train_cost.py), added to each summary as ``to_train``."""
    p.add_argument(
        "--tokens",
        metavar="N",
        help="tokens to train, e.g. 2T, 300B or 1e12: prints wall-clock days (failures included), GPU-hours"
        " and, with --usd-per-gpu-hour, dollars",
    )
    p.add_argument("--usd-per-gpu-hour", metavar="USD", help="price of one GPU-hour in US dollars (with --tokens)")


def tokens_and_price(args) -> tuple[float | None, float | None]:
    """(tokens, price) from to_train's flags, or ValueError naming the flag."""
    return train_cost.parse(args.tokens, args.usd_per_gpu_hour)


def call(fn, args, **given):
    """``fn`` with each of its parameters from the option of the same name (``given`` first): a
    study whose keywords are its command's flags is called without spelling each twice. A
    parameter with no such option is a KeyError here, not a default used in silence."""
    names = [n for n in inspect.signature(fn).parameters if n not in given]
    missing = [n for n in names if not hasattr(args, n)]
    if missing:
        raise KeyError(f"{fn.__name__}: no option for {', '.join(missing)}")
    return fn(**{n: getattr(args, n) for n in names}, **given)
