"""Why a netlab run failed or hung, in words: runs ``realrun.doctor`` inside every
emulated host (where the failure lives) and names the first cause it finds, with
the fix, for the three discovery failures of the seed's section 2.2."""

import json
import subprocess
import sys
from pathlib import Path

from realrun.netlab import Lab


def _doctor(lab: Lab, host: int, port: int, gloo_ifname: bool) -> dict:
    env = {"GLOO_SOCKET_IFNAME": "eth0"} if gloo_ifname else {}
    argv = lab.host_command(
        host,
        [
            sys.executable,
            "-m",
            "realrun.doctor",
            "--master",
            f"{lab.spec.address(0)}:{port}",
            "--json",
            "--nnodes",
            str(lab.spec.hosts),
            "--timeout-s",
            "3",
        ],
        env=env,
    )
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if p.returncode not in (0, 1):  # 1: the report lists problems, which is what we read
        return {"error": p.stderr.strip().splitlines()[-1:] or ["doctor failed"]}
    return json.loads(p.stdout)


def explain(lab: Lab, d, log_dir: Path) -> list[str]:
    spec = lab.spec
    reports = {i: _doctor(lab, i, d.port, d.gloo_ifname) for i in range(spec.hosts)}
    lines = []
    for i, r in reports.items():
        if "error" in r:
            lines.append(f"host{i}: doctor could not run: {r['error'][0]}")
    ok = {i: r for i, r in reports.items() if "error" not in r}
    # (c) The rendezvous port is dropped: connects from other hosts time out.
    for i, r in ok.items():
        if i > 0 and r["port"]["status"] == "timeout":
            lines.append(
                f"host{i} cannot reach the rendezvous port {d.port} on host0 ({spec.address(0)}): the connection"
                f" times out, so a firewall drops it (look at `ip netns exec {spec.ns(0)} iptables -L INPUT`);"
                f" fix: allow TCP {d.port} and the ephemeral ports from 10.{spec.subnet}.0.0/24"
            )
    # (b) The host's name resolves outside it: torchrun cannot tell it is the rendezvous host.
    if not (d.is_host and d.local_addr):
        host0 = ok.get(0)
        if host0 and not host0["rendezvous"]["torchrun_detects_host"]:
            names = ", ".join(a["address"] for a in host0["hostname"]["addresses"]) or "nothing"
            lines.append(
                f"on host0 the hostname {host0['hostname']['name']!r} resolves to {names}, outside its network:"
                " torchrun does not know it is the rendezvous host and advertises an address the others cannot"
                f" reach; fix: --rdzv-conf is_host=1 on host0 and --local-addr <its address> on every host"
                f" (host0: --local-addr {spec.address(0)})"
            )
    # (a) gloo binds an interface the peers cannot reach (a decoy, or loopback).
    for i, r in ok.items():
        gloo = r["gloo"]
        if not gloo["ok"]:
            why = "GLOO_SOCKET_IFNAME is unset and " if not gloo["env"] else ""
            lines.append(
                f"host{i}: {why}gloo binds {gloo['interface']} ({gloo['address']}), not the interface that"
                f" reaches the others (eth0, {spec.address(i)}); the process group waits forever for"
                f" connections that never arrive; fix: {gloo['fix'] or 'export GLOO_SOCKET_IFNAME=eth0'}"
            )
    if not lines:
        lines.append("no discovery problem found from inside the hosts; see the host logs")
    for i in range(spec.hosts):
        tail = _last_error(log_dir / f"host{i}.log")
        if tail:
            lines.append(f"host{i} log: {tail}")
    return lines


def _last_error(log: Path) -> str | None:
    """The last error line a rank printed: torchrun's own logging and its ChildFailedError
    traceback are the echo of that failure, not its cause (they stay in the log)."""
    from realrun.launch import TorchrunFilter

    if not log.exists():
        return None
    keep = TorchrunFilter()
    lines = [ln for ln in log.read_text(errors="replace").splitlines(keepends=True) if keep.show(ln)]
    errors = [ln.strip() for ln in lines if "Error" in ln or "error:" in ln]
    return errors[-1][:300] if errors else None
