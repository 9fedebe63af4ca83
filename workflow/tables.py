"""The table commands' numbers: what `ddplab cost`, `collective` and `scenarios` print, as
rows a notebook can use (each a dict, as their ``--json`` prints it).

    params, rows = link_costs_per_step("124M", ranks=8)  # ring allreduce per step, per link
    found = collective_rows("allreduce", "1M:1G", "h100-1024")
    found.rows[0]["busbw_gb_s"]
"""

from typing import NamedTuple

from calibrate.record import against, published_collectives
from scenarios import load_models, scenario_names
from sim.collectives import PER_RANK_OPS, algbw_busbw_gb_s, candidates, collective_cost
from sim.cost import SEED_LINKS, link_costs, parse_link
from sim.patches import flag_patches, parse_sets
from sim.precision import PRECISIONS, precision_dtypes
from sim.scenario_file import BASE_HINT, resolve, scenario_data
from sim.scenario_keys import scenario_keys
from sim.units import parse_count, parse_sizes
from sim.workload import fabric_for

__all__ = ["BASE_HINT", "collective_rows", "link_costs_per_step", "model_rows", "scenario_keys", "scenario_list"]


def link_costs_per_step(
    params,
    *,
    links=None,
    precision: str = "fp32",
    bytes_per_param: float | None = None,
    ranks: int = 8,
    efficiency: float = 0.8,
    compute_s: float | None = None,
    grad_accum: int = 1,
) -> tuple[float, list[dict]]:
    """(the parameter count, one row per link): a ring allreduce of the gradients per step
    (sim/cost.py), over ``links`` ("NAME=GBIT" texts; default: the seed links). The gradients
    are the parameters' dtype unless ``bytes_per_param`` says otherwise (sim/precision.py)."""
    params = parse_count(str(params), "--params")
    links = [parse_link(x) for x in links] if links else SEED_LINKS
    # The gradients DDP reduces are the parameters' dtype: fp32 under autocast (sim/precision.py).
    if precision not in PRECISIONS:
        raise ValueError(f"--precision: must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    grad_bytes = precision_dtypes(precision).grad_bytes
    given = bytes_per_param is not None
    bytes_per_param = bytes_per_param if given else grad_bytes
    rows = link_costs(
        params=params,
        bytes_per_param=bytes_per_param,
        ranks=ranks,
        efficiency=efficiency,
        links=links,
        compute_s=compute_s,
        grad_accum=grad_accum,
    )
    out = []
    for r in rows:
        row = {
            "link": r.link,
            "link_gbit_s": r.link_gbit_s,
            "precision": None if given else precision,
            "bytes_per_param": bytes_per_param,
            "traffic_bytes": r.traffic_bytes,
            "seconds_per_step": r.seconds_per_step,
        }
        if r.comm_compute_ratio is not None:
            row["comm_compute_ratio"] = r.comm_compute_ratio
        out.append(row)
    return params, out


class Collectives(NamedTuple):
    scenario: object  # the Scenario (sim/config.py) whose network is timed
    ranks: int
    nodes: int
    rows: list[dict]  # what `ddplab collective --json` prints: one per size


def collective_rows(op: str, sizes: str, scenario: str, sets=(), ranks: int | None = None) -> Collectives:
    """``op`` at each of ``sizes`` ("1M:1G" or a list) on the scenario's network, timed as the
    simulator times it (sim/collectives.py), with nccl-tests' algbw and busbw; under NCCL/RCCL
    each row says why: the library's estimate for its pick and the runners-up; where a published
    run of this command printed a size, the row carries it as ``published``."""
    sizes = parse_sizes(sizes)
    patches = parse_sets(sets)
    for key in (p.key for p in patches):  # what times a collective: network and ranks (sim/collectives.py)
        if key.partition(".")[0] not in ("network", "ranks"):
            raise ValueError(
                f"--set {key}: a collective is timed from network keys and ranks alone; it changes nothing"
            )
    sc = resolve(scenario, patches, flag_patches(ranks=ranks)).scenario
    fabric = fabric_for(sc)
    if fabric.ranks < 2:
        raise ValueError(f"--ranks: a collective needs 2 or more ranks, got {fabric.ranks}")
    rows = []
    for size in sizes:
        c = collective_cost(op, size, fabric)
        algbw, busbw = algbw_busbw_gb_s(op, size, c.time_s, fabric.ranks)
        row = {
            "op": op,
            "size_bytes": size,
            # nccl-tests' count: elements per rank's buffer piece (allgather's send, reduce-scatter's
            # receive, all-to-all's per peer), the whole buffer's for allreduce and broadcast.
            "count": size // 4 // (fabric.ranks if op in PER_RANK_OPS else 1),
            "type": "float",
            "ranks": fabric.ranks,
            "algorithm": c.algorithm,
            "time_us": c.time_s * 1e6,
            "algbw_gb_s": algbw,
            "busbw_gb_s": busbw,
        }
        if c.chosen is not None:  # NCCL/RCCL: what the library estimated, and the runner-up
            ranked = sorted(candidates(op, size, fabric), key=lambda o: o.tuner_us)
            row["why"] = {
                "library_estimate_us": c.chosen.tuner_us,
                "next": [{"algorithm": o.algorithm, "library_estimate_us": o.tuner_us} for o in ranked[1:3]],
                "latency_us": c.chosen.latency_us,
                "network_steps": c.chosen.network_steps,
                "bytes_us": c.chosen.time_us - c.chosen.latency_us,
            }
        rows.append(row)
    # The published runs of this very command, where the public record has one (calibrate/record.py).
    published = published_collectives(scenario, fabric.ranks, op, sets)
    for row in rows:
        if row["size_bytes"] in published:
            row["published"] = [against(p, row["time_us"], row["busbw_gb_s"]) for p in published[row["size_bytes"]]]
    return Collectives(sc, fabric.ranks, fabric.nodes, rows)


def scenario_list() -> list[dict]:
    """Every scenario preset: name, description, ranks (`ddplab scenarios`)."""
    out = []
    for name in scenario_names():
        data = scenario_data(name)
        out.append({"name": name, "description": data.get("description", ""), "ranks": data.get("ranks")})
    return out


def model_rows() -> list[dict]:
    """Each model preset (scenarios/models.toml) with its parameter count, built on the meta
    device, and its gradient bytes in fp32 and bf16."""
    from realrun.model import build  # torch: only for this table

    out = []
    for name, shape in load_models().items():
        module = build(name, device="meta")  # shapes only, no memory
        params = sum(p.numel() for p in module.parameters())
        out.append(
            {
                "model": name,
                **shape,
                "params": params,
                "grad_bytes_fp32": 4 * params,
                "grad_bytes_bf16": 2 * params,
            }
        )
    return out
