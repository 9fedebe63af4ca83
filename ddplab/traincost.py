"""`--tokens` and `--usd-per-gpu-hour` on `simulate` and `compare`: days, GPU-hours and dollars
to train, at the simulated throughput with failures folded in (sim/train_cost.py), added to
each summary as ``to_train`` (workflow/train_cost.py) and printed under it."""

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


def _tokens(n: float) -> str:
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= size:
            return f"{n / size:.4g}{suffix}"
    return f"{n:,.0f}"


def lines(summary: dict, indent: str = "  ") -> list[str]:
    """What `simulate` prints under its throughput: the time and money, then what they rest on."""
    c = summary.get("to_train")
    if c is None:
        return []
    money = f", ${c['usd']:,.0f} at ${c['usd_per_gpu_hour']:.2f}/GPU-hour" if c["usd"] is not None else ""
    return [
        f"{indent}to train {_tokens(c['tokens']):<7} {c['days']:,.2f} days wall clock including failures"
        f" ({c['gpu_hours']:,.0f} GPU-hours{money}); {c['failure_free_days']:,.2f} days without failures",
        f"{indent}  goodput        {c['goodput']:.1%}: MTBF {c['mtbf_h']:.3g} h ({c['mtbf_from']}),"
        f" restart {c['restart_min']:g} min, checkpoint {c['checkpoint_min']:g} min every"
        f" {c['interval_min']:.0f} min (Daly's interval)",
    ]
