"""`ddplab doctor`: real interfaces, real sockets, real network namespaces; no mocks.

The rules (realrun.netrules, realrun.findings) are pure, and tests/test_netrules.py
holds them to hand-made facts; here they run on this machine's. The namespace tests
build the seed's failure in miniature: a node whose VPN (tun0) comes before its wired
link, with a docker0 bridge and a hostname mapped to 127.0.1.1, and check that the
doctor names each wrong pick and the fix.
"""

import errno
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, free_port

from realrun import doctor, hostfacts
from realrun.hostfacts import PortProbe

HAVE_IP = shutil.which("ip") is not None
ROOTED = hasattr(os, "geteuid") and os.geteuid() == 0
needs_netns = pytest.mark.skipif(
    not (ROOTED and HAVE_IP),
    reason="network namespaces need root and iproute2 (`ip`)",
)
IPTABLES = shutil.which("iptables") or ("/usr/sbin/iptables" if Path("/usr/sbin/iptables").exists() else None)
NODE, PEER, OFF_LINK = "10.77.0.1", "10.77.0.2", "10.66.0.2"


def test_documented_keys_are_the_json_keys():
    d = doctor.diagnose("127.0.0.1", free_port(), connect_timeout_s=1.0)
    rows = re.findall(r"^    ([a-z]+(?:, [a-z]+)*) {2,}", doctor.__doc__, flags=re.MULTILINE)
    documented = [k for row in rows for k in row.split(", ")]
    assert set(documented) == set(d), (documented, sorted(d))
    assert d["schema"] == doctor.SCHEMA
    assert json.loads(json.dumps(d)) == d


def test_loopback_master_here_is_refused_until_someone_listens():
    port = free_port()
    d = doctor.diagnose("127.0.0.1", port, connect_timeout_s=1.0)
    lo = next(i for i in d["interfaces"] if i["name"] == "lo")
    assert lo["kind"] == "loopback"
    assert "127.0.0.1" in [a["address"] for a in lo["addresses"]]
    assert d["port"]["status"] == "refused"
    assert d["master"]["local"] and d["master"]["loopback"] and d["master"]["interface"] == "lo"
    assert d["node"] == {"interface": "lo", "address": "127.0.0.1"}
    if HAVE_IP:
        assert d["route"]["dev"] == "lo" and d["route"]["src"] == "127.0.0.1"
    # One machine: nothing to pin, this node hosts the store.
    s = d["settings"]
    assert s["env"] == {}
    assert f"--rdzv-endpoint=127.0.0.1:{port}" in s["torchrun"]
    assert "--rdzv-conf=is_host=1" in s["torchrun"] and "--local-addr=127.0.0.1" in s["torchrun"]
    assert s["torchrun_argv"][0] == "torchrun" and s["torchrun_argv"][-3:] == [
        "train",
        "--out",
        "runs/multinode",
    ]
    # Every rank on this machine reaches any local address: not a problem for either library.
    assert d["gloo"]["ok"] and d["nccl"]["ok"]
    assert not any(p.startswith(("gloo", "nccl", "port")) for p in d["problems"])


def test_listening_port_is_open():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        d = doctor.diagnose("127.0.0.1", port, connect_timeout_s=1.0)
    assert d["port"]["status"] == "open"
    # On the rendezvous host itself, a listener before launch means torchrun cannot bind.
    assert any(p.startswith(f"port {port}") and "cannot bind" in p for p in d["problems"])


def test_report_names_each_part():
    d = doctor.diagnose("127.0.0.1", free_port(), connect_timeout_s=1.0, nnodes=3, nproc_per_node=2)
    text = "\n".join(doctor.format_report(d))
    for part in ("interface", "loopback", "route to 127.0.0.1", "gloo:", "nccl:", "hostname", "port "):
        assert part in text, part
    assert "--nnodes=3 --nproc-per-node=2" in text


