"""What `ddplab netlab up|status|down|run` do with the emulated home lab (realrun/netlab.py):
the lab from the flags, described; one that is up as asked reused; a verb run on every host
(realrun/netlab_run.py) with the lab taken down again on any exit."""

import argparse
import os
import shutil
import sys

from realrun import netlab, netlab_run
from realrun.cli import PARSERS, check_args
from realrun.local import print_train_summary
from realrun.netlab_run import Discovery
from realrun.report import whole_despite, whole_line
from realrun.runfolder import claim


def require_root() -> None:
    if os.geteuid() != 0:
        raise ValueError("netlab: needs root for network namespaces and tc (run it with sudo)")
    for tool in ("ip", "tc", "taskset"):
        if shutil.which(tool) is None:
            raise ValueError(f"netlab: `{tool}` not found (install iproute2 and util-linux)")


def host_rates(items: list[str]) -> dict[int, str]:
    out = {}
    for item in items or []:
        host, sep, rate = item.partition("=")
        if not sep or not host.isdigit():
            raise ValueError(f"--host-rate: expected HOST=RATE like 1=300mbit, got {item!r}")
        out[int(host)] = rate
    return out


def spec_from_args(args) -> netlab.LabSpec:
    return netlab.LabSpec(
        name=args.name,
        hosts=args.hosts,
        rate=args.rate,
        delay=args.delay,
        jitter=args.jitter,
        loss_pct=args.loss,
        host_rates=host_rates(args.host_rate),
        decoys=tuple(args.decoy or ()),
        resolve_to=args.resolve_to,
    )


def describe(lab: netlab.Lab) -> list[str]:
    s = lab.spec
    lines = [
        f"netlab {s.name}: {s.hosts} hosts on a bridge, {s.rate} links"
        + (f", delay {s.delay} jitter {s.jitter} loss {s.loss_pct}%" if s.needs_netem() else "")
    ]
    for i in range(s.hosts):
        extra = f" rate {s.host_rate(i)}" if i in s.host_rates else ""
        decoys = f" decoys {','.join(s.decoys)}" if s.decoys else ""
        lines.append(f"  host{i}: netns {s.ns(i)}, eth0 {s.address(i)}/24{extra}{decoys}")
    lines += [f"  note: {n}" for n in lab.notes]
    return lines


def already_up(spec: netlab.LabSpec) -> netlab.Lab | None:
    """`netlab up` twice is idempotent (issue 25, D13; it was a NetlabError traceback): the same
    lab already up is reported as it is; one of that name with other settings is refused,
    since changing a live lab under a running job would change what it measures."""
    if spec.switch_ns not in netlab.our_namespaces(spec.name):
        return None
    try:
        lab = netlab.load(spec.name)
    except ValueError:  # namespaces without a state file: a lab whose `up` was killed halfway
        raise ValueError(
            f"--name {spec.name}: the namespaces of a lab of that name are up but it has no state;"
            f" remove them with `ddplab netlab down --name {spec.name}`"
        ) from None
    if lab.spec != spec:
        raise ValueError(
            f"--name {spec.name}: a lab of that name is already up with other settings (rate {lab.spec.rate},"
            f" {lab.spec.hosts} hosts); `ddplab netlab down --name {spec.name}` first, or pick another --name"
        )
    print(f"netlab {spec.name} is already up as asked; nothing changed", file=sys.stderr, flush=True)
    return lab


def status_lines(labs: list[dict]) -> list[str]:
    """netlab.status() as `ddplab netlab status` prints it."""
    if not labs:
        return ["no netlab is up"]
    out = []
    for lab in labs:
        if lab["name"] is None:
            out.append(f"leftover namespaces (remove with `ddplab netlab down`): {', '.join(lab['orphans'])}")
            continue
        out.append(f"netlab {lab['name']}:" + ("" if lab["netem"] else " (rate shaping only)"))
        for h in lab["hosts"]:
            out.append(
                f"  host{h['host']} {h['ns']} {h['address']} {'up' if h['up'] else 'MISSING'} {h['rate']}: {h['qdisc']}"
            )
    return out


def up(args) -> dict:
    """`ddplab netlab up`: the lab as asked (one already up as asked is reused), described."""
    require_root()
    spec = spec_from_args(args)
    lab = already_up(spec)
    if lab is None:
        try:
            lab = netlab.up(spec)
        except netlab.NetlabError as e:  # a command the lab needed failed: one line, not a traceback
            raise ValueError(f"netlab up: {e}") from None
    if not args.json:
        print("\n".join(describe(lab)))
        print(
            f"  run inside a host: ip netns exec {lab.spec.ns(0)} <command>;"
            f" remove: ddplab netlab down --name {lab.spec.name}"
        )
    return lab.state()


def status(args) -> list[dict]:
    labs = netlab.status()
    if not args.json:
        print("\n".join(status_lines(labs)))
    return labs


def down(args) -> list[str]:
    require_root()
    removed = netlab.down(args.name)
    if not args.json:
        print(f"removed {len(removed)} namespaces" + (f": {', '.join(removed)}" if removed else ""))
    return removed


