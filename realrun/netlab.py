"""netlab: a home lab of N hosts on one Linux box.

Each host is a network namespace with one interface, ``eth0``, joined through a
switch namespace (a bridge) to the others. Every link is shaped with ``tc``:
``tbf`` for the rate, at both ends so each direction is limited (a host's own
rate applies to its link both ways, like a laptop on Wi-Fi), and ``netem`` for
delay, jitter and loss where the kernel has it. Optional decoys inside a host —
a docker0-like bridge and a VPN-like tun — are what interface auto-detection can
wrongly pick. ``ip netns exec`` bind-mounts ``/etc/netns/<ns>/hosts`` over
/etc/hosts, which is how a host's name is made to resolve to its eth0, to a
decoy, or (unmapped) to 127.0.0.1 outside it: the seed's discovery failures.

Why the ``ip`` and ``tc`` commands rather than pyroute2: they are what a user
types on real machines to look at the same things, so every step we take can be
printed and repeated by hand; they need no extra dependency; and their errors
are already the words the user will search for. The cost, a process per call,
is a few milliseconds at set-up only.

Everything is named ``ddplab-<lab>-...``; ``down`` removes only those names, so
interfaces and namespaces we did not create are never touched.
"""

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

PREFIX = "ddplab-"
STATE_DIR = Path("/run/ddplab-netlab")
NETNS_ETC = Path("/etc/netns")
DECOYS = ("docker0", "tun0")
RESOLVE_TO = ("eth0", "docker0", "outside")
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit)$")
_TIME = re.compile(r"^\d+(\.\d+)?(us|ms|s)$")


@dataclass(frozen=True, kw_only=True)
class LabSpec:
    name: str = "lab"
    """Lab id: namespaces are ddplab-<name>-h<i> and ddplab-<name>-sw."""
    hosts: int = 2
    rate: str = "1gbit"
    """Link rate, tc syntax (200mbit, 1gbit, 10gbit)."""
    delay: str = "0ms"
    """One-way delay added at each end (netem)."""
    jitter: str = "0ms"
    loss_pct: float = 0.0
    host_rates: dict[int, str] = field(default_factory=dict)
    """Per-host link rate overriding ``rate`` (the Mac on Wi-Fi: {1: "300mbit"})."""
    decoys: tuple[str, ...] = ()
    """Decoy interfaces inside every host: docker0 (bridge), tun0 (VPN-like)."""
    resolve_to: str = "eth0"
    """What the hostname resolves to inside a host: eth0, docker0, or outside (127.0.0.1)."""
    subnet: int = 213
    """Hosts are 10.<subnet>.0.<i+1>/24."""

    def __post_init__(self):
        if not re.fullmatch(r"[a-z0-9]{1,8}", self.name):
            raise ValueError(f"--name: 1-8 lowercase letters or digits, got {self.name!r}")
        if not 2 <= self.hosts <= 16:
            raise ValueError(f"--hosts: between 2 and 16, got {self.hosts}")
        for key, value in [
            ("--rate", self.rate),
            *((f"--host-rate {i}", r) for i, r in self.host_rates.items()),
        ]:
            if not _RATE.match(value):
                raise ValueError(f"{key}: a tc rate like 200mbit or 1gbit, got {value!r}")
        for key, value in (("--delay", self.delay), ("--jitter", self.jitter)):
            if not _TIME.match(value):
                raise ValueError(f"{key}: a time like 0.1ms, got {value!r}")
        if not 0 <= self.loss_pct < 100:
            raise ValueError(f"--loss: a percentage in [0, 100), got {self.loss_pct}")
        for i in self.host_rates:
            if not 0 <= i < self.hosts:
                raise ValueError(f"--host-rate: host {i} out of range for {self.hosts} hosts")
        for d in self.decoys:
            if d not in DECOYS:
                raise ValueError(f"--decoy: one of {', '.join(DECOYS)}, got {d!r}")
        if self.resolve_to not in RESOLVE_TO:
            raise ValueError(f"--resolve-to: one of {', '.join(RESOLVE_TO)}, got {self.resolve_to!r}")
        if self.resolve_to == "docker0" and "docker0" not in self.decoys:
            raise ValueError("--resolve-to docker0 needs --decoy docker0")
        if not 1 <= self.subnet <= 254:
            raise ValueError(f"--subnet: 1..254, got {self.subnet}")

    def ns(self, host: int) -> str:
        return f"{PREFIX}{self.name}-h{host}"

    @property
    def switch_ns(self) -> str:
        return f"{PREFIX}{self.name}-sw"

    def address(self, host: int) -> str:
        return f"10.{self.subnet}.0.{host + 1}"

    def host_rate(self, host: int) -> str:
        return self.host_rates.get(host, self.rate)

    def needs_netem(self) -> bool:
        return self.delay not in ("0ms", "0us", "0s") or self.jitter not in ("0ms", "0us", "0s") or self.loss_pct > 0