def test_gather_reads_this_machine():
    port = free_port()
    f = hostfacts.gather("127.0.0.1", port, 1.0, env={"NCCL_SOCKET_IFNAME": "lo"})
    assert f.master_addresses == ["127.0.0.1"] and f.master_port == port
    assert f.env == {"NCCL_SOCKET_IFNAME": "lo"}
    assert f.port == PortProbe("refused", errno.ECONNREFUSED, os.strerror(errno.ECONNREFUSED))
    assert set(f.hostname_bindable) <= set(f.hostname_addresses)
    assert hostfacts.connect(None, port, 1.0) == PortProbe("unresolved", None, None)


HAVE_IFCONFIG = shutil.which("ifconfig") is not None

# `ifconfig -a` as macOS prints it (its shape on Sonoma: a tab before each detail line, hex
# netmasks, scoped link-local addresses, a status line); the addresses are documentation ones.
MACOS_IFCONFIG = """lo0: flags=8049<UP,LOOPBACK,RUNNING,MULTICAST> mtu 16384
\toptions=1203<RXCSUM,TXCSUM,TXSTATUS,SW_TIMESTAMP>
\tinet 127.0.0.1 netmask 0xff000000
\tinet6 ::1 prefixlen 128
\tinet6 fe80::1%lo0 prefixlen 64 scopeid 0x1
\tnd6 options=201<PERFORMNUD,DAD>
en0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\toptions=6460<TSO4,TSO6,CHANNEL_IO,PARTIAL_CSUM,ZEROINVERT_CSUM>
\tether 3c:22:fb:00:00:01
\tinet6 fe80::14c3:9a2e:1b7f:6d10%en0 prefixlen 64 secured scopeid 0xb
\tinet 192.168.1.23 netmask 0xffffff00 broadcast 192.168.1.255
\tnd6 options=201<PERFORMNUD,DAD>
\tmedia: autoselect
\tstatus: active
en1: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tether 36:00:00:00:00:02
\tmedia: autoselect <full-duplex>
\tstatus: inactive
utun0: flags=8051<UP,POINTOPOINT,RUNNING,MULTICAST> mtu 1380
\tinet6 fe80::ce81:b1c:bd2c:69e%utun0 prefixlen 64 scopeid 0xf
\tnd6 options=201<PERFORMNUD,DAD>
"""


def test_ifconfig_as_macos_prints_it():
    """The seed's second machine is a Mac: no iproute2, so the doctor reads `ifconfig -a`."""
    rows = {r["name"]: r for r in hostfacts.parse_ifconfig(MACOS_IFCONFIG)}
    assert list(rows) == ["lo0", "en0", "en1", "utun0"]
    assert [rows[n]["kind"] for n in rows] == ["loopback", "other", "other", "tunnel/VPN"]
    assert [rows[n]["state"] for n in rows] == ["UP", "UP", "DOWN", "UP"]  # en1: up but inactive
    assert [rows[n]["mtu"] for n in rows] == [16384, 1500, 1500, 1380]
    assert rows["en0"]["addresses"] == [
        {"address": "fe80::14c3:9a2e:1b7f:6d10", "prefixlen": 64, "family": "inet6"},
        {"address": "192.168.1.23", "prefixlen": 24, "family": "inet"},
    ]
    assert rows["lo0"]["addresses"][0] == {"address": "127.0.0.1", "prefixlen": 8, "family": "inet"}
    assert rows["en1"]["addresses"] == []


@pytest.mark.skipif(not (HAVE_IP and HAVE_IFCONFIG), reason="compares iproute2's view with ifconfig's: needs both")
def test_ifconfig_reads_what_iproute2_reads_here():
    """This machine's real `ifconfig -a` (net-tools prints the BSD shape) gives every interface
    iproute2 lists, with the same MTU, up/down and addresses."""
    ip_rows, err = hostfacts.interfaces()
    assert err is None
    out = subprocess.run(["ifconfig", "-a"], capture_output=True, text=True, check=True).stdout
    by_ifconfig = {r["name"]: r for r in hostfacts.parse_ifconfig(out)}
    assert set(by_ifconfig) == {r["name"] for r in ip_rows}
    for r in ip_rows:
        mine = by_ifconfig[r["name"]]
        assert mine["mtu"] == r["mtu"] and mine["index"] == r["index"]
        assert (mine["state"] == "UP") is (r["state"] in ("UP", "UNKNOWN")), r["name"]  # lo: UNKNOWN to ip
        assert sorted(map(str, mine["addresses"])) == sorted(map(str, r["addresses"])), r["name"]


