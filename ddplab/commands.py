"""The table commands: `ddplab cost`, `collective`, `scenarios` and `models`. Each returns what
`--json` prints (workflow/tables.py); without `--json` it prints a table for people instead."""

from ddplab.simcmds import network_line
from workflow import tables
from workflow.units import fmt_bytes, fmt_seconds


def cost(args):
    args.params, out = tables.link_costs_per_step(
        args.params, links=args.link, precision=args.precision, bytes_per_param=args.bytes_per_param,
        ranks=args.ranks, efficiency=args.efficiency, compute_s=args.compute_s, grad_accum=args.grad_accum,
    )  # fmt: skip
    if args.json:
        return out
    bytes_per_param = out[0]["bytes_per_param"]
    s = args.params * bytes_per_param
    why = "--bytes-per-param" if args.bytes_per_param is not None else f"{args.precision} gradients"
    print(
        f"Ring allreduce of {args.params:.4g} params x {bytes_per_param:g} B ({why}) = {s / 1e9:.2f} GB"
        f" over N={args.ranks}: 2(N-1)/N x S = {out[0]['traffic_bytes'] / 1e9:.2f} GB per rank per step,"
        f" at {args.efficiency:.0%} of line rate"
    )
    if args.grad_accum > 1:
        print(f"Gradient accumulation K={args.grad_accum}: one allreduce per {args.grad_accum} micro-steps")
    header = f"{'link':<12} {'Gbit/s':>8} {'allreduce/step':>15}"
    if args.compute_s:
        header += f" {'T_comm/T_compute':>17}"
    print(header)
    for r in out:
        line = f"{r['link']:<12} {r['link_gbit_s']:>8g} {fmt_seconds(r['seconds_per_step']):>15}"
        if "comm_compute_ratio" in r:
            k = r["comm_compute_ratio"]
            verdict = f"communication-bound x {k:.1f}" if k >= 1 else f"compute-bound ({k:.2f})"
            line += f" {k:>17.2f}  {verdict}"
        print(line)
    return out


def collective(args):
    found = tables.collective_rows(args.op, args.sizes, args.scenario, args.set, args.ranks)
    sc, rows = found.scenario, found.rows
    if args.json:
        return rows
    redop = "sum" if args.op in ("allreduce", "reduce_scatter") else "none"
    print(f"# ddplab collective: predicted {args.op} on {sc.name} ({network_line(sc)})")
    how = (
        f"{sc.network.tuner}'s choice replayed from its own estimate, then timed (sim/nccl.py)"
        if sc.network.backend == "nccl"
        else "gloo's ring"
    )
    print(f"# nranks {found.ranks}, nodes {found.nodes}; {how}")
    print("#")
    head = ("size", "count", "type", "redop", "algorithm", "time", "algbw", "busbw")
    units = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)")
    widths = (12, 12, 6, 6, 15, 10, 8, 8)
    print("# " + " ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    print("# " + " ".join(f"{u:>{w}}" for u, w in zip(units, widths, strict=True)))
    for r in rows:
        print(
            f"  {r['size_bytes']:>12} {r['count']:>12} {r['type']:>6} {redop:>6} {r['algorithm']:>15}"
            f" {r['time_us']:>10.1f} {r['algbw_gb_s']:>8.2f} {r['busbw_gb_s']:>8.2f}"
        )
    avg = sum(r["busbw_gb_s"] for r in rows) / len(rows)
    print(f"# Avg bus bandwidth    : {avg:.3f}")
    if rows and "why" in rows[0]:
        print("#")
        print(f"# why: {sc.network.tuner}'s estimate (us), its pick first; then our time = latency + bytes")
        for r in rows:
            w = r["why"]
            others = " < ".join(f"{n['algorithm']} {n['library_estimate_us']:.1f}" for n in w["next"])
            net = f", {w['network_steps']} network steps" if w["network_steps"] else ""
            print(
                f"#   {r['size_bytes']:>12}: {r['algorithm']} {w['library_estimate_us']:.1f}"
                f"{' < ' + others if others else ''}; {r['time_us']:.1f} = {w['latency_us']:.1f} latency{net}"
                f" + {w['bytes_us']:.1f} bytes"
            )
    return rows


def scenarios(args):
    if args.keys:
        return scenario_keys(args)
    out = tables.scenario_list()
    if not args.json:
        for row in out:
            print(f"{row['name']:<16} {row['ranks']:>5} ranks  {row['description']}")
    return out


def _toml_value(value) -> str:
    """A default as a TOML file would spell it; None (no TOML value) as "unset"."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return f'"{value}"' if isinstance(value, str) else repr(value)


def scenario_keys(args):
    """`ddplab scenarios --keys`: every key a scenario file may set, from sim/config.py."""
    out = tables.scenario_keys()
    if not args.json:
        width = max(len(r["key"]) for r in out) + 2
        print(f"# every scenario key (sim/config.py); * = a file without base must set it, or use {tables.BASE_HINT}")
        print(f"{'key':<{width}} {'unit':<8} {'default':<12} meaning")
        for r in out:
            key = r["key"] + (" *" if r["must_set_without_base"] else "")
            print(f"{key:<{width}} {r['unit'] or '-':<8} {_toml_value(r['default']):<12} {r['meaning']}")
    return out


def models(args):
    from realrun.model import build
    from scenarios import load_models

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
    if not args.json:
        cols = (
            ("model", 11, lambda r: r["model"]),
            ("layers", 6, lambda r: r["n_layer"]),
            ("d_model", 7, lambda r: r["n_embd"]),
            ("heads", 5, lambda r: r["n_head"]),
            ("context", 7, lambda r: r["block_size"]),
            ("params", 13, lambda r: f"{r['params']:,}"),
            ("grads fp32", 11, lambda r: fmt_bytes(r["grad_bytes_fp32"])),
            ("grads bf16", 11, lambda r: fmt_bytes(r["grad_bytes_bf16"])),
        )
        print(" ".join(f"{h:>{w}}" for h, w, _ in cols))
        for r in out:
            print(" ".join(f"{f(r):>{w}}" for _, w, f in cols))
    return out
