"""netrules: the interface gloo and NCCL pick, whether it is the one the other nodes
reach, and whether torchrun takes this node for the rendezvous host.

Pure functions of the values realrun/hostfacts.py reads (environment, interface
rows, resolver answers): no I/O, no printing, no globals.

The rules, from the sources (torch 2.13, NCCL src/misc/socket.cc):

- gloo: ``GLOO_SOCKET_IFNAME`` (longer than one character) is a comma list, one
  device per name, used round-robin; the first is reported. Unset, gloo resolves the
  hostname (getaddrinfo, any family) and binds the first address that binds —
  127.0.1.1 binds fine, which is the silent failure — and only when none does falls
  back to 127.0.0.1 (ProcessGroupGloo createDefaultDevice).
- NCCL: ``NCCL_SOCKET_IFNAME`` (longer than one character) is a prefix list, leading
  ``^`` excludes, ``=`` makes it exact; interfaces with an address, in getifaddrs
  order (every IPv4 address by interface index, then IPv6), link state not checked.
  Unset: ``ib*``, else the subnet of ``NCCL_COMM_ID``, else anything but lo and
  docker*, else docker*, else lo. The first match carries the bootstrap.
- torchrun's c10d rendezvous hosts the TCP store on the node that is told
  ``is_host=1``, or else on the node whose hostname or its addresses equal the
  endpoint (torch.distributed.elastic.rendezvous.utils._matches_machine_hostname).
  The store listens on every address of that node (c10d SocketListenOp: getaddrinfo
  with no host and AI_PASSIVE, the wildcard) and has no authentication: whoever
  reaches the port can read and write the job's keys, join it or stop it.
"""

import ipaddress


def owner_of(address: str | None, ifaces: list[dict]) -> str | None:
    """The interface holding ``address``; 127/8 belongs to lo whatever lo lists."""
    if not address:
        return None
    for ifc in ifaces:
        if any(a["address"] == address for a in ifc["addresses"]):
            return ifc["name"]
    if ipaddress.ip_address(address).is_loopback:
        return next((i["name"] for i in ifaces if i["kind"] == "loopback"), "lo")
    return None


def _nccl_order(ifaces: list[dict], family: str | None) -> list[tuple[str, str]]:
    """(name, address) as getifaddrs lists them: IPv4 by interface index, then IPv6."""
    v4 = [(i["name"], a["address"]) for i in ifaces for a in i["addresses"] if a["family"] == "inet"]
    v6 = [
        (i["name"], a["address"])
        for i in ifaces
        for a in i["addresses"]
        if a["family"] == "inet6" and a["address"] != "::1"
    ]
    return v4 if family == "inet" else v6 if family == "inet6" else v4 + v6


