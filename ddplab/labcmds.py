"""`ddplab netlab up|status|down|run`: the emulated home lab (realrun/netlab.py)."""

import os
import shutil
import sys

from ddplab.progress import say
from ddplab.runcmds import print_train_summary
from realrun import netlab
from realrun.cli import PARSERS, check_args
from realrun.netlab_run import Discovery, run_in_lab
from realrun.runfolder import claim


def _require_root() -> None:
    if os.geteuid() != 0:
        raise ValueError("netlab: needs root for network namespaces and tc (run it with sudo)")
    for tool in ("ip", "tc", "taskset"):
        if shutil.which(tool) is None:
            raise ValueError(f"netlab: `{tool}` not found (install iproute2 and util-linux)")


def _host_rates(items: list[str]) -> dict[int, str]:
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
        host_rates=_host_rates(args.host_rate),
        decoys=tuple(args.decoy or ()),
        resolve_to=args.resolve_to,
    )


def _describe(lab: netlab.Lab) -> list[str]:
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


def up(args):
    _require_root()
    spec = spec_from_args(args)
    lab = _already_up(spec)
    if lab is None:
        try:
            lab = netlab.up(spec)
        except netlab.NetlabError as e:  # a command the lab needed failed: one line, not a traceback
            raise ValueError(f"netlab up: {e}") from None
    if not args.json:
        print("\n".join(_describe(lab)))
        print(
            f"  run inside a host: ip netns exec {lab.spec.ns(0)} <command>;"
            f" remove: ddplab netlab down --name {lab.spec.name}"
        )
    return lab.state()


def _already_up(spec: netlab.LabSpec) -> netlab.Lab | None:
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
    say(f"netlab {spec.name} is already up as asked; nothing changed")
    return lab


def status(args):
    labs = netlab.status()
    if not args.json:
        if not labs:
            print("no netlab is up")
        for lab in labs:
            if lab["name"] is None:
                print(f"leftover namespaces (remove with `ddplab netlab down`): {', '.join(lab['orphans'])}")
                continue
            print(f"netlab {lab['name']}:" + ("" if lab["netem"] else " (rate shaping only)"))
            for h in lab["hosts"]:
                print(
                    f"  host{h['host']} {h['ns']} {h['address']} {'up' if h['up'] else 'MISSING'}"
                    f" {h['rate']}: {h['qdisc']}"
                )
    return labs


def down(args):
    _require_root()
    removed = netlab.down(args.name)
    if not args.json:
        print(f"removed {len(removed)} namespaces" + (f": {', '.join(removed)}" if removed else ""))
    return removed


def run_cmd(args):
    """Bring a lab up (unless --name names one that is up), run the verb on every host,
    take the lab down again on any exit, Ctrl-C included."""
    _require_root()
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
    try:
        code, diagnosis, hosts = _run_in_lab(args, verb, verb_args, folder)
    finally:
        folder.release()
    for line in diagnosis:
        print(f"ddplab netlab run: {line}", file=sys.stderr)
    if code not in (0, 130):  # torchrun's own output (its tracebacks) is kept, not echoed
        print(
            f"ddplab netlab run: exit code {code}; each host's whole output: {parsed.out}/netlab/host*.log",
            file=sys.stderr,
        )
    if verb == "train" and list(parsed.out.glob("train-rank*.jsonl")):
        print_train_summary(parsed.out, code)
    if code == 0:
        print(f"records of all {hosts} hosts in {parsed.out}/ (host logs in {parsed.out}/netlab/)")
    return code


def _run_in_lab(args, verb: str, verb_args: list[str], folder) -> tuple[int, list[str], int]:
    def show(lab) -> None:
        print("\n".join(_describe(lab)), flush=True)
        if folder.moved_to:
            print(f"netlab run: moved the earlier run in {folder.path}/ to {folder.moved_to}/", flush=True)

    d = Discovery(gloo_ifname=not args.no_ifname, local_addr=not args.no_local_addr, is_host=not args.no_is_host)
    code, diagnosis, lab = run_in_lab(
        spec_from_args(args),
        verb,
        verb_args,
        folder,
        keep=args.keep,
        on_lab=show,
        discovery=d,
        start_timeout_s=args.start_timeout_s,
        timeout_s=args.timeout_s,
    )
    return code, diagnosis, lab.spec.hosts
