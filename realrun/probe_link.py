"""Raw TCP between rank pairs, iperf3-like, over the interface the process group uses.

The seed's step 4: compare the collective's bandwidth with the raw link rate
(`iperf3 -c <host>`); the gap is what the collective stack costs. Rank 0 listens
on the address of GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME (else MASTER_ADDR), each
other rank connects in turn, and rank 0 times both directions and the round trip,
so all link records are in rank 0's file.
"""

import fcntl
import os
import socket
import statistics
import struct
import sys
import time
from typing import NamedTuple

import torch.distributed as dist

from realrun.dist import DistEnv

CHUNK_BYTES = 1 << 20  # as iperf3's default TCP write of 128 KiB, but fewer Python calls
LINK_REPEATS = 3  # transfers per direction; the median is reported (a noisy host skews one)
RTT_PINGS, RTT_WARMUP, PING_BYTES = 200, 10, 8
SIOCGIFADDR = 0x8915  # Linux <linux/sockios.h>: get an interface's IPv4 address


class LinkResult(NamedTuple):
    peer: int
    to_peer_gbit_s: float  # rank 0 -> peer, median of LINK_REPEATS
    from_peer_gbit_s: float  # peer -> rank 0
    rtt_p50_us: float
    address: str  # where rank 0 listened


def _ipv4_of(ifname: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname[:15].encode()))
    return socket.inet_ntoa(packed[20:24])  # struct ifreq: 16-byte name, then sockaddr_in


def interface_address(backend: str) -> str | None:
    """The IPv4 address of the interface the process group was told to use, or None if
    it was not told. gloo takes a comma-separated list of exact names (the first is
    used here); NCCL a prefix, `=` for an exact name and `^` to exclude
    (docs/references.md "Interfaces, rendezvous and timeouts")."""
    var = "GLOO_SOCKET_IFNAME" if backend == "gloo" else "NCCL_SOCKET_IFNAME"
    spec = os.environ.get(var, "").split(",")[0].strip()
    if not spec or spec.startswith("^") or not sys.platform.startswith("linux"):
        return None  # the ioctl below is Linux's; elsewhere the route to rank 0 decides
    names = [name for _, name in socket.if_nameindex()]
    if spec.startswith("="):
        match = [spec[1:]] if spec[1:] in names else []
    else:
        match = [n for n in names if n == spec or (backend == "nccl" and n.startswith(spec))]
    if not match:
        raise ValueError(f"{var}={spec}: no such interface here (have {', '.join(names)})")
    return _ipv4_of(match[0])


def _recv_exact(sock: socket.socket, nbytes: int, buf: bytearray) -> None:
    view, got = memoryview(buf), 0
    while got < nbytes:
        n = sock.recv_into(view[: min(len(buf), nbytes - got)])
        if n == 0:
            raise ConnectionError("link probe: peer closed the connection")
        got += n


def _send(sock: socket.socket, nbytes: int, chunk: bytes) -> None:
    for start in range(0, nbytes, len(chunk)):
        sock.sendall(chunk[: min(len(chunk), nbytes - start)])


def _timed_side(sock, peer: int, nbytes: int, writer) -> LinkResult:
    """Rank 0: send then receive ``nbytes``, LINK_REPEATS times, then ping-pong; every
    time is taken here. Sending is timed to the receiver's 1-byte ack, receiving from
    our 1-byte go, so both include one one-way latency (microseconds against the transfer)."""
    chunk, buf, one = bytes(CHUNK_BYTES), bytearray(CHUNK_BYTES), bytearray(1)
    rates = {"to": [], "from": []}
    for rep in range(LINK_REPEATS):
        t0 = time.perf_counter()
        _send(sock, nbytes, chunk)
        _recv_exact(sock, 1, one)
        to_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sock.sendall(b"g")
        _recv_exact(sock, nbytes, buf)
        from_s = time.perf_counter() - t0
        for way, src, dst, seconds in (("to", 0, peer, to_s), ("from", peer, 0, from_s)):
            rates[way].append(nbytes * 8 / seconds / 1e9)
            writer.write(
                {
                    "type": "link",
                    "src": src,
                    "dst": dst,
                    "rep": rep,
                    "bytes": nbytes,
                    "seconds": seconds,
                    "gbit_s": rates[way][-1],
                }
            )
    ping, pong, samples_us = bytes(PING_BYTES), bytearray(PING_BYTES), []
    for i in range(RTT_WARMUP + RTT_PINGS):
        t0 = time.perf_counter()
        sock.sendall(ping)
        _recv_exact(sock, PING_BYTES, pong)
        if i >= RTT_WARMUP:
            samples_us.append((time.perf_counter() - t0) * 1e6)
    p50 = statistics.median(samples_us)
    writer.write({"type": "rtt", "peer": peer, "bytes": PING_BYTES, "samples_us": samples_us, "p50_us": p50})
    to_gbit_s, from_gbit_s = statistics.median(rates["to"]), statistics.median(rates["from"])
    return LinkResult(peer, to_gbit_s, from_gbit_s, p50, sock.getsockname()[0])


def _peer_side(sock, nbytes: int) -> None:
    chunk, buf, one = bytes(CHUNK_BYTES), bytearray(CHUNK_BYTES), bytearray(1)
    for _ in range(LINK_REPEATS):
        _recv_exact(sock, nbytes, buf)
        sock.sendall(b"k")
        _recv_exact(sock, 1, one)
        _send(sock, nbytes, chunk)
    pong = bytearray(PING_BYTES)
    for _ in range(RTT_WARMUP + RTT_PINGS):
        _recv_exact(sock, PING_BYTES, pong)
        sock.sendall(pong)


def probe_links(env: DistEnv, nbytes: int, timeout_s: float, writer) -> list[LinkResult]:
    """Pairs (0, r) for every other rank r, one at a time. Returns rank 0's results
    (empty elsewhere)."""
    results, server, where = [], None, [None, None]
    if env.rank == 0:
        host = interface_address(env.backend) or socket.gethostbyname(os.environ["MASTER_ADDR"])
        server = socket.create_server((host, 0), backlog=env.world_size)
        server.settimeout(timeout_s)
        where = [host, server.getsockname()[1]]
    dist.broadcast_object_list(where, src=0)
    try:
        if env.rank == 0:
            for _ in range(env.world_size - 1):
                conn, _ = server.accept()
                with conn:
                    _tune(conn, timeout_s)
                    peer = struct.unpack("!I", _recv_bytes(conn, 4))[0]
                    results.append(_timed_side(conn, peer, nbytes, writer))
        else:
            local = interface_address(env.backend)  # leave by the same interface as the group
            source = (local, 0) if local else None
            with socket.create_connection(tuple(where), timeout=timeout_s, source_address=source) as sock:
                _tune(sock, timeout_s)
                sock.sendall(struct.pack("!I", env.rank))
                _peer_side(sock, nbytes)
    finally:
        if server is not None:
            server.close()
    dist.barrier()
    return sorted(results)


def _tune(sock: socket.socket, timeout_s: float) -> None:
    # No Nagle: an 8-byte ping must leave now, not wait to be coalesced (iperf3 -N).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout_s)


def _recv_bytes(sock: socket.socket, nbytes: int) -> bytes:
    buf = bytearray(nbytes)
    _recv_exact(sock, nbytes, buf)
    return bytes(buf)
