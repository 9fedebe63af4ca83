"""The doctor's rules, pure (realrun/netrules.py, realrun/findings.py): which interface gloo and
NCCL pick, whether torchrun hosts the store here, what each port answer means, and the whole
verdict, on hand-made facts: the interface rows and resolver answers a machine would give.
`tests/test_doctor.py` runs the same rules on this machine and in network namespaces."""

import pytest
from conftest import free_port

from realrun import doctor, findings, netrules, nodes
from realrun.hostfacts import Facts, PortProbe

NODE, PEER = "10.77.0.1", "10.77.0.2"  # as the namespace lab's in tests/test_doctor.py


def _ifc(name: str, kind: str, *cidrs: str) -> dict:
    """An interfaces() row with only what the rules read."""
    addrs = [c.split("/") for c in cidrs]
    fams = ["inet6" if ":" in a else "inet" for a, _ in addrs]
    return {
        "name": name,
        "kind": kind,
        "addresses": [{"address": a, "prefixlen": int(n), "family": f} for (a, n), f in zip(addrs, fams, strict=True)],
    }


# The seed's failure: a VPN before the wired link by index, and a docker bridge.
SEED = [
    _ifc("lo", "loopback", "127.0.0.1/8", "::1/128"),
    _ifc("tun0", "tunnel/VPN", "10.8.0.2/24"),
    _ifc("docker0", "bridge/docker", "172.17.0.1/16"),
    _ifc("veth0", "veth", f"{NODE}/24", "fe80::1/64"),
    _ifc("ifb0", "other"),
]


def test_owner_of():
    assert netrules.owner_of(NODE, SEED) == "veth0"
    assert netrules.owner_of("127.0.1.1", SEED) == "lo"  # 127/8 is lo's, listed or not
    assert netrules.owner_of("127.0.1.1", SEED[1:]) == "lo"
    assert netrules.owner_of(PEER, SEED) is None and netrules.owner_of(None, SEED) is None


@pytest.mark.parametrize(
    "prefixes,want",
    [
        ("eth", ["eth0", "eth1"]),
        ("^docker,lo", ["tun0", "eth0", "eth1"]),
        ("=eth", []),
        ("=eth1", ["eth1"]),
        ("^=eth0,lo", ["tun0", "docker0", "eth1"]),
        ("eth1:1234", ["eth1"]),
    ],
)
def test_nccl_prefix_rules(prefixes, want):
    # getifaddrs order: every IPv4 address by interface index, then IPv6.
    entries = [
        ("lo", "127.0.0.1"),
        ("tun0", "10.8.0.2"),
        ("docker0", "172.17.0.1"),
        ("eth0", "192.168.1.5"),
        ("eth1", "10.0.0.5"),
    ]
    assert [n for n, _ in netrules._nccl_find(prefixes, entries)] == want


@pytest.mark.parametrize(
    "ifaces,env,interfaces,rule",
    [
        (SEED, {}, ["tun0", "veth0"], "ib* first, else any but lo/docker*"),
        (SEED, {"NCCL_SOCKET_IFNAME": "v"}, ["tun0", "veth0"], "ib* first, else any but lo/docker*"),
        ([*SEED, _ifc("ib0", "InfiniBand", "10.9.0.1/16")], {}, ["ib0"], "ib* first"),
        (SEED, {"NCCL_COMM_ID": f"{PEER}:1234"}, ["veth0"], "ib* first, else NCCL_COMM_ID's subnet"),
        (  # the subnet gives one interface, the first in it
            [*SEED, _ifc("veth2", "veth", "10.77.0.3/24")],
            {"NCCL_COMM_ID": f"{PEER}:1234"},
            ["veth0"],
            "ib* first, else NCCL_COMM_ID's subnet",
        ),
        (
            SEED,
            {"NCCL_COMM_ID": "[fd00::9]:1234"},
            ["tun0", "veth0"],
            "ib* first, else NCCL_COMM_ID's subnet, else any but lo/docker*",
        ),
        (SEED, {"NCCL_COMM_ID": "node0:1234"}, ["tun0", "veth0"], "ib* first, else any but lo/docker*"),
        (SEED[:1] + SEED[2:3], {}, ["docker0"], "ib* first, else any but lo/docker*, else docker*"),
        (SEED[:1], {}, ["lo"], "ib* first, else any but lo/docker*, else docker*, else lo"),
    ],
)
def test_nccl_pick_unset(ifaces, env, interfaces, rule):
    p = netrules.nccl_pick(env, ifaces)
    assert p["env"] is None and p["interfaces"] == interfaces and p["interface"] == interfaces[0]
    assert p["rule"] == f"no NCCL_SOCKET_IFNAME: {rule}"


