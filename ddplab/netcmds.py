"""`ddplab doctor` and `ddplab launch`: the seed's section 2.2 on real machines (realrun/doctor.py,
realrun/launch_node.py, workflow/launch.py). Each returns what `--json` prints and otherwise
prints for people."""

from realrun import doctor as doc
from realrun import launch_node
from workflow.launch import launch_commands, launch_lines


def doctor(args):
    d = doc.run(args)
    if not args.json:
        print("\n".join(doc.format_report(d)))
    # A script (or a launch wrapper) can then stop before a job that would hang at init.
    args.exit_code = 1 if d["problems"] else 0
    return d


def launch(args):
    if args.exec:
        args.returns_code = True  # main() returns this instead of printing JSON
        return launch_node.run_this_node(args)
    out = launch_commands(
        args.master, nodes_n=args.nodes, nproc_per_node=args.nproc_per_node, iface=args.iface,
        verb_args=args.verb_args, slurm=args.slurm, job_name=args.job_name, time=args.time,
    )  # fmt: skip
    if not args.json:
        print("\n".join(launch_lines(out, master=args.master, nodes_n=args.nodes, iface=args.iface)))
    return out
