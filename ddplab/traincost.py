"""`--tokens` and `--usd-per-gpu-hour` on `simulate` and `compare`: days, GPU-hours and dollars
to train, at the simulated throughput with failures folded in (sim/train_cost.py), added to
each summary as ``to_train`` (workflow/train_cost.py) and printed under it (workflow/render_sim.py)."""

from workflow import train_cost


def add_arguments(parser) -> None:
    parser.add_argument(
        "--tokens",
        metavar="N",
        help="tokens to train, e.g. 2T, 300B or 1e12: prints wall-clock days (failures included), GPU-hours"
        " and, with --usd-per-gpu-hour, dollars",
    )
    parser.add_argument("--usd-per-gpu-hour", metavar="USD", help="price of one GPU-hour in US dollars (with --tokens)")


def parse(args) -> tuple[float | None, float | None]:
    """(tokens, price) from the flags (workflow/train_cost.py), or ValueError naming the flag."""
    return train_cost.parse(getattr(args, "tokens", None), getattr(args, "usd_per_gpu_hour", None))