@pytest.mark.skipif(not (HAVE_IP and HAVE_IFCONFIG), reason="runs the doctor with and without iproute2: needs both")
def test_without_iproute2_the_doctor_finds_the_same_route_and_picks(tmp_path):
    """`ip` hidden from PATH, ifconfig left: the route's interface (from the kernel's source
    address), the node's interface, gloo's and NCCL's picks and the problems are iproute2's."""
    (tmp_path / "ifconfig").symlink_to(shutil.which("ifconfig"))
    argv = [sys.executable, "-m", "ddplab", "doctor", "--master", f"192.0.2.77:{free_port()}", "--json"]
    argv += ["--timeout-s", "0.5"]
    runs = []
    for path in (os.environ["PATH"], str(tmp_path)):
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PATH": path})
        assert p.returncode in (0, 1), p.stderr
        runs.append(json.loads(p.stdout))
    with_ip, without = runs
    assert without["route"]["dev"] == with_ip["route"]["dev"] and without["route"]["src"] == with_ip["route"]["src"]
    assert without["node"] == with_ip["node"]
    for lib in ("gloo", "nccl"):
        assert without[lib]["interface"] == with_ip[lib]["interface"], lib
    assert without["problems"] == with_ip["problems"]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--master", "10.0.0.1"], "10.0.0.1"),
        (["--master", "10.0.0.1:0"], "0"),
        (["--master", "10.0.0.1:65536"], "65536"),
        (["--master", "10.0.0.1:http"], "10.0.0.1:http"),
        (["--master", "10.0.0.1:29500", "--nnodes", "0"], "--nnodes"),
        (["--master", "10.0.0.1:29500", "--nproc-per-node", "0"], "--nproc-per-node"),
    ],
)
def test_bad_master_is_one_line_exit_2(ddplab, argv, needle):
    code, _, err = ddplab("doctor", *argv)
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_cli_json_is_diagnose(ddplab):
    port = free_port()
    code, out, err = ddplab("doctor", "--master", f"127.0.0.1:{port}", "--json", "--timeout-s", "1")
    assert code == 0, err
    d = json.loads(out)
    assert d["schema"] == doctor.SCHEMA and d["port"]["status"] == "refused"


# --- a real two-namespace lab -------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")
    return p


class Lab:
    def __init__(self, node: str, peer: str):
        self.node, self.peer = node, peer

    def hosts(self, ns: str, address: str) -> None:
        """What the hostname resolves to inside ``ns`` (`ip netns exec` mounts this file)."""
        d = Path("/etc/netns") / ns
        d.mkdir(parents=True, exist_ok=True)
        (d / "hosts").write_text(f"127.0.0.1 localhost\n{address} {socket.gethostname()}\n")

    def exec(self, ns: str, argv: list[str], env: dict | None = None, **kw) -> subprocess.CompletedProcess:
        base = {k: v for k, v in os.environ.items() if not k.endswith("_SOCKET_IFNAME")}
        base["PYTHONPATH"] = str(ROOT)
        return subprocess.run(
            ["ip", "netns", "exec", ns, *argv],
            env={**base, **(env or {})},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            **kw,
        )

    def doctor(self, ns: str, master: str, port: int, env: dict | None = None, timeout_s: float = 1.0):
        argv = [sys.executable, "-m", "realrun.doctor", "--master", f"{master}:{port}", "--json"]
        p = self.exec(ns, [*argv, "--timeout-s", str(timeout_s)], env)
        report = json.loads(p.stdout)
        # The exit status says whether it found problems: 1 with some, 0 without (2: bad input).
        assert p.returncode == (1 if report["problems"] else 0), p.stderr
        return report


