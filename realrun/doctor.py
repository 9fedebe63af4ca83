"""doctor: what this machine's network looks like to torchrun, gloo and NCCL.

``python -m realrun.doctor --master ADDR:PORT [--json]`` (or ``ddplab doctor``) runs
on one real machine, or inside a netlab host with ``ip netns exec``, and answers the
seed's section 2.2 questions before anything hangs: which interface leads to the
rendezvous host, which one gloo and NCCL would pick by their own rules, whether they
agree, what the hostname resolves to, whether the port answers, and the exact
variables and torchrun line for this node. stdlib only; reads ``ip -j`` and /sys.
Run it from the repository root, or with PYTHONPATH naming it.

The facts come from realrun/hostfacts.py, the rules that judge them (gloo's, NCCL's
and torchrun's own, from their sources) from realrun/netrules.py and
realrun/findings.py; this module runs both and prints the result.

JSON (``diagnose``'s dict; ``schema`` is bumped on any incompatible change):

    schema          "ddplab-doctor/1"
    master          {host, port, address (IPv4, else IPv6, or null), local (bool: an address of
                     this machine), loopback (bool), interface (owner when local), error}
    interfaces      [{name, index, kind, info_kind, state, mtu, speed_mbit_s (null when
                     /sys cannot say), addresses [{address, prefixlen, family}]}]
                    kind: loopback | bridge/docker | veth | wireless | tunnel/VPN |
                          InfiniBand | ethernet | other
    route           {dev, src, gateway, type, error}: `ip route get <master address>`
    node            {interface, address}: what this node talks to the others on (the
                     routed interface; the owner of the master address when it is local)
    gloo, nccl      {env (the variable's value or null), rule (words), interfaces [names],
                     interface (first, or null), address, routed (bool: equals
                     node.interface), ok (bool), problem (words or null), fix (or null)}
    hostname        {name, addresses [{address, local, interface}], loopback (bool),
                     warning (words or null)}
    port            {status: open | refused | timeout | unreachable | unresolved | error,
                     detail (words), errno}
    rendezvous      {is_host (bool: master is local), torchrun_detects_host (bool),
                     problem (words or null), warning (words or null: the store, which has
                     no authentication, would answer on a public address), note (words or
                     null: a loopback master with nnodes > 1 keeps every node on this machine)}
    settings        {env {NAME: value}, env_line, torchrun (shell line), torchrun_argv,
                     nnodes, nproc_per_node, verb_args}
    problems        [words]: every problem above, in order
"""

import argparse
import json
import sys

from realrun import findings, hostfacts, nodes
from realrun.cli import Parser

SCHEMA = "ddplab-doctor/1"
# Linux gives up a TCP connect after ~127 s of SYN retries (net.ipv4.tcp_syn_retries = 6): a
# longer timeout only makes a typo wait.
MAX_TIMEOUT_S = 300.0


def diagnose(
    master_host: str,
    port: int,
    *,
    connect_timeout_s: float = 3.0,
    nnodes: int = 2,
    nproc_per_node: int = 1,
    verb_args: list[str] | None = None,
    env=None,
) -> dict:
    """Everything in the module docstring, for this machine (or network namespace)."""
    if not 1 <= port <= 65535:
        raise ValueError(f"--master: port must be in 1..65535, got {port}")
    nodes.check_counts(nnodes, nproc_per_node, flag_nodes="--nnodes")
    args = nodes.check_verb_args(verb_args or [])
    facts = hostfacts.gather(master_host, port, connect_timeout_s, env)
    verdict = findings.from_facts(facts, nnodes=nnodes, nproc_per_node=nproc_per_node, verb_args=args)
    return {"schema": SCHEMA, **verdict}


