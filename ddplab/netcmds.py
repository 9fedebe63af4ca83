"""`ddplab doctor` and `ddplab launch`: the seed's section 2.2 on real machines.

Like commands.py, each returns what `--json` prints and otherwise prints for people.
"""

from output.atomic import write_atomic
from output.ownfiles import check_target
from realrun import doctor as doc
from realrun import launch_node, nodes


def doctor(args):
    d = doc.run(args)
    if not args.json:
        print("\n".join(doc.format_report(d)))
    # A script (or a launch wrapper) can then stop before a job that would hang at init.
    args.exit_code = 1 if d["problems"] else 0
    return d


def launch(args):
    host, port = nodes.parse_endpoint(args.master)
    nodes.check_counts(args.nodes, args.nproc_per_node)
    verb_args = nodes.check_verb_args(args.verb_args)
    if args.slurm:  # a new file or ddplab's own script, in a folder that exists (output/ownfiles.py)
        check_target(args.slurm, "--slurm")
    if args.exec:
        args.returns_code = True  # main() returns this instead of printing JSON
        return launch_node.run_this_node(args, host, port, verb_args)
    # When this machine is the master, the doctor fills node 0's interface for real.
    here = launch_node.this_node(args, host, port)
    ifaces = {}
    if here["master"]["local"] and not here["master"]["loopback"] and here["node"]["interface"]:
        ifaces[0] = here["node"]["interface"]
    commands = nodes.launch_commands(args.nodes, host, port, args.nproc_per_node, args.iface, verb_args, ifaces=ifaces)
    out = {"commands": commands, "slurm": None}
    if args.slurm:
        script = nodes.slurm_script(
            args.nodes, args.nproc_per_node, port, args.iface, verb_args, args.job_name, args.time
        )
        write_atomic(args.slurm, lambda tmp: (tmp.write_text(script), tmp.chmod(0o755)))
        out["slurm"] = str(args.slurm)
    if args.json:
        return out
    print("\n".join(nodes.launch_text(args.nodes, args.master, host, args.iface, commands, args.slurm)))
    return out
