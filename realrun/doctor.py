"""doctor: what this machine's network looks like to torchrun, gloo and NCCL.

``python -m realrun.doctor --master ADDR:PORT [--json]`` (or ``ddplab doctor``) runs
on one real machine, or inside a netlab host with ``ip netns exec``, and answers the
seed's section 2.2 questions before anything hangs: which interface leads to the
rendezvous host, which one gloo and NCCL would pick by their own rules, whether they
agree, what the hostname resolves to, whether the port answers, and the exact
variables and torchrun line for this node. stdlib only; reads ``ip -j`` and /sys.
Run it from the repository root, or with PYTHONPATH naming it.

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

JSON (``diagnose``'s dict; ``schema`` is bumped on any incompatible change):

    schema          "ddplab-doctor/1"
    master          {host, port, address (IPv4 or null), local (bool: an address of
                     this machine), loopback (bool), interface (owner when local), error}
    interfaces      [{name, index, kind, info_kind, state, mtu, speed_mbit_s (null when
                     /sys cannot say), addresses [{address, prefixlen, family}]}]
                    kind: loopback | bridge/docker | veth | wireless | tunnel/VPN |
                          InfiniBand | ethernet | other
    route           {dev, src, gateway, type, error}: `ip route get <master address>`
    node            {interface, address}: what this node talks to the others on (the
                     routed interface; the owner of the master address when it is local)
    gloo, nccl      {env (the variable's value or null), rule (words), interfaces [names],
                     interface (first, or null), address, routed (bool: equals
                     node.interface), ok (bool), problem (words or null), fix (or null)}
    hostname        {name, addresses [{address, local, interface}], loopback (bool),
                     warning (words or null)}
    port            {status: open | refused | timeout | unreachable | unresolved | error,
                     detail (words), errno}
    rendezvous      {is_host (bool: master is local), torchrun_detects_host (bool),
                     problem (words or null)}
    settings        {env {NAME: value}, env_line, torchrun (shell line), torchrun_argv,
                     nnodes, nproc_per_node, verb_args}
    problems        [words]: every problem above, in order
"""

import argparse
import errno
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from realrun import nodes

SCHEMA = "ddplab-doctor/1"
SYS_NET = Path("/sys/class/net")
_TUNNEL_KINDS = {
    "tun",
    "tap",
    "wireguard",
    "ipip",
    "gre",
    "gretap",
    "ip6gre",
    "ip6gretap",
    "sit",
    "ip6tnl",
    "vti",
    "vti6",
    "vxlan",
    "geneve",
}
_TUNNEL_TYPES = {65534, 768, 769, 776, 778, 823}  # none (tun), tunnel, tunnel6, sit, ipgre, ip6gre
_ETHERNET_KINDS = {None, "vlan", "bond", "team", "macvlan", "macvtap", "ipvlan"}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # e.g. `speed` on a link that is down or virtual: EINVAL
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _ip_json(*args: str) -> tuple[list, str | None]:
    if not shutil.which("ip"):
        return [], "ip (iproute2) not found"
    p = subprocess.run(["ip", "-j", *args], capture_output=True, text=True)
    if p.returncode != 0:
        return [], (p.stderr.strip() or f"`ip {' '.join(args)}` failed").splitlines()[0]
    try:
        return json.loads(p.stdout or "[]"), None
    except json.JSONDecodeError:
        return [], f"`ip -j {' '.join(args)}` printed no JSON (iproute2 too old?)"


def kind_of(name: str, info_kind: str | None, sys_type: int | None, flags=()) -> str:
    """The interface's kind from rtnetlink's link kind, /sys and (for docker) its name."""
    d = SYS_NET / name
    if sys_type == 772 or "LOOPBACK" in flags or name == "lo":
        return "loopback"
    if sys_type == 32 or info_kind == "ipoib":
        return "InfiniBand"
    if (d / "wireless").exists() or (d / "phy80211").exists():
        return "wireless"
    if info_kind in _TUNNEL_KINDS or sys_type in _TUNNEL_TYPES or (d / "tun_flags").exists():
        return "tunnel/VPN"
    if info_kind == "bridge" or (d / "bridge").exists() or name.startswith(("docker", "br-", "virbr")):
        return "bridge/docker"
    if info_kind == "veth":
        return "veth"
    if sys_type == 1 and info_kind in _ETHERNET_KINDS:
        return "ethernet"
    return "other"