def test_nccl_pick_set_and_family():
    p = netrules.nccl_pick({"NCCL_SOCKET_IFNAME": "^tun,lo"}, SEED)
    assert p["env"] == "^tun,lo" and p["interfaces"] == ["docker0", "veth0"] and p["address"] == "172.17.0.1"
    assert p["rule"] == "NCCL_SOCKET_IFNAME=^tun,lo (prefix match; '^' excludes, '=' exact)"
    # AF_INET6: IPv6 addresses only, and never ::1.
    p = netrules.nccl_pick({"NCCL_SOCKET_IFNAME": "veth,lo", "NCCL_SOCKET_FAMILY": "AF_INET6"}, SEED)
    assert p["interfaces"] == ["veth0"] and p["address"] == "fe80::1"
    assert netrules.nccl_pick({"NCCL_SOCKET_IFNAME": "eth"}, SEED)["interface"] is None


def test_gloo_pick():
    p = netrules.gloo_pick({"GLOO_SOCKET_IFNAME": "veth0,docker0"}, SEED, "node", "127.0.1.1")
    assert p == {
        "env": "veth0,docker0",
        "rule": "GLOO_SOCKET_IFNAME=veth0,docker0 (a list: one device per name, round-robin)",
        "interfaces": ["veth0", "docker0"],
        "interface": "veth0",
        "address": NODE,
    }
    assert netrules.gloo_pick({"GLOO_SOCKET_IFNAME": "eth9"}, SEED, "node", None)["address"] is None
    # Unset (or one character): what the hostname resolves to and binds; 127.0.1.1 binds.
    for env in ({}, {"GLOO_SOCKET_IFNAME": "v"}):
        p = netrules.gloo_pick(env, SEED, "node", "127.0.1.1")
        assert p["env"] is None and p["interfaces"] == ["lo"] and p["address"] == "127.0.1.1"
        assert p["rule"] == "no GLOO_SOCKET_IFNAME: binds what hostname 'node' resolves to (127.0.1.1)"
    p = netrules.gloo_pick({}, SEED, "node", None)
    assert p["interface"] == "lo" and p["address"] == "127.0.0.1"
    assert p["rule"] == "no GLOO_SOCKET_IFNAME: hostname 'node' gives no bindable address -> loopback"


@pytest.mark.parametrize(
    "env,node_if,single,ok,problem,fix",
    [
        ({"GLOO_SOCKET_IFNAME": "veth0"}, "veth0", False, True, None, None),
        (
            {},
            "veth0",
            False,
            False,
            "gloo would use lo (127.0.1.1), but the master is reached through veth0: "
            "the other nodes connect to 127.0.1.1 and init hangs with no error",
            "export GLOO_SOCKET_IFNAME=veth0",
        ),
        ({}, "lo", True, True, None, None),
        ({}, "veth0", True, True, None, None),  # one machine: any local address will do
        ({}, None, False, False, "gloo would use lo, but no route to the master was found to compare with", None),
        (
            {"GLOO_SOCKET_IFNAME": "eth0"},
            "veth0",
            True,
            False,
            "GLOO_SOCKET_IFNAME names 'eth0', which this machine does not have: gloo fails at init",
            "export GLOO_SOCKET_IFNAME=veth0",
        ),
        (
            {"GLOO_SOCKET_IFNAME": "ifb0"},
            "veth0",
            False,
            False,
            "GLOO_SOCKET_IFNAME names ifb0, which has no address: gloo fails at init",
            "export GLOO_SOCKET_IFNAME=veth0",
        ),
    ],
)
def test_judge_gloo(env, node_if, single, ok, problem, fix):
    p = netrules.gloo_pick(env, SEED, "node", "127.0.1.1")
    netrules.judge(p, "GLOO_SOCKET_IFNAME", node_if, single, SEED)
    assert (p["routed"], p["ok"], p["problem"], p["fix"]) == (p["interface"] == node_if, ok, problem, fix)


def test_judge_nccl_finds_nothing():
    p = netrules.nccl_pick({"NCCL_SOCKET_IFNAME": "=veth"}, SEED)
    netrules.judge(p, "NCCL_SOCKET_IFNAME", "veth0", False, SEED)
    assert not p["ok"] and p["fix"] == "export NCCL_SOCKET_IFNAME=veth0"
    assert p["problem"] == f"nccl finds no interface with an address ({p['rule']}): init fails"


