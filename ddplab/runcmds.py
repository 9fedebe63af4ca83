"""`ddplab probe` and `ddplab train` on this machine (realrun/local.py)."""

from realrun.local import launch_local, print_train_summary


def probe(args):
    return launch_local("probe", args)


def train(args):
    code = launch_local("train", args)
    if code != 130:  # Ctrl-C: the one line launch_local printed is the whole answer
        print_train_summary(args.out, code)
    return code
