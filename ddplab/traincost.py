"""`--tokens` and `--usd-per-gpu-hour` on `simulate` and `compare`: days, GPU-hours and dollars
to train, at the simulated throughput with failures folded in (sim/train_cost.py), added to
each summary as ``to_train`` and printed under it."""

import math

from sim.units import parse_count


def add_arguments(parser) -> None:
    parser.add_argument(
        "--tokens",
        metavar="N",
        help="tokens to train, e.g. 2T, 300B or 1e12: prints wall-clock days (failures included), GPU-hours"
        " and, with --usd-per-gpu-hour, dollars",
    )
    parser.add_argument("--usd-per-gpu-hour", metavar="USD", help="price of one GPU-hour in US dollars (with --tokens)")


def parse(args) -> tuple[float | None, float | None]:
    """(tokens, price) from the flags, or ValueError naming the flag: checked before simulating."""
    tokens_text, price_text = getattr(args, "tokens", None), getattr(args, "usd_per_gpu_hour", None)
    tokens = price = None
    if tokens_text is not None:
        try:
            tokens = parse_count(tokens_text, "--tokens")
        except ValueError:
            raise ValueError(
                f"--tokens: expected a token count like 2T, 300B or 1e12 (1 to 1e15), got {tokens_text!r}"
            ) from None
    if price_text is not None:
        if tokens is None:
            raise ValueError("--usd-per-gpu-hour: needs --tokens (the tokens to train, e.g. --tokens 2T)")
        try:
            price = float(price_text)
        except ValueError:
            price = math.nan
        if not (math.isfinite(price) and price > 0):
            raise ValueError(f"--usd-per-gpu-hour: expected a price > 0 in US dollars, got {price_text!r}")
    return tokens, price


def attach(summary: dict, tokens: float | None, price: float | None) -> None:
    """``summary["to_train"]``: sim/train_cost.py's numbers for this row's throughput and GPUs."""
    if tokens is None or "verdict" in summary:  # an out-of-memory row has no throughput
        return
    from sim.train_cost import train_cost

    cost = train_cost(
        tokens=tokens, tokens_per_s=summary["tokens_per_s"], gpus=summary["ranks"], usd_per_gpu_hour=price
    )
    summary["to_train"] = cost.as_dict()


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