def interfaces() -> tuple[list[dict], str | None]:
    links, err = _ip_json("-d", "addr", "show")
    out = []
    for link in links:
        name = link["ifname"]
        d = SYS_NET / name
        info_kind = (link.get("linkinfo") or {}).get("info_kind")
        sys_type = _int(_read(d / "type"))
        speed = _int(_read(d / "speed"))
        out.append(
            {
                "name": name,
                "index": link.get("ifindex"),
                "kind": kind_of(name, info_kind, sys_type, link.get("flags", ())),
                "info_kind": info_kind,
                "state": link.get("operstate"),
                "mtu": link.get("mtu") or _int(_read(d / "mtu")),
                "speed_mbit_s": speed if speed and speed > 0 else None,
                "addresses": [
                    {"address": a["local"], "prefixlen": a.get("prefixlen"), "family": a["family"]}
                    for a in link.get("addr_info", [])
                    if a.get("family") in ("inet", "inet6") and "local" in a
                ],
            }
        )
    if err and not out:  # no iproute2 (e.g. macOS): names only
        out = [
            {
                "name": n,
                "index": i,
                "kind": kind_of(n, None, _int(_read(SYS_NET / n / "type"))),
                "info_kind": None,
                "state": None,
                "mtu": _int(_read(SYS_NET / n / "mtu")),
                "speed_mbit_s": None,
                "addresses": [],
            }
            for i, n in socket.if_nameindex()
        ]
    return out, err


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


def _bindable(family, sockaddr) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind(sockaddr)
        return True
    except OSError:
        return False


def resolve_ipv4(host: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return list(dict.fromkeys(i[4][0] for i in infos))


def route_to(address: str) -> dict:
    rows, err = _ip_json("route", "get", address)
    if rows:
        r = rows[0]
        return {
            "dev": r.get("dev"),
            "src": r.get("prefsrc"),
            "gateway": r.get("gateway"),
            "type": r.get("type", "unicast"),
            "error": None,
        }
    # No iproute2 answer: the kernel's source choice for a UDP "connect" sends nothing.
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))
            src = s.getsockname()[0]
    except OSError as e:
        return {"dev": None, "src": None, "gateway": None, "type": None, "error": err or e.strerror}
    return {"dev": None, "src": src, "gateway": None, "type": None, "error": err}


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


