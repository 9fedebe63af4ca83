"""hostfacts: read what this machine's network looks like, and judge nothing.

Everything the doctor needs from the machine (or network namespace) it runs in:
interfaces from ``ip -j`` and /sys (without iproute2, as on macOS, from ``ifconfig -a``), the
route to the master (without iproute2: the kernel's source address for it and the interface
that holds it), what names resolve to, which addresses bind, whether the master's port
answers, and the environment. It all comes back as plain values in one ``Facts``; the
interface rows are already the doctor's JSON rows. stdlib only. The rules that judge these
facts are in realrun/netrules.py and realrun/findings.py.
"""

import errno
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import NamedTuple

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


class PortProbe(NamedTuple):
    """One TCP connect to the master's port, before anything is judged."""

    status: str  # open | refused | timeout | unreachable | unresolved | error
    errno: int | None
    strerror: str | None


class Facts(NamedTuple):
    """What ``gather`` read; every value is plain data."""

    env: dict[str, str]  # the environment this node's torchrun would start with
    interfaces: list[dict]  # interfaces()'s rows
    interfaces_error: str | None
    master_host: str
    master_port: int
    master_addresses: list[str]  # IPv4 then IPv6, each in resolver order
    route: dict  # route_to(the first master address); every field None when it does not resolve
    hostname: str
    hostname_addresses: list[str]  # IPv4, in resolver order
    hostname_bindable: list[str]  # those of hostname_addresses a socket can bind
    gloo_default: str | None  # the first address of the hostname, any family, that binds
    master_tcp_addresses: list[str]  # torch's lookup of the endpoint (_matches_machine_hostname)
    hostname_tcp: list[tuple[str, str]] | None  # (canonical name, address); None: the lookup failed
    port: PortProbe


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
    if "POINTOPOINT" in flags and info_kind is None and sys_type is None:  # ifconfig's view: macOS's utun*
        return "tunnel/VPN"
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
    if err and not out:  # no iproute2 (e.g. macOS): ifconfig's view, else names only
        found, why = _ifconfig()
        if found:
            return found, None
        err = f"{err}; {why}"
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


def _ifconfig() -> tuple[list[dict], str | None]:
    """interfaces()'s rows from `ifconfig -a` where iproute2 is absent (macOS and the BSDs, where
    ifconfig is always there; Linux's net-tools prints the same shape); ([], why) without it."""
    exe = shutil.which("ifconfig")
    if not exe:
        return [], "no ifconfig either"
    p = subprocess.run([exe, "-a"], capture_output=True, text=True)
    rows = parse_ifconfig(p.stdout) if p.returncode == 0 else []
    return rows, None if rows else f"`ifconfig -a` gave no interface ({(p.stderr.strip() or 'no output')[:80]})"


_IF_HEADER = re.compile(r"^(\S+?):? flags=\d+<([^>]*)>.*?\bmtu (\d+)")
_IF_INET = re.compile(r"^\s+inet (\S+)\s+netmask (\S+)")
_IF_INET6 = re.compile(r"^\s+inet6 (\S+)\s+prefixlen (\d+)")
_IF_STATUS = re.compile(r"^\s+status: (\w+)")


def parse_ifconfig(text: str) -> list[dict]:
    """`ifconfig -a` as interfaces()'s rows: each block's header `NAME: flags=N<FLAGS> mtu M`, its
    `inet ADDR netmask MASK` (dotted, or macOS's hex 0xffffff00) and `inet6 ADDR[%scope]
    prefixlen N` lines, and macOS's `status: active|inactive`. Up is UP and RUNNING (or active);
    no speed is read."""
    rows, flags, status = [], (), None

    def close():
        if rows:
            up = "UP" in flags and status != "inactive"
            rows[-1]["state"] = "UP" if up and ("RUNNING" in flags or status == "active") else "DOWN"

    for line in text.splitlines():
        if m := _IF_HEADER.match(line):
            close()
            name, flags, status = m[1], tuple(m[2].split(",")), None
            try:
                index = socket.if_nametoindex(name)
            except OSError:
                index = None
            sys_type = _int(_read(SYS_NET / name / "type"))
            rows.append({"name": name, "index": index, "kind": kind_of(name, None, sys_type, flags), "info_kind": None,
                         "state": None, "mtu": int(m[3]), "speed_mbit_s": None, "addresses": []})  # fmt: skip
        elif rows and (m := _IF_INET.match(line)):
            mask = m[2]
            bits = int(mask, 16) if mask.startswith("0x") else int.from_bytes(socket.inet_aton(mask), "big")
            rows[-1]["addresses"].append({"address": m[1], "prefixlen": bin(bits).count("1"), "family": "inet"})
        elif rows and (m := _IF_INET6.match(line)):
            address = m[1].split("%")[0]
            rows[-1]["addresses"].append({"address": address, "prefixlen": int(m[2]), "family": "inet6"})
        elif rows and (m := _IF_STATUS.match(line)):
            status = m[1]
    close()
    return rows


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


