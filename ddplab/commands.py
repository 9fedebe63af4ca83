"""The table commands: `ddplab cost`, `collective`, `scenarios` and `models`. Each returns what
`--json` prints (workflow/tables.py); without `--json` it prints a table for people instead."""

from output.terminal import show
from workflow import render_tables, tables


def cost(args):
    args.params, out = tables.link_costs_per_step(
        args.params, links=args.link, precision=args.precision, bytes_per_param=args.bytes_per_param,
        ranks=args.ranks, efficiency=args.efficiency, compute_s=args.compute_s, grad_accum=args.grad_accum,
    )  # fmt: skip
    if args.json:
        return out
    show(render_tables.cost_lines(
        out, params=args.params, precision=args.precision, bytes_per_param=args.bytes_per_param, ranks=args.ranks,
        efficiency=args.efficiency, grad_accum=args.grad_accum, compute_s=args.compute_s,
    ))  # fmt: skip
    return out


def collective(args):
    found = tables.collective_rows(args.op, args.sizes, args.scenario, args.set, args.ranks)
    if args.json:
        return found.rows
    show(render_tables.collective_lines(args.op, found))
    return found.rows


def scenarios(args):
    """The presets; with --keys every key a scenario file may set, from sim/config.py."""
    out = tables.scenario_keys() if args.keys else tables.scenario_list()
    if not args.json:
        show(render_tables.scenario_key_lines(out) if args.keys else render_tables.scenario_lines(out))
    return out


def models(args):
    out = tables.model_rows()
    if not args.json:
        show(render_tables.model_lines(out))
    return out