def format_report(d: dict) -> list[str]:
    m, r, n = d["master"], d["route"], d["node"]
    where = f", on this machine ({m['interface']})" if m["local"] else ""
    out = [
        f"master {nodes.endpoint(m['host'], m['port'])}: address {m['address'] or 'unresolved'}{where}",
        "",
    ]
    out.append(f"{'interface':<12} {'kind':<14} {'state':<8} {'MTU':>6} {'Mbit/s':>7}  addresses")
    for i in d["interfaces"]:
        addrs = ", ".join(f"{a['address']}/{a['prefixlen']}" for a in i["addresses"]) or "-"
        kind = i["kind"] if i["kind"] != "other" else f"other ({i['info_kind'] or '?'})"
        speed = str(i["speed_mbit_s"]) if i["speed_mbit_s"] else "-"
        out.append(f"{i['name']:<12} {kind:<14} {i['state'] or '?':<8} {i['mtu'] or '-':>6} {speed:>7}  {addrs}")
    out.append("")
    if r["dev"] or r["src"]:
        via = f" via {r['gateway']}" if r["gateway"] else ""
        kind = f" ({r['type']})" if r["type"] else ""  # None without iproute2
        out.append(f"route to {m['address']}: dev {r['dev'] or '?'}, src {r['src']}{via}{kind}")
    elif m["address"]:
        out.append(f"route to {m['address']}: none ({r['error']})")
    role = " (the rendezvous host)" if m["local"] else ""
    out.append(f"this node talks on: {n['interface'] or '?'}, address {n['address'] or '?'}{role}")
    for lib in ("gloo", "nccl"):
        p = d[lib]
        verdict = "OK" if p["ok"] and p["routed"] else "OK (one machine)" if p["ok"] else "PROBLEM"
        extra = f" (all: {', '.join(p['interfaces'])})" if len(p["interfaces"]) > 1 else ""
        out.append(f"{lib}: {p['interface'] or 'none'} {p['address'] or ''}{extra}  [{verdict}]")
        out.append(f"  rule: {p['rule']}")
        if p["problem"]:
            out.append(f"  {p['problem']}")
        if p["fix"]:
            out.append(f"  fix: {p['fix']}")
    h = d["hostname"]
    resolved = ", ".join(f"{a['address']} ({a['interface'] or 'not local'})" for a in h["addresses"]) or "nothing"
    out.append(f"hostname {h['name']}: resolves to {resolved}")
    if h["warning"]:
        out.append(f"  warning: {h['warning']}")
    rz = d["rendezvous"]
    out.append(
        f"rendezvous: this node hosts the store: {'yes' if rz['is_host'] else 'no'}; "
        f"torchrun would guess {'yes' if rz['torchrun_detects_host'] else 'no'}"
    )
    if rz["problem"]:
        out.append(f"  {rz['problem']}")
    if rz["warning"]:
        out.append(f"  warning: {rz['warning']}")
    if rz["note"]:
        out.append(f"  note: {rz['note']}")
    out.append(f"port {m['port']}: {d['port']['detail']}")
    s = d["settings"]
    out += ["", f"This node ({s['nnodes']} nodes x {s['nproc_per_node']} processes):"]
    if s["env"]:
        out += [f"  export {k}={v}" for k, v in s["env"].items()]
    out.append(f"  {nodes.shell_line({}, s['torchrun_argv'])}")
    out.append("  (NCCL_DEBUG=INFO shows the interface NCCL really chose)")
    out += ["", "problems: none" if not d["problems"] else f"problems ({len(d['problems'])}):"]
    out += [f"  - {p}" for p in d["problems"]]
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", required=True, metavar="ADDR:PORT", help="the rendezvous endpoint")
    p.add_argument("--nnodes", type=int, default=2, help="machines in the job (default 2)")
    p.add_argument("--nproc-per-node", type=int, default=1, help="processes per machine (default 1)")
    p.add_argument("--timeout-s", type=float, default=3.0, help="TCP connect timeout for the port check")
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON: interfaces, route, gloo, nccl, port, rendezvous, settings, problems, ...",
    )


def run(args) -> dict:
    host, port = nodes.parse_endpoint(args.master)
    if not 0 < args.timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"--timeout-s: must be in (0, {MAX_TIMEOUT_S:g}] seconds, got {args.timeout_s}")
    return diagnose(
        host, port, connect_timeout_s=args.timeout_s, nnodes=args.nnodes, nproc_per_node=args.nproc_per_node
    )


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m realrun.doctor", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        d = run(args)
    except ValueError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(d, indent=2, allow_nan=False) if args.json else "\n".join(format_report(d)))
    return 1 if d["problems"] else 0  # as `ddplab doctor`


if __name__ == "__main__":
    sys.exit(main())