@pytest.fixture
def lab():
    """node: lo, tun0 10.8.0.2 (index first, link down, like a VPN), docker0 172.17.0.1,
    veth0 10.77.0.1 -- peer: veth1 10.77.0.2. Both hostnames map to 127.0.1.1."""
    if not (ROOTED and HAVE_IP):
        pytest.skip("network namespaces need root and iproute2 (`ip`)")
    tag = uuid.uuid4().hex[:6]
    node, peer = f"ddplabtest-{tag}-n", f"ddplabtest-{tag}-p"
    try:
        if _ip("netns", "add", node, check=False).returncode != 0:
            pytest.skip("cannot create a network namespace here (`ip netns add` failed)")
        _ip("netns", "add", peer)
        for ns in (node, peer):
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", node, "tuntap", "add", "dev", "tun0", "mode", "tun")
        _ip("-n", node, "addr", "add", "10.8.0.2/24", "dev", "tun0")
        _ip("-n", node, "link", "add", "docker0", "type", "bridge")
        _ip("-n", node, "addr", "add", "172.17.0.1/16", "dev", "docker0")
        _ip("-n", node, "link", "set", "docker0", "up")
        _ip("-n", node, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", peer)
        _ip("-n", node, "addr", "add", f"{NODE}/24", "dev", "veth0")
        _ip("-n", peer, "addr", "add", f"{PEER}/24", "dev", "veth1")
        _ip("-n", node, "link", "set", "veth0", "up")
        _ip("-n", peer, "link", "set", "veth1", "up")
        lab = Lab(node, peer)
        lab.hosts(node, "127.0.1.1")
        lab.hosts(peer, "127.0.1.1")
        yield lab
    finally:
        for ns in (node, peer):
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)


@needs_netns
def test_namespace_kinds_route_and_wrong_picks(lab):
    port = free_port()
    d = lab.doctor(lab.node, PEER, port)
    kinds = {i["name"]: i["kind"] for i in d["interfaces"]}
    assert kinds == {"lo": "loopback", "tun0": "tunnel/VPN", "docker0": "bridge/docker", "veth0": "veth"}
    assert d["route"]["dev"] == "veth0" and d["route"]["src"] == NODE
    assert d["node"] == {"interface": "veth0", "address": NODE}
    assert not d["master"]["local"]
    # NCCL, unset: docker0 and lo are skipped but the VPN comes first by index.
    nccl = d["nccl"]
    assert nccl["env"] is None and nccl["interface"] == "tun0" and nccl["interfaces"] == ["tun0", "veth0"]
    assert not nccl["routed"] and nccl["fix"] == "export NCCL_SOCKET_IFNAME=veth0"
    assert "tun0" in nccl["problem"] and "veth0" in nccl["problem"]
    # gloo, unset: the hostname's 127.0.1.1 binds, so gloo listens on loopback.
    gloo = d["gloo"]
    assert gloo["interface"] == "lo" and gloo["address"] == "127.0.1.1" and not gloo["routed"]
    assert gloo["fix"] == "export GLOO_SOCKET_IFNAME=veth0"
    h = d["hostname"]
    assert h["loopback"] and f"--local-addr {NODE}" in h["warning"]
    assert d["port"]["status"] == "refused"
    s = d["settings"]
    assert s["env"] == {"GLOO_SOCKET_IFNAME": "veth0", "NCCL_SOCKET_IFNAME": "veth0"}
    assert f"--rdzv-endpoint={PEER}:{port}" in s["torchrun"]
    assert f"--local-addr={NODE}" in s["torchrun"] and "is_host" not in s["torchrun"]
    assert s["torchrun"].startswith("GLOO_SOCKET_IFNAME=veth0 NCCL_SOCKET_IFNAME=veth0 torchrun ")


