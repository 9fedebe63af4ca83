"""`ddplab netlab up|status|down|run`: the emulated home lab (realrun/netlab_verbs.py)."""

import sys

from realrun import netlab
from realrun import netlab_verbs as verbs
from realrun.cli import PARSERS, check_args
from realrun.local import print_train_summary
from realrun.runfolder import claim


def up(args):
    verbs.require_root()
    spec = verbs.spec_from_args(args)
    lab = verbs.already_up(spec)
    if lab is None:
        try:
            lab = netlab.up(spec)
        except netlab.NetlabError as e:  # a command the lab needed failed: one line, not a traceback
            raise ValueError(f"netlab up: {e}") from None
    if not args.json:
        print("\n".join(verbs.describe(lab)))
        print(
            f"  run inside a host: ip netns exec {lab.spec.ns(0)} <command>;"
            f" remove: ddplab netlab down --name {lab.spec.name}"
        )
    return lab.state()


def status(args):
    labs = netlab.status()
    if not args.json:
        print("\n".join(verbs.status_lines(labs)))
    return labs


def down(args):
    verbs.require_root()
    removed = netlab.down(args.name)
    if not args.json:
        print(f"removed {len(removed)} namespaces" + (f": {', '.join(removed)}" if removed else ""))
    return removed


def run_cmd(args):
    """Bring a lab up (unless --name names one that is up), run the verb on every host,
    take the lab down again on any exit, Ctrl-C included."""
    verbs.require_root()
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
        code, diagnosis, hosts = verbs.run_in_lab(args, verb, verb_args, folder)
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