@pytest.mark.parametrize(
    "host,host_ips,mine,want",
    [
        ("localhost", [], None, True),
        ("127.0.0.5", [], None, True),
        ("node", [], None, True),  # the hostname itself
        (PEER, [PEER], None, False),  # this hostname does not resolve
        (NODE, [NODE], [("node", "127.0.1.1")], False),  # the seed's 127.0.1.1: "not the host"
        (NODE, [NODE], [("node", NODE)], True),
        ("node.lan", [], [("node.lan", "127.0.1.1")], True),  # the canonical name
        ("master", [NODE], [("", NODE)], True),  # an address in common
    ],
)
def test_torchrun_detects_host(host, host_ips, mine, want):
    assert netrules.torchrun_detects_host(host, "node", host_ips, mine) is want


@pytest.mark.parametrize(
    "probe,is_host,detail",
    [
        (PortProbe("unresolved", None, None), False, "unresolved (the master name does not resolve)"),
        (
            PortProbe("refused", 111, "Connection refused"),
            False,
            "refused (reachable, nothing listening yet — start the rendezvous host first)",
        ),
        (
            PortProbe("refused", 111, "Connection refused"),
            True,
            "refused (nothing listening yet; this node is the rendezvous host: its torchrun opens it)",
        ),
        (
            PortProbe("timeout", 110, None),
            False,
            "timeout (dropped: a firewall? ufw allow from 10.77.0.0/24 / iptables)",
        ),
        (PortProbe("unreachable", 101, "Network is unreachable"), False, "unreachable (no route)"),
        (PortProbe("error", 13, "Permission denied"), False, "error (Permission denied)"),
        (PortProbe("open", None, None), False, "open"),
        (
            PortProbe("open", None, None),
            True,
            "open (something already listens here: torchrun's store cannot bind this port)",
        ),
    ],
)
def test_port_check_words(probe, is_host, detail):
    subnet = findings._subnet(NODE, SEED)
    assert subnet == "10.77.0.0/24" and findings._subnet(None, SEED) == "<this node's subnet>"
    assert findings.port_check(probe, subnet, is_host) == {
        "status": probe.status,
        "detail": detail,
        "errno": probe.errno,
    }


def test_hostname_info():
    h = findings.hostname_info("node", ["127.0.1.1"], ["127.0.1.1"], SEED, False, NODE)
    assert h["addresses"] == [{"address": "127.0.1.1", "local": True, "interface": "lo"}] and h["loopback"]
    assert h["warning"] == (
        "hostname 'node' resolves to 127.0.1.1 (loopback): torchrun publishes it as this node's address and "
        f"gloo binds it, so other nodes cannot connect and init hangs; pass --local-addr {NODE} and set "
        "GLOO_SOCKET_IFNAME"
    )
    assert findings.hostname_info("node", ["127.0.1.1"], [], SEED, True, "127.0.0.1")["warning"] is None
    h = findings.hostname_info("node", [], [], SEED, False, None)
    assert h["warning"] == (
        "hostname 'node' does not resolve: torchrun publishes it as this node's address; "
        "pass --local-addr <this node address>"
    )
    h = findings.hostname_info("node", [PEER], [], SEED, False, NODE)
    assert h["addresses"] == [{"address": PEER, "local": False, "interface": None}]
    assert h["warning"] == f"hostname 'node' resolves to {PEER}, none of them on this machine"
    h = findings.hostname_info("node", [PEER], [PEER], SEED, False, NODE)  # binds: on this machine
    assert h["addresses"][0]["local"] and h["warning"] is None


def _facts(master: str, address: str | None, route_dev: str | None, **kw) -> Facts:
    route = {"dev": route_dev, "src": NODE if route_dev else None, "gateway": None, "type": "unicast", "error": None}
    base = dict(
        env={},
        interfaces=SEED,
        interfaces_error=None,
        master_host=master,
        master_port=29500,
        master_addresses=[address] if address else [],
        route=route,
        hostname="node",
        hostname_addresses=["127.0.1.1"],
        hostname_bindable=["127.0.1.1"],
        gloo_default="127.0.1.1",
        master_tcp_addresses=[address] if address else [],
        hostname_tcp=[("node", "127.0.1.1")],
        port=PortProbe("refused", 111, "Connection refused"),
    )
    return Facts(**{**base, **kw})


def _verdict(facts: Facts) -> dict:
    return findings.from_facts(facts, nnodes=2, nproc_per_node=1, verb_args=list(nodes.DEFAULT_VERB_ARGS))