def gloo_pick(env, ifaces: list[dict], hostname: str) -> dict:
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
    try:
        infos = socket.getaddrinfo(hostname, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        infos = []
    addr = next((i[4][0] for i in infos if _bindable(i[0], i[4])), None)
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


def _judge(pick: dict, var: str, node_if: str | None, single_machine: bool, ifaces: list[dict]) -> None:
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


def hostname_info(ifaces: list[dict], single_machine: bool, local_addr: str | None) -> dict:
    name = socket.gethostname()
    addrs = resolve_ipv4(name)
    rows = [
        {
            "address": a,
            "local": owner_of(a, ifaces) is not None or _bindable(socket.AF_INET, (a, 0)),
            "interface": owner_of(a, ifaces),
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


def port_check(address: str | None, port: int, timeout_s: float, subnet: str, is_host: bool) -> dict:
    if address is None:
        return {
            "status": "unresolved",
            "detail": "unresolved (the master name does not resolve)",
            "errno": None,
        }
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError as e:
        detail = "refused (reachable, nothing listening yet — start the rendezvous host first)"
        if is_host:
            detail = "refused (nothing listening yet; this node is the rendezvous host: its torchrun opens it)"
        return {"status": "refused", "detail": detail, "errno": e.errno}
    except TimeoutError:
        return {
            "status": "timeout",
            "detail": f"timeout (dropped: a firewall? ufw allow from {subnet} / iptables)",
            "errno": errno.ETIMEDOUT,
        }
    except OSError as e:
        if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return {"status": "unreachable", "detail": "unreachable (no route)", "errno": e.errno}
        return {"status": "error", "detail": f"error ({e.strerror})", "errno": e.errno}
    detail = "open"
    if is_host:
        detail = "open (something already listens here: torchrun's store cannot bind this port)"
    return {"status": "open", "detail": detail, "errno": None}


def torchrun_detects_host(host: str) -> bool:
    """torch's _matches_machine_hostname (2.13), restated with the stdlib."""
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        addr = None
    if addr and addr.is_loopback:
        return True
    try:
        host_ips = [i[4][0] for i in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)]
    except (socket.gaierror, UnicodeError):
        host_ips = []
    this_host = socket.gethostname()
    if host == this_host:
        return True
    try:
        mine = socket.getaddrinfo(this_host, None, proto=socket.IPPROTO_TCP, flags=socket.AI_CANONNAME)
    except socket.gaierror:
        return False
    return any((i[3] and i[3] == host) or (addr and i[4][0] == str(addr)) or i[4][0] in host_ips for i in mine)


def diagnose(
    master_host: str,
    port: int,
    *,
    connect_timeout_s: float = 3.0,
    nnodes: int = 2,
    nproc_per_node: int = 1,
    verb_args: list[str] | None = None,
    env=None,
) -> dict:
    """Everything in the module docstring, for this machine (or network namespace)."""
    if not 1 <= port <= 65535:
        raise ValueError(f"--master: port must be in 1..65535, got {port}")
    nodes.check_counts(nnodes, nproc_per_node, flag_nodes="--nnodes")
    args = nodes.check_verb_args(verb_args or [])
    env = os.environ if env is None else env
    problems = []
    ifaces, if_err = interfaces()
    if if_err:
        problems.append(f"interfaces: {if_err}")

    addrs = resolve_ipv4(master_host)
    address = addrs[0] if addrs else None
    owner = owner_of(address, ifaces)
    loopback = bool(address) and ipaddress.ip_address(address).is_loopback
    local = owner is not None or loopback
    master = {
        "host": master_host,
        "port": port,
        "address": address,
        "local": local,
        "loopback": loopback,
        "interface": owner,
        "error": None if address else f"{master_host!r} does not resolve to an IPv4 address",
    }
    if master["error"]:
        problems.append(f"master: {master['error']}")

    route = route_to(address) if address else {"dev": None, "src": None, "gateway": None, "type": None}
    route.setdefault("error", None)
    if address and route["dev"] is None and route["src"] is None:
        problems.append(f"route: no route to {address} ({route['error']})")
    if local:  # `ip route get` says lo for our own addresses; we talk on the owner
        node = {"interface": owner, "address": address}
    else:
        node = {"interface": route["dev"] or owner_of(route["src"], ifaces), "address": route["src"]}

    single = loopback  # every node on this machine
    gloo = gloo_pick(env, ifaces, socket.gethostname())
    _judge(gloo, "GLOO_SOCKET_IFNAME", node["interface"], single, ifaces)
    nccl = nccl_pick(env, ifaces)
    _judge(nccl, "NCCL_SOCKET_IFNAME", node["interface"], single, ifaces)
    problems += [f"{k}: {p['problem']}" for k, p in (("gloo", gloo), ("nccl", nccl)) if p["problem"]]

    host = hostname_info(ifaces, single, node["address"])
    if host["warning"]:
        problems.append(f"hostname: {host['warning']}")

    detects = torchrun_detects_host(master_host)
    rdzv = {"is_host": local, "torchrun_detects_host": detects, "problem": None}
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

    pc = port_check(address, port, connect_timeout_s, _subnet(node["address"], ifaces), local)
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
        verb_args=args,
    )
    settings = {
        "env": settings_env,
        "env_line": " ".join(f"{k}={v}" for k, v in settings_env.items()),
        "torchrun": nodes.shell_line(settings_env, argv),
        "torchrun_argv": argv,
        "nnodes": nnodes,
        "nproc_per_node": nproc_per_node,
        "verb_args": args,
    }
    return {
        "schema": SCHEMA,
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


def format_report(d: dict) -> list[str]:
    m, r, n = d["master"], d["route"], d["node"]
    where = f", on this machine ({m['interface']})" if m["local"] else ""
    out = [
        f"master {nodes.endpoint(m['host'], m['port'])}: address {m['address'] or 'unresolved'}{where}",
        "",
    ]
    out.append(f"{'interface':<12} {'kind':<14} {'state':<8} {'MTU':>6} {'Mbit/s':>7}  addresses")
    for i in d["interfaces"]:
        addrs = ", ".join(f"{a['address']}/{a['prefixlen']}" for a in i["addresses"]) or "-"
        kind = i["kind"] if i["kind"] != "other" else f"other ({i['info_kind'] or '?'})"
        speed = str(i["speed_mbit_s"]) if i["speed_mbit_s"] else "-"
        out.append(f"{i['name']:<12} {kind:<14} {i['state'] or '?':<8} {i['mtu'] or '-':>6} {speed:>7}  {addrs}")
    out.append("")
    if r["dev"] or r["src"]:
        via = f" via {r['gateway']}" if r["gateway"] else ""
        out.append(f"route to {m['address']}: dev {r['dev'] or '?'}, src {r['src']}{via} ({r['type']})")
    elif m["address"]:
        out.append(f"route to {m['address']}: none ({r['error']})")
    role = " (the rendezvous host)" if m["local"] else ""
    out.append(f"this node talks on: {n['interface'] or '?'}, address {n['address'] or '?'}{role}")
    for lib in ("gloo", "nccl"):
        p = d[lib]
        verdict = "OK" if p["ok"] and p["routed"] else "OK (one machine)" if p["ok"] else "PROBLEM"
        extra = f" (all: {', '.join(p['interfaces'])})" if len(p["interfaces"]) > 1 else ""
        out.append(f"{lib}: {p['interface'] or 'none'} {p['address'] or ''}{extra}  [{verdict}]")
        out.append(f"  rule: {p['rule']}")
        if p["problem"]:
            out.append(f"  {p['problem']}")
        if p["fix"]:
            out.append(f"  fix: {p['fix']}")
    h = d["hostname"]
    resolved = ", ".join(f"{a['address']} ({a['interface'] or 'not local'})" for a in h["addresses"]) or "nothing"
    out.append(f"hostname {h['name']}: resolves to {resolved}")
    if h["warning"]:
        out.append(f"  warning: {h['warning']}")
    rz = d["rendezvous"]
    out.append(
        f"rendezvous: this node hosts the store: {'yes' if rz['is_host'] else 'no'}; "
        f"torchrun would guess {'yes' if rz['torchrun_detects_host'] else 'no'}"
    )
    if rz["problem"]:
        out.append(f"  {rz['problem']}")
    out.append(f"port {m['port']}: {d['port']['detail']}")
    s = d["settings"]
    out += ["", f"This node ({s['nnodes']} nodes x {s['nproc_per_node']} processes):"]
    if s["env"]:
        out += [f"  export {k}={v}" for k, v in s["env"].items()]
    out.append(f"  {nodes.shell_line({}, s['torchrun_argv'])}")
    out.append("  (NCCL_DEBUG=INFO shows the interface NCCL really chose)")
    out += ["", "problems: none" if not d["problems"] else f"problems ({len(d['problems'])}):"]
    out += [f"  - {p}" for p in d["problems"]]
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", required=True, metavar="ADDR:PORT", help="the rendezvous endpoint")
    p.add_argument("--nnodes", type=int, default=2, help="machines in the job (default 2)")
    p.add_argument("--nproc-per-node", type=int, default=1, help="processes per machine (default 1)")
    p.add_argument("--timeout-s", type=float, default=3.0, help="TCP connect timeout for the port check")
    p.add_argument("--json", action="store_true", help="print JSON (keys in realrun/doctor.py)")


def run(args) -> dict:
    host, port = nodes.parse_endpoint(args.master)
    if not args.timeout_s > 0:
        raise ValueError(f"--timeout-s: must be > 0, got {args.timeout_s}")
    return diagnose(
        host, port, connect_timeout_s=args.timeout_s, nnodes=args.nnodes, nproc_per_node=args.nproc_per_node
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m realrun.doctor", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        d = run(args)
    except ValueError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(d, indent=2) if args.json else "\n".join(format_report(d)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