def run(args) -> int:
    """`ddplab netlab run -- VERB ...`: bring a lab up (unless --name names one that is up), run
    the verb on every host with the flags' discovery (realrun/netlab_run.py), the lab described
    before the run starts and taken down again on any exit, Ctrl-C included. The exit code."""
    require_root()
    if args.verb[:1] == ["--"]:
        args.verb = args.verb[1:]
    if not args.verb or args.verb[0] not in PARSERS:
        raise ValueError(
            f"netlab run: after `--` give a verb ({', '.join(PARSERS)}) and its options, got {args.verb!r}"
        )
    verb, verb_args = args.verb[0], args.verb[1:]
    parsed = PARSERS[verb](f"ddplab netlab run -- {verb}").parse_args(verb_args)
    check_args(verb, parsed)
    folder = claim(parsed.out, force=parsed.force)

    def show(lab: netlab.Lab) -> None:
        print("\n".join(describe(lab)), flush=True)
        if folder.moved_to:
            print(f"netlab run: moved the earlier run in {folder.path}/ to {folder.moved_to}/", flush=True)

    d = Discovery(gloo_ifname=not args.no_ifname, local_addr=not args.no_local_addr, is_host=not args.no_is_host)
    try:
        code, diagnosis, lab = netlab_run.run_in_lab(
            spec_from_args(args), verb, verb_args, folder, keep=args.keep, on_lab=show, discovery=d,
            start_timeout_s=args.start_timeout_s, timeout_s=args.timeout_s,
        )  # fmt: skip
    finally:
        folder.release()
    if whole_despite(parsed.out, verb, code):  # a teardown abort after complete records (realrun/report.py)
        print(f"ddplab netlab run: {whole_line(code, f'{parsed.out}/netlab/host*.log')}", file=sys.stderr)
        code, diagnosis = 0, []
    for line in diagnosis:
        print(f"ddplab netlab run: {line}", file=sys.stderr)
    if code not in (0, 130):  # torchrun's own output (its tracebacks) is kept, not echoed
        print(f"ddplab netlab run: exit code {code}; each host's whole output: {parsed.out}/netlab/host*.log",
              file=sys.stderr)  # fmt: skip
    if verb == "train" and list(parsed.out.glob("train-rank*.jsonl")):
        print_train_summary(parsed.out, code)
    if code == 0:
        print(f"records of all {lab.spec.hosts} hosts in {parsed.out}/ (host logs in {parsed.out}/netlab/)")
    return code


def add_lab_arguments(p: argparse.ArgumentParser) -> None:
    """The lab's flags, on `ddplab netlab up` and `run`."""
    p.add_argument("--name", default="lab", help="lab id (namespaces ddplab-NAME-h0...)")
    p.add_argument("--hosts", type=int, default=2, help="hosts (namespaces) in the lab")
    p.add_argument("--rate", default="1gbit", help="link rate, tc syntax: 200mbit, 1gbit, 10gbit")
    p.add_argument("--delay", default="0ms", help="one-way delay per end (netem)")
    p.add_argument("--jitter", default="0ms", help="delay jitter per end (netem)")
    p.add_argument("--loss", type=float, default=0.0, help="loss, percent")
    p.add_argument("--host-rate", action="append", metavar="HOST=RATE", help="e.g. 1=300mbit (the Mac on Wi-Fi)")
    p.add_argument("--decoy", action="append", choices=["docker0", "tun0"], help="decoy interface in every host")
    p.add_argument(
        "--resolve-to", default="eth0", choices=["eth0", "docker0", "outside"], help="what the hostname resolves to"
    )


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """`ddplab netlab run`'s own flags: the run's timeouts and the discovery fixes."""
    run.add_argument("--timeout-s", type=float, default=1800.0, help="the whole run")
    run.add_argument("--start-timeout-s", type=float, default=60.0, help="discovery: until the first rank starts")
    run.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    # The three fixes, each removable to reproduce the hang it prevents.
    run.add_argument("--no-ifname", action="store_true", help="do not set GLOO_SOCKET_IFNAME=eth0")
    run.add_argument("--no-local-addr", action="store_true", help="do not pass --local-addr")
    run.add_argument("--no-is-host", action="store_true", help="do not pass --rdzv-conf is_host")
    run.add_argument("verb", nargs=argparse.REMAINDER, help="-- VERB OPTIONS (train or probe)")


def add_parser(sub, parser_class) -> None:
    """`netlab up|status|down|run` on `ddplab`'s subcommands: each verb returns what its --json
    prints (run: the exit code), and prints for people without it."""
    lab = sub.add_parser("netlab", help="emulated home lab: hosts as network namespaces, tc-shaped links (root)")
    verbs = lab.add_subparsers(dest="netlab_command", required=True, parser_class=parser_class)
    for name, func, what in (
        ("up", up, "create the lab and leave it up"),
        ("status", status, "labs that are up, with their qdiscs"),
        ("down", down, "remove a lab (default: every ddplab lab, leftovers included)"),
    ):
        v = verbs.add_parser(name, help=what)
        if name == "up":
            add_lab_arguments(v)
        if name == "down":
            v.add_argument("--name", help="only this lab")
        v.add_argument("--json", action="store_true", help="print JSON")
        v.set_defaults(func=func)
    r = verbs.add_parser("run", help="torchrun on every host with c10d rendezvous: run -- train|probe ...")
    add_lab_arguments(r)
    add_run_arguments(r)
    r.set_defaults(func=run, json=False, returns_code=True)