def resolve(host: str) -> list[str]:
    """IPv4 addresses first (what gloo and NCCL bind by default), then IPv6: an IPv6 endpoint
    such as ``[::1]:29500`` or a name with only AAAA records resolves too."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET6, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        infos = []
    return resolve_ipv4(host) + list(dict.fromkeys(i[4][0] for i in infos))


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
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))
            src = s.getsockname()[0]
    except OSError as e:
        return {"dev": None, "src": None, "gateway": None, "type": None, "error": err or e.strerror}
    return {"dev": None, "src": src, "gateway": None, "type": None, "error": err}


def first_bindable(hostname: str) -> str | None:
    """What gloo's default device binds (ProcessGroupGloo createDefaultDevice): the first
    address the hostname resolves to (getaddrinfo, any family) that binds; None if none."""
    try:
        infos = socket.getaddrinfo(hostname, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        infos = []
    return next((i[4][0] for i in infos if _bindable(i[0], i[4])), None)


def torchrun_lookups(host: str, this_host: str) -> tuple[list[str], list[tuple[str, str]] | None]:
    """The resolver answers torch's _matches_machine_hostname (2.13) compares: the endpoint's
    addresses, and this hostname's (canonical name, address) pairs (None when that fails)."""
    try:
        host_ips = [i[4][0] for i in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)]
    except (socket.gaierror, UnicodeError):
        host_ips = []
    try:
        mine = socket.getaddrinfo(this_host, None, proto=socket.IPPROTO_TCP, flags=socket.AI_CANONNAME)
    except (socket.gaierror, UnicodeError):  # UnicodeError: a label over 63 characters
        return host_ips, None
    return host_ips, [(i[3], i[4][0]) for i in mine]


def connect(address: str | None, port: int, timeout_s: float) -> PortProbe:
    if address is None:
        return PortProbe("unresolved", None, None)
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError as e:
        return PortProbe("refused", e.errno, e.strerror)
    except TimeoutError:
        return PortProbe("timeout", errno.ETIMEDOUT, None)
    except OSError as e:
        if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return PortProbe("unreachable", e.errno, e.strerror)
        return PortProbe("error", e.errno, e.strerror)
    return PortProbe("open", None, None)


def gather(master_host: str, port: int, connect_timeout_s: float, env=None) -> Facts:
    """Everything the rules read, for this machine (or network namespace)."""
    ifaces, if_err = interfaces()
    addrs = resolve(master_host)
    address = addrs[0] if addrs else None
    route = route_to(address) if address else {"dev": None, "src": None, "gateway": None, "type": None}
    route.setdefault("error", None)
    if route["dev"] is None and route["src"]:  # no iproute2: the interface that holds the source address
        owners = (i["name"] for i in ifaces for a in i["addresses"] if a["address"] == route["src"])
        route["dev"] = next(owners, None)
    name = socket.gethostname()
    name_addrs = resolve_ipv4(name)
    master_tcp, name_tcp = torchrun_lookups(master_host, name)
    return Facts(
        env=dict(os.environ if env is None else env),
        interfaces=ifaces,
        interfaces_error=if_err,
        master_host=master_host,
        master_port=port,
        master_addresses=addrs,
        route=route,
        hostname=name,
        hostname_addresses=name_addrs,
        hostname_bindable=[a for a in name_addrs if _bindable(socket.AF_INET, (a, 0))],
        gloo_default=first_bindable(name),
        master_tcp_addresses=master_tcp,
        hostname_tcp=name_tcp,
        port=connect(address, port, connect_timeout_s),
    )