class NetlabError(RuntimeError):
    """A command the lab needed failed (missing root, iproute2, a kernel feature)."""


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise NetlabError(f"{cmd[0]}: not found (netlab needs iproute2: ip, tc)") from None
    if check and p.returncode != 0:
        raise NetlabError(f"`{' '.join(cmd)}` failed: {p.stderr.strip() or p.stdout.strip()}")
    return p


def netem_available() -> bool:
    """Some kernels ship without sch_netem: then only the rate can be shaped."""
    probe = f"{PREFIX}probe"
    _run("ip", "netns", "add", probe, check=False)
    try:
        _run("ip", "-n", probe, "link", "add", "d0", "type", "dummy")
        return (
            _run(
                "tc", "-n", probe, "qdisc", "add", "dev", "d0", "root", "netem", "delay", "1ms", check=False
            ).returncode
            == 0
        )
    except NetlabError:
        return False
    finally:
        _run("ip", "netns", "del", probe, check=False)


def _shape(ns: str, dev: str, spec: LabSpec, rate: str, netem: bool) -> None:
    """Rate (tbf) at this end, with netem delay/jitter/loss above it when asked and available.
    tbf burst: 1 ms worth of the rate, at least 64 KB so TSO segments pass. A larger burst
    lets short transfers beat the rate (a 4 ms burst measured 11 Gbit/s on a 10gbit link)."""
    rate_bit = _rate_bits(rate)
    burst = max(64 * 1024, int(rate_bit / 8 / 1000))
    tbf = ["rate", rate, "burst", str(burst), "latency", "50ms"]
    if netem and spec.needs_netem():
        em = ["delay", spec.delay] + ([spec.jitter] if spec.jitter not in ("0ms", "0us", "0s") else [])
        em += ["loss", f"{spec.loss_pct}%"] if spec.loss_pct else []
        _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", *em)
        _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "tbf", *tbf)
    else:
        _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", *tbf)


def _rate_bits(rate: str) -> float:
    m = re.match(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)$", rate)
    scale = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[m.group(2)]
    return float(m.group(1)) * scale


@dataclass
class Lab:
    spec: LabSpec
    netem: bool
    notes: list[str]

    def state(self) -> dict:
        return {"spec": asdict(self.spec), "netem": self.netem, "notes": self.notes}

    def host_command(self, host: int, cmd: list[str], env: dict[str, str] | None = None, cpu: int | None = None):
        """argv that runs ``cmd`` inside host ``host`` (pinned to ``cpu`` when given)."""
        argv = ["ip", "netns", "exec", self.spec.ns(host)]
        if cpu is not None:
            argv += ["taskset", "-c", str(cpu)]
        if env:
            argv += ["env", *(f"{k}={v}" for k, v in env.items())]
        return argv + cmd


def up(spec: LabSpec) -> Lab:
    """Create the lab; on any failure remove what was created and raise."""
    if _run("ip", "netns", "list", check=False).stdout.find(spec.switch_ns) >= 0:
        raise NetlabError(f"lab {spec.name!r} is already up (ddplab netlab down --name {spec.name})")
    notes = []
    netem = netem_available() if spec.needs_netem() else False
    if spec.needs_netem() and not netem:
        notes.append("this kernel has no netem qdisc: delay, jitter and loss are NOT applied; rate is")
    try:
        _create(spec, netem)
    except BaseException:
        down(spec.name)
        raise
    lab = Lab(spec, netem, notes)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / f"{spec.name}.json").write_text(json.dumps(lab.state(), indent=2))
    return lab