def test_from_facts_seed_failure():
    d = _verdict(_facts(PEER, PEER, "veth0"))
    assert ["schema", *d] == list(doctor.diagnose("127.0.0.1", free_port(), connect_timeout_s=1.0))
    assert d["node"] == {"interface": "veth0", "address": NODE} and not d["master"]["local"]
    assert (d["gloo"]["interface"], d["nccl"]["interface"]) == ("lo", "tun0")
    assert [p.split(":")[0] for p in d["problems"]] == ["gloo", "nccl", "hostname"]
    want = {"is_host": False, "torchrun_detects_host": False, "problem": None, "warning": None, "note": None}
    assert d["rendezvous"] == want
    assert d["settings"]["torchrun"] == (
        "GLOO_SOCKET_IFNAME=veth0 NCCL_SOCKET_IFNAME=veth0 torchrun --nnodes=2 --nproc-per-node=1 "
        f"--rdzv-backend=c10d --rdzv-endpoint={PEER}:29500 --local-addr={NODE} -m realrun train --out runs/multinode"
    )
    # Pinned: both libraries on the routed interface, the hostname the only problem left.
    d = _verdict(_facts(PEER, PEER, "veth0", env={"GLOO_SOCKET_IFNAME": "veth0", "NCCL_SOCKET_IFNAME": "veth0"}))
    assert d["gloo"]["ok"] and d["nccl"]["ok"] and [p.split(":")[0] for p in d["problems"]] == ["hostname"]


def test_a_loopback_master_says_every_node_stays_on_this_machine():
    """`doctor --master 127.0.0.1:29500` for 2 nodes reported no problem and printed a torchrun
    line with a loopback endpoint, which no second machine can reach. It is right for a test of
    both nodes on one machine, so it is a note, not a problem: what it means, and the address to
    give for two machines (NCCL's pick, which skips lo)."""
    d = findings.from_facts(_facts("127.0.0.1", "127.0.0.1", "lo"), nnodes=2, nproc_per_node=1,
                            verb_args=list(nodes.DEFAULT_VERB_ARGS))  # fmt: skip
    assert d["rendezvous"]["note"] == (
        f"127.0.0.1 is loopback, so all 2 nodes must run on this machine; for 2 machines give --master an"
        f" address the others reach, e.g. this node's {d['nccl']['interface']} {d['nccl']['address']}"
    )
    assert d["nccl"]["interface"] != "lo" and not any("loopback, so" in p for p in d["problems"])
    one = findings.from_facts(_facts("127.0.0.1", "127.0.0.1", "lo"), nnodes=1, nproc_per_node=2,
                              verb_args=list(nodes.DEFAULT_VERB_ARGS))  # fmt: skip
    assert one["rendezvous"]["note"] is None
    real = doctor.diagnose("127.0.0.1", free_port(), connect_timeout_s=1.0)  # this machine, as the command runs
    assert ("  note: " + real["rendezvous"]["note"]) in doctor.format_report(real)


def test_from_facts_rendezvous_and_port():
    # The master's address is ours: we host the store, but the hostname says otherwise.
    d = _verdict(_facts(NODE, NODE, "lo", port=PortProbe("open", None, None)))
    assert d["master"]["local"] and d["node"] == {"interface": "veth0", "address": NODE}
    assert d["rendezvous"]["is_host"] and not d["rendezvous"]["torchrun_detects_host"]
    assert "pass --rdzv-conf=is_host=1" in d["rendezvous"]["problem"]
    assert "--rdzv-conf=is_host=1" in d["settings"]["torchrun"]
    assert d["problems"][-2:] == [
        f"rendezvous: {d['rendezvous']['problem']}",
        "port 29500: open (something already listens here: torchrun's store cannot bind this port)",
    ]
    # The endpoint is this hostname but its address is elsewhere: torchrun would host here.
    d = _verdict(_facts("node", PEER, "veth0"))
    assert d["rendezvous"]["problem"] == "torchrun would host the store here, but node is not on this machine"
    # Unresolved: no route, no port check, no interface to pin or address to publish.
    d = _verdict(_facts("nosuch.invalid", None, None, port=PortProbe("unresolved", None, None)))
    assert d["master"]["error"] == "'nosuch.invalid' does not resolve to an address"
    assert d["problems"][0] == f"master: {d['master']['error']}"
    assert d["problems"][-1] == "port 29500: unresolved (the master name does not resolve)"
    assert d["settings"]["env"] == {} and "--local-addr" not in d["settings"]["torchrun"]
