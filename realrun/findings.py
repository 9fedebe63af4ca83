"""findings: the doctor's verdict on one machine's facts, as ``diagnose``'s dict.

From a hostfacts.Facts to every key of the doctor's JSON but ``schema`` (documented
in realrun/doctor.py): the interface this node talks on, the gloo and NCCL picks
judged by realrun/netrules.py, what the hostname, the rendezvous and the port say,
this node's torchrun line, and the problem list. Pure: no I/O, no printing.
"""

import ipaddress

from realrun import netrules, nodes
from realrun.hostfacts import Facts, PortProbe


def hostname_info(
    name: str,
    addrs: list[str],
    bindable: list[str],
    ifaces: list[dict],
    single_machine: bool,
    local_addr: str | None,
) -> dict:
    """``addrs``: what ``name`` resolves to (IPv4); ``bindable``: those of them that bind."""
    rows = [
        {
            "address": a,
            "local": netrules.owner_of(a, ifaces) is not None or a in bindable,
            "interface": netrules.owner_of(a, ifaces),
        }
        for a in addrs
    ]
    loopback = any(ipaddress.ip_address(a).is_loopback for a in addrs)
    warning = None
    if not addrs:
        warning = (
            f"hostname {name!r} does not resolve: torchrun publishes it as this node's address; "
            f"pass --local-addr {local_addr or '<this node address>'}"
        )
    elif loopback and not single_machine:
        warning = (
            f"hostname {name!r} resolves to {addrs[0]} (loopback): torchrun publishes it as this node's "
            f"address and gloo binds it, so other nodes cannot connect and init hangs; "
            f"pass --local-addr {local_addr or '<this node address>'} and set GLOO_SOCKET_IFNAME"
        )
    elif not any(r["local"] for r in rows):
        warning = f"hostname {name!r} resolves to {', '.join(addrs)}, none of them on this machine"
    return {"name": name, "addresses": rows, "loopback": loopback, "warning": warning}


def _subnet(address: str | None, ifaces: list[dict]) -> str:
    for i in ifaces:
        for a in i["addresses"]:
            if a["address"] == address and a["prefixlen"] is not None:
                return str(ipaddress.ip_interface(f"{address}/{a['prefixlen']}").network)
    return "<this node's subnet>"


def store_warning(public: list[str], port: int, is_host: bool) -> str | None:
    """Words for netrules.store_exposure's addresses; None when there are none."""
    if not public:
        return None
    where = "this node listens on every address, public ones included" if is_host else "the master is public"
    return (
        f"the rendezvous store has no authentication and {where} ({', '.join(public)}): anyone who "
        f"reaches port {port} can join or stop the job; use a private network, or let only the job's "
        "nodes through a firewall"
    )


def port_check(probe: PortProbe, subnet: str, is_host: bool) -> dict:
    """The port's JSON entry: ``probe``'s status in words for this node's role."""
    if probe.status == "unresolved":
        return {
            "status": "unresolved",
            "detail": "unresolved (the master name does not resolve)",
            "errno": None,
        }
    if probe.status == "refused":
        detail = "refused (reachable, nothing listening yet — start the rendezvous host first)"
        if is_host:
            detail = "refused (nothing listening yet; this node is the rendezvous host: its torchrun opens it)"
        return {"status": "refused", "detail": detail, "errno": probe.errno}
    if probe.status == "timeout":
        return {
            "status": "timeout",
            "detail": f"timeout (dropped: a firewall? ufw allow from {subnet} / iptables)",
            "errno": probe.errno,
        }
    if probe.status == "unreachable":
        return {"status": "unreachable", "detail": "unreachable (no route)", "errno": probe.errno}
    if probe.status == "error":
        return {"status": "error", "detail": f"error ({probe.strerror})", "errno": probe.errno}
    detail = "open"
    if is_host:
        detail = "open (something already listens here: torchrun's store cannot bind this port)"
    return {"status": "open", "detail": detail, "errno": None}