def _create(spec: LabSpec, netem: bool) -> None:
    sw = spec.switch_ns
    _run("ip", "netns", "add", sw)
    _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
    _run("ip", "-n", sw, "link", "set", "br0", "up")
    for i in range(spec.hosts):
        ns = spec.ns(i)
        _run("ip", "netns", "add", ns)
        # Create the pair inside the switch namespace, then move one end to the host:
        # the root namespace never holds (or risks clashing with) our interfaces.
        _run("ip", "-n", sw, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "-n", sw, "link", "set", f"p{i}", "master", "br0")
        _run("ip", "-n", sw, "link", "set", f"p{i}", "up")
        _run("ip", "-n", ns, "addr", "add", f"{spec.address(i)}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        rate = spec.host_rate(i)
        _shape(ns, "eth0", spec, rate, netem)  # host -> switch
        _shape(sw, f"p{i}", spec, rate, netem)  # switch -> host
        if "docker0" in spec.decoys:
            _run("ip", "-n", ns, "link", "add", "docker0", "type", "bridge")
            _run("ip", "-n", ns, "addr", "add", "172.17.0.1/16", "dev", "docker0")
            _run("ip", "-n", ns, "link", "set", "docker0", "up")
        if "tun0" in spec.decoys:
            _run("ip", "-n", ns, "tuntap", "add", "dev", "tun0", "mode", "tun")
            _run("ip", "-n", ns, "addr", "add", "10.8.0.2/24", "dev", "tun0")
        _write_hosts(spec, i)


def _write_hosts(spec: LabSpec, host: int) -> None:
    """/etc/netns/<ns>/hosts, which `ip netns exec` mounts over /etc/hosts in that host."""
    import socket

    name = socket.gethostname()
    lines = ["127.0.0.1 localhost"]
    if spec.resolve_to == "eth0":
        lines.append(f"{spec.address(host)} {name}")
    elif spec.resolve_to == "docker0":
        lines.append(f"172.17.0.1 {name}")
    else:  # outside: the name maps to loopback, as /etc/hosts does on many machines
        lines.append(f"127.0.1.1 {name}")
    lines += [f"{spec.address(i)} host{i}" for i in range(spec.hosts)]
    d = NETNS_ETC / spec.ns(host)
    d.mkdir(parents=True, exist_ok=True)
    (d / "hosts").write_text("\n".join(lines) + "\n")


def our_namespaces(name: str | None = None) -> list[str]:
    want = f"{PREFIX}{name}-" if name else PREFIX
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(want)]


def down(name: str | None = None) -> list[str]:
    """Remove the lab's namespaces (their interfaces go with them) and its files.
    ``name=None``: every ddplab lab, e.g. leftovers of a killed run."""
    removed = []
    namespaces = our_namespaces(name)
    _end_processes(namespaces)
    for ns in namespaces:
        if _run("ip", "netns", "del", ns, check=False).returncode == 0:
            removed.append(ns)
    for d in NETNS_ETC.glob(f"{PREFIX}{name + '-' if name else ''}*"):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    for f in STATE_DIR.glob(f"{name or '*'}.json"):
        f.unlink()
    return removed


def _end_processes(namespaces: list[str], grace_s: float = 2.0) -> None:
    """Processes still running inside the labs being removed (a killed `netlab run` leaves its
    torchruns behind on kernels without a parent-death signal, or ranks writing into the run
    folder): SIGTERM, then SIGKILL after ``grace_s``. Deleting a namespace alone does not
    end them; they would run on, unreachable, still writing their records."""
    pids = {int(p) for ns in namespaces for p in _run("ip", "netns", "pids", ns, check=False).stdout.split()}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            pids = {p for p in pids if _alive(p)}
            time.sleep(0.05)
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone, only unreaped
    except (OSError, IndexError):
        return False


def status() -> list[dict]:
    """Labs that are up: from their state files, checked against `ip netns list`."""
    labs = []
    present = set(our_namespaces())
    for f in sorted(STATE_DIR.glob("*.json")):
        state = json.loads(f.read_text())
        spec = LabSpec(
            **{
                **state["spec"],
                "decoys": tuple(state["spec"]["decoys"]),
                "host_rates": {int(k): v for k, v in state["spec"]["host_rates"].items()},
            }
        )
        hosts = []
        for i in range(spec.hosts):
            qd = _run("tc", "-n", spec.ns(i), "qdisc", "show", "dev", "eth0", check=False).stdout.strip()
            hosts.append(
                {
                    "host": i,
                    "ns": spec.ns(i),
                    "address": spec.address(i),
                    "up": spec.ns(i) in present,
                    "rate": spec.host_rate(i),
                    "qdisc": qd,
                }
            )
        labs.append({"name": spec.name, "netem": state["netem"], "notes": state["notes"], "hosts": hosts})
    orphans = sorted(
        present - {h["ns"] for lab in labs for h in lab["hosts"]} - {f"{PREFIX}{lab['name']}-sw" for lab in labs}
    )
    if orphans:
        labs.append({"name": None, "orphans": orphans})
    return labs


def load(name: str) -> Lab:
    f = STATE_DIR / f"{name}.json"
    if not f.exists():
        raise ValueError(f"--name: no lab {name!r} is up (ddplab netlab up --name {name})")
    state = json.loads(f.read_text())
    spec = LabSpec(
        **{
            **state["spec"],
            "decoys": tuple(state["spec"]["decoys"]),
            "host_rates": {int(k): v for k, v in state["spec"]["host_rates"].items()},
        }
    )
    return Lab(spec, state["netem"], state["notes"])