@needs_netns
def test_namespace_env_choices(lab):
    port = free_port()
    gloo = lab.doctor(lab.node, PEER, port, {"GLOO_SOCKET_IFNAME": "docker0"})["gloo"]
    assert gloo["env"] == "docker0" and gloo["interface"] == "docker0" and gloo["address"] == "172.17.0.1"
    assert not gloo["routed"] and not gloo["ok"]
    assert "docker0" in gloo["problem"] and "veth0" in gloo["problem"]
    assert gloo["fix"] == "export GLOO_SOCKET_IFNAME=veth0"

    d = lab.doctor(lab.node, PEER, port, {"GLOO_SOCKET_IFNAME": "veth0,docker0", "NCCL_SOCKET_IFNAME": "veth"})
    assert d["gloo"]["interfaces"] == ["veth0", "docker0"] and d["gloo"]["routed"]
    assert d["nccl"]["interface"] == "veth0" and d["nccl"]["routed"] and d["nccl"]["fix"] is None

    nccl = lab.doctor(lab.node, PEER, port, {"NCCL_SOCKET_IFNAME": "^tun,lo"})["nccl"]
    assert nccl["interfaces"] == ["docker0", "veth0"] and not nccl["routed"]  # excluded tun; docker0 stays

    nccl = lab.doctor(lab.node, PEER, port, {"NCCL_SOCKET_IFNAME": "=veth"})["nccl"]
    assert nccl["interface"] is None and "no interface" in nccl["problem"]

    gloo = lab.doctor(lab.node, PEER, port, {"GLOO_SOCKET_IFNAME": "eth0"})["gloo"]
    assert "does not have" in gloo["problem"]


@needs_netns
def test_namespace_hostname_on_the_wired_address(lab):
    lab.hosts(lab.node, NODE)
    d = lab.doctor(lab.node, PEER, free_port())
    assert d["gloo"]["interface"] == "veth0" and d["gloo"]["routed"] and d["gloo"]["problem"] is None
    assert d["hostname"]["addresses"] == [{"address": NODE, "local": True, "interface": "veth0"}]
    assert d["hostname"]["warning"] is None


@needs_netns
def test_namespace_rendezvous_host(lab):
    port = free_port()
    d = lab.doctor(lab.peer, PEER, port)
    assert d["master"]["local"] and d["master"]["interface"] == "veth1"
    assert d["route"]["dev"] == "lo"  # the kernel's answer for its own address ...
    assert d["node"] == {"interface": "veth1", "address": PEER}  # ... but peers reach it on veth1
    assert d["settings"]["env"] == {"GLOO_SOCKET_IFNAME": "veth1", "NCCL_SOCKET_IFNAME": "veth1"}
    assert "--rdzv-conf=is_host=1" in d["settings"]["torchrun"]
    assert f"--local-addr={PEER}" in d["settings"]["torchrun"]
    # The hostname maps to 127.0.1.1, so torchrun's own guess would say "not the host".
    assert d["rendezvous"] == {
        "is_host": True,
        "torchrun_detects_host": False,
        "problem": d["rendezvous"]["problem"],
        "warning": None,  # the lab's addresses are private: the store is not exposed
        "note": None,
    }
    assert "is_host=1" in d["rendezvous"]["problem"]


@needs_netns
def test_namespace_open_port(lab):
    port = free_port()
    code = (
        "import socket, sys, time\n"
        f"s = socket.create_server(('{PEER}', {port}))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    listener = subprocess.Popen(
        ["ip", "netns", "exec", lab.peer, sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    )
    try:
        assert listener.stdout.readline().strip() == "ready"
        d = lab.doctor(lab.node, PEER, port)
        assert d["port"]["status"] == "open" and d["port"]["detail"] == "open"
    finally:
        listener.kill()
        listener.wait()


@needs_netns
def test_namespace_firewall_drop_is_a_timeout(lab):
    if not IPTABLES:
        pytest.skip("iptables not installed (looked on PATH and at /usr/sbin/iptables)")
    port = free_port()
    rule = lab.exec(lab.peer, [IPTABLES, "-A", "INPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP"])
    if rule.returncode != 0:
        pytest.skip(f"iptables cannot add a rule in a namespace here: {rule.stderr.strip()}")
    d = lab.doctor(lab.node, PEER, port, timeout_s=1.0)
    assert d["port"]["status"] == "timeout"
    assert "ufw allow from 10.77.0.0/24" in d["port"]["detail"]
    assert any(p.startswith(f"port {port}: timeout") for p in d["problems"])


@needs_netns
def test_namespace_no_route(lab):
    d = lab.doctor(lab.node, OFF_LINK, free_port())
    assert d["route"]["dev"] is None and d["route"]["error"]
    assert d["port"]["status"] == "unreachable"
    assert any(p.startswith("route:") for p in d["problems"])
