"""``python -m realrun.torchrun_loopback TORCHRUN_ARGS``: torchrun whose stores listen on loopback
only, for runs whose every rank is on this machine (``ddplab probe/train --nproc N``,
realrun/launch.py).

torchrun's agent hosts two TCPStores, the rendezvous's and the one the ranks meet at; anyone
who reaches them can read and write the run's keys (they ask no password). c10d's TCPStore
binds its server to every interface whatever host it is given (torch 2.13: ``::``), and
torchrun has no option to change that; it takes an already listening socket, though
(``master_listen_fd``). So every TCPStore server this process starts gets a socket bound to
127.0.0.1, and the launcher names 127.0.0.1 as the rendezvous endpoint and the node's address,
so the ranks connect there. Nothing else of torchrun changes.
"""

import socket
import sys

import torch.distributed as dist

LOOPBACK = "127.0.0.1"
_TCPStore = dist.TCPStore


class LoopbackTCPStore(_TCPStore):
    """A TCPStore whose server, when this process hosts one, listens on 127.0.0.1 alone."""

    def __init__(self, host_name, port, world_size=None, is_master=False, *args, **kw):
        if is_master and not args and kw.get("master_listen_fd") is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((LOOPBACK, port))
            sock.listen(socket.SOMAXCONN)
            port = sock.getsockname()[1]
            kw["master_listen_fd"] = sock.detach()  # the store's from now on
        super().__init__(host_name, port, world_size, is_master, *args, **kw)


def install() -> None:
    """Put LoopbackTCPStore wherever torch.distributed's modules already named TCPStore; the
    modules torchrun imports next take it from torch.distributed."""
    for name, module in list(sys.modules.items()):
        if name.startswith("torch.distributed") and getattr(module, "TCPStore", None) is _TCPStore:
            module.TCPStore = LoopbackTCPStore


if __name__ == "__main__":
    install()
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    main()
