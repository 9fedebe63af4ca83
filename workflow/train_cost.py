"""Days, GPU-hours and dollars to train a number of tokens at a simulated throughput, with
failures folded in (sim/train_cost.py): what `--tokens` and `--usd-per-gpu-hour` add to each
summary of `simulate` and `compare` as ``to_train``.

    tokens, price = parse("2T", "2.5")
    attach(summary, scenario, tokens, price)  # summary.to_train: days, gpu_hours, usd, goodput, ...
"""

import math

from sim.batch_reference import compare
from sim.summary import Summary
from sim.train_cost import train_cost
from sim.transformer import param_count
from sim.units import parse_count


def parse(tokens_text: str | None, price_text: str | None) -> tuple[float | None, float | None]:
    """(tokens, price) from the flags' text, or ValueError naming the flag: checked before simulating."""
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


def attach(summary: Summary | dict, sc, tokens: float | None, price: float | None) -> None:
    """``summary.to_train``: sim/train_cost.py's numbers for this row's throughput and GPUs."""
    if tokens is None or not isinstance(summary, Summary):  # an out-of-memory verdict has no throughput
        return
    summary.to_train = cost(sc, summary.tokens_per_s, tokens, price)


def cost(sc, tokens_per_s: float, tokens: float, price: float | None) -> dict:
    """What ``to_train`` holds for scenario ``sc`` at ``tokens_per_s``: a DDP/FSDP summary's
    (``attach``) or a tensor/pipeline-parallel one's (workflow/threed.py), with its global batch
    against the published ones (sim/batch_reference.py), which the days rest on."""
    batch = compare(params=param_count(sc.model.shape), tokens_per_step=sc.global_batch_tokens)
    found = train_cost(tokens=tokens, tokens_per_s=tokens_per_s, gpus=sc.ranks, usd_per_gpu_hour=price)
    return found.as_dict() | {"batch": batch.as_dict()}