def _nccl_find(prefix_list: str, entries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """NCCL's findInterfaces: ``^`` negates, then ``=`` makes names exact; ``name:port`` ok."""
    negate = prefix_list.startswith("^")
    body = prefix_list[1:] if negate else prefix_list
    exact = body.startswith("=")
    body = body[1:] if exact else body
    names = [p.split(":")[0] for p in body.split(",") if p]
    found: dict[str, str] = {}
    for name, addr in entries:
        hit = any(name == n if exact else name.startswith(n) for n in names)
        if hit != negate and name not in found:
            found[name] = addr
    return list(found.items())


def nccl_pick(env, ifaces: list[dict]) -> dict:
    fam = {"AF_INET": "inet", "AF_INET6": "inet6"}.get(env.get("NCCL_SOCKET_FAMILY", ""))
    entries = _nccl_order(ifaces, fam)
    value = env.get("NCCL_SOCKET_IFNAME")
    if value and len(value) > 1:
        found = _nccl_find(value, entries)
        rule = f"NCCL_SOCKET_IFNAME={value} (prefix match; '^' excludes, '=' exact)"
    else:
        value = None
        found = _nccl_find("ib", entries)
        rule = "ib* first"
        comm_id = env.get("NCCL_COMM_ID", "")
        if not found and comm_id:
            try:
                target = ipaddress.ip_address(comm_id.rsplit(":", 1)[0].strip("[]"))
                found = [
                    (i["name"], a["address"])
                    for i in ifaces
                    for a in i["addresses"]
                    if target in ipaddress.ip_interface(f"{a['address']}/{a['prefixlen']}").network
                ][:1]
                rule += ", else NCCL_COMM_ID's subnet"
            except ValueError:
                pass
        for fallback, words in (("^docker,lo", "any but lo/docker*"), ("docker", "docker*"), ("lo", "lo")):
            if not found:
                found = _nccl_find(fallback, entries)
                rule += f", else {words}"
        rule = "no NCCL_SOCKET_IFNAME: " + rule
    return {
        "env": value,
        "rule": rule,
        "interfaces": [n for n, _ in found],
        "interface": found[0][0] if found else None,
        "address": found[0][1] if found else None,
    }


def gloo_pick(env, ifaces: list[dict], hostname: str, bound: str | None) -> dict:
    """``bound``: the first address of ``hostname`` that binds (hostfacts.first_bindable)."""
    value = env.get("GLOO_SOCKET_IFNAME")
    if value and len(value) > 1:
        names = [n for n in value.split(",") if n]
        first = names[0] if names else None
        ifc = next((i for i in ifaces if i["name"] == first), None)
        addr = next((a["address"] for a in ifc["addresses"]), None) if ifc else None
        return {
            "env": value,
            "rule": f"GLOO_SOCKET_IFNAME={value} (a list: one device per name, round-robin)",
            "interfaces": names,
            "interface": first,
            "address": addr,
        }
    addr = bound
    if addr is None:
        addr = "127.0.0.1"
        rule = f"no GLOO_SOCKET_IFNAME: hostname {hostname!r} gives no bindable address -> loopback"
    else:
        rule = f"no GLOO_SOCKET_IFNAME: binds what hostname {hostname!r} resolves to ({addr})"
    name = owner_of(addr, ifaces)
    return {
        "env": None,
        "rule": rule,
        "interfaces": [name] if name else [],
        "interface": name,
        "address": addr,
    }


def judge(pick: dict, var: str, node_if: str | None, single_machine: bool, ifaces: list[dict]) -> None:
    """Fill routed/ok/problem/fix: the pick must be the interface the others reach us on."""
    name = pick["interface"]
    pick["routed"] = name is not None and name == node_if
    pick["ok"], pick["problem"], pick["fix"] = pick["routed"], None, None
    lib = var.split("_")[0].lower()
    if name is not None and name not in {i["name"] for i in ifaces}:
        pick["ok"] = False
        pick["problem"] = f"{var} names {name!r}, which this machine does not have: {lib} fails at init"
    elif name is None:
        pick["ok"] = False
        pick["problem"] = f"{lib} finds no interface with an address ({pick['rule']}): init fails"
    elif pick["address"] is None:
        pick["ok"] = False
        pick["problem"] = f"{var} names {name}, which has no address: {lib} fails at init"
    elif pick["routed"] or single_machine:
        pick["ok"] = True  # one machine: every rank reaches any local address
        return
    elif node_if is None:
        pick["problem"] = f"{lib} would use {name}, but no route to the master was found to compare with"
        return
    else:
        pick["problem"] = (
            f"{lib} would use {name} ({pick['address']}), but the master is reached through {node_if}: "
            f"the other nodes connect to {pick['address']} and init hangs with no error"
        )
    if node_if:
        pick["fix"] = f"export {var}={node_if}"


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address: a rendezvous host that names this machine wherever it
    is read, as torch's _matches_machine_hostname takes it (and `ddplab launch` warns of)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def torchrun_detects_host(host: str, this_host: str, host_ips: list[str], mine: list[tuple[str, str]] | None) -> bool:
    """torch's _matches_machine_hostname (2.13), restated with the stdlib; ``host_ips`` and
    ``mine`` are its resolver answers (hostfacts.torchrun_lookups), ``this_host`` the hostname."""
    if is_loopback_host(host):
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        addr = None
    if host == this_host:
        return True
    if mine is None:
        return False
    return any((canon and canon == host) or (addr and a == str(addr)) or a in host_ips for canon, a in mine)


def is_public(address: str) -> bool:
    """Reachable from outside a private network: not private (RFC 1918, ULA), loopback or
    link-local. Shared space such as 100.64/10 (CGNAT, Tailscale) counts as public: other
    subscribers of the carrier share it."""
    a = ipaddress.ip_address(address)
    return not (a.is_private or a.is_loopback or a.is_link_local)


def store_exposure(master_address: str | None, is_host: bool, ifaces: list[dict]) -> list[str]:
    """The public addresses torchrun's TCP store would answer on: every public address of this
    node when it hosts the store (it listens on all of them), else the master's if public."""
    if is_host:
        mine = [a["address"] for i in ifaces for a in i["addresses"]]
        return [a for a in dict.fromkeys([*mine, master_address]) if a and is_public(a)]
    return [master_address] if master_address and is_public(master_address) else []