def from_facts(facts: Facts, *, nnodes: int, nproc_per_node: int, verb_args: list[str]) -> dict:
    """Every key of ``diagnose``'s dict but ``schema``, in its order; ``verb_args`` as
    nodes.check_verb_args returned them."""
    ifaces, env, master_host, port = facts.interfaces, facts.env, facts.master_host, facts.master_port
    problems = []
    if facts.interfaces_error:
        problems.append(f"interfaces: {facts.interfaces_error}")

    addrs = facts.master_addresses
    address = addrs[0] if addrs else None
    owner = netrules.owner_of(address, ifaces)
    loopback = bool(address) and ipaddress.ip_address(address).is_loopback
    local = owner is not None or loopback
    master = {
        "host": master_host,
        "port": port,
        "address": address,
        "local": local,
        "loopback": loopback,
        "interface": owner,
        "error": None if address else f"{master_host!r} does not resolve to an address",
    }
    if master["error"]:
        problems.append(f"master: {master['error']}")

    route = facts.route
    if address and route["dev"] is None and route["src"] is None:
        problems.append(f"route: no route to {address} ({route['error']})")
    if local:  # `ip route get` says lo for our own addresses; we talk on the owner
        node = {"interface": owner, "address": address}
    else:
        node = {"interface": route["dev"] or netrules.owner_of(route["src"], ifaces), "address": route["src"]}

    single = loopback  # every node on this machine
    gloo = netrules.gloo_pick(env, ifaces, facts.hostname, facts.gloo_default)
    netrules.judge(gloo, "GLOO_SOCKET_IFNAME", node["interface"], single, ifaces)
    nccl = netrules.nccl_pick(env, ifaces)
    netrules.judge(nccl, "NCCL_SOCKET_IFNAME", node["interface"], single, ifaces)
    problems += [f"{k}: {p['problem']}" for k, p in (("gloo", gloo), ("nccl", nccl)) if p["problem"]]

    host = hostname_info(
        facts.hostname, facts.hostname_addresses, facts.hostname_bindable, ifaces, single, node["address"]
    )
    if host["warning"]:
        problems.append(f"hostname: {host['warning']}")

    detects = netrules.torchrun_detects_host(
        master_host, facts.hostname, facts.master_tcp_addresses, facts.hostname_tcp
    )
    rdzv = {"is_host": local, "torchrun_detects_host": detects, "problem": None, "warning": None, "note": None}
    if local and not detects:
        rdzv["problem"] = (
            f"torchrun would not recognise this node as the rendezvous host ({master_host} is not what "
            f"hostname {host['name']!r} resolves to): it would wait for a store nobody hosts; "
            "pass --rdzv-conf=is_host=1"
        )
    elif not local and detects:
        rdzv["problem"] = f"torchrun would host the store here, but {master_host} is not on this machine"
    if rdzv["problem"]:
        problems.append(f"rendezvous: {rdzv['problem']}")
    if loopback and nnodes > 1:  # a test of several nodes on one machine, or a master the others cannot reach
        lan = (
            f", e.g. this node's {nccl['interface']} {nccl['address']}" if nccl["interface"] and nccl["address"] else ""
        )
        rdzv["note"] = (
            f"{address} is loopback, so all {nnodes} nodes must run on this machine; for {nnodes} machines give"
            f" --master an address the others reach{lan}"
        )
    rdzv["warning"] = store_warning(netrules.store_exposure(address, local, ifaces), port, local)
    if rdzv["warning"]:
        problems.append(f"store: {rdzv['warning']}")

    pc = port_check(facts.port, _subnet(node["address"], ifaces), local)
    if pc["status"] not in ("open", "refused") or (local and pc["status"] == "open"):
        problems.append(f"port {port}: {pc['detail']}")

    use_if = node["interface"] if node["interface"] and not single else None
    settings_env = nodes.env_for(use_if)
    argv = nodes.torchrun_argv(
        nnodes=nnodes,
        nproc_per_node=nproc_per_node,
        rdzv_endpoint=nodes.endpoint(master_host, port),
        is_host=local,
        local_addr=node["address"],
        verb_args=verb_args,
    )
    settings = {
        "env": settings_env,
        "env_line": " ".join(f"{k}={v}" for k, v in settings_env.items()),
        "torchrun": nodes.shell_line(settings_env, argv),
        "torchrun_argv": argv,
        "nnodes": nnodes,
        "nproc_per_node": nproc_per_node,
        "verb_args": verb_args,
    }
    return {
        "master": master,
        "interfaces": ifaces,
        "route": route,
        "node": node,
        "gloo": gloo,
        "nccl": nccl,
        "hostname": host,
        "port": pc,
        "rendezvous": rdzv,
        "settings": settings,
        "problems": problems,
    }
