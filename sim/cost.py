"""The seed's comm_cost.py: what one ring allreduce of the gradients costs per step,
before anything runs. Ring allreduce moves 2(N-1)/N x S bytes through each rank's
NIC (Patarasuk & Yuan 2009); at an effective fraction of the line rate."""

import math
from typing import NamedTuple

# The seed's four links, Gbit/s.
SEED_LINKS = (("1GbE", 1.0), ("2.5GbE", 2.5), ("10GbE", 10.0), ("RoCE 400G", 400.0))


class LinkCost(NamedTuple):
    link: str
    link_gbit_s: float
    traffic_bytes: float  # per rank per optimizer step
    seconds_per_step: float  # the allreduce of one optimizer step
    comm_compute_ratio: float | None  # T_comm / (K x T_compute), when compute is given


def ring_traffic_bytes(params: float, bytes_per_param: float, ranks: int) -> float:
    return 2.0 * (ranks - 1) / ranks * params * bytes_per_param


def link_costs(
    *,
    params: float,
    bytes_per_param: float,
    ranks: int,
    efficiency: float,
    links=SEED_LINKS,
    compute_s: float | None = None,
    grad_accum: int = 1,
) -> list[LinkCost]:
    """One row per link. With accumulation K the allreduce happens once per K
    micro-steps, so communication per unit of compute falls K-fold."""
    # `not (finite and > 0)`: NaN fails every comparison, so `<= 0` alone would let it through.
    for key, value in (("--params", params), ("--bytes-per-param", bytes_per_param)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{key}: must be > 0 and finite, got {value}")
    if ranks < 2:
        raise ValueError(f"--ranks: an allreduce needs >= 2 ranks, got {ranks}")
    if not 0 < efficiency <= 1:
        raise ValueError(f"--efficiency: must be in (0, 1], got {efficiency}")
    if grad_accum < 1:
        raise ValueError(f"--grad-accum: must be >= 1, got {grad_accum}")
    if compute_s is not None and not (math.isfinite(compute_s) and compute_s > 0):
        raise ValueError(f"--compute-s: must be > 0 and finite, got {compute_s}")
    traffic = ring_traffic_bytes(params, bytes_per_param, ranks)
    rows = []
    for name, gbit_s in links:
        if not (math.isfinite(gbit_s) and gbit_s > 0):
            raise ValueError(f"--link: {name} rate must be > 0 Gbit/s and finite, got {gbit_s}")
        seconds = traffic / (gbit_s * 1e9 / 8.0 * efficiency)
        ratio = seconds / (grad_accum * compute_s) if compute_s else None
        rows.append(LinkCost(name, gbit_s, traffic, seconds, ratio))
    return rows


def parse_link(text: str) -> tuple[str, float]:
    """``"25GbE=25"`` -> ("25GbE", 25.0)."""
    name, sep, rate = text.rpartition("=")
    try:
        value = float(rate)
    except ValueError:
        value = -1.0
    if not sep or not name or not (math.isfinite(value) and value > 0):  # nan, inf: no line rate
        raise ValueError(f"--link: expected NAME=GBIT_S like 25GbE=25 (a rate > 0, finite), got {text!r}")
    return name, value
