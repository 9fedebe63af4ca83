"""`ddplab launch`: the per-node torchrun lines, the Slurm script, and --exec for real."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, free_port

from realrun import nodes


def test_node_zero_alone_hosts_the_rendezvous():
    lines = nodes.launch_commands(3, "10.0.0.1", 29500, 2, "eth0", ["train", "--out", "runs/x"])
    assert len(lines) == 3
    assert ["is_host=1" in line for line in lines] == [True, False, False]
    for i, line in enumerate(lines):
        assert line.startswith("GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0 torchrun ")
        assert "--nnodes=3 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29500" in line
        assert line.endswith("-m realrun train --out runs/x")
        assert ("--local-addr=10.0.0.1" if i == 0 else f"--local-addr=<node {i} address>") in line


def test_known_addresses_and_interfaces_fill_the_placeholders():
    lines = nodes.launch_commands(2, "10.0.0.1", 29500, 1, None, [], local_addrs={1: "10.0.0.2"}, ifaces={1: "enp5s0"})
    assert not lines[0].startswith("GLOO")  # no --iface: auto-detection on node 0
    assert lines[1].startswith("GLOO_SOCKET_IFNAME=enp5s0 NCCL_SOCKET_IFNAME=enp5s0 ")
    assert "--local-addr=10.0.0.2" in lines[1] and "<node" not in lines[1]
    assert lines[1].endswith(" ".join(nodes.DEFAULT_VERB_ARGS))


@pytest.mark.parametrize(
    ("host", "nodes_", "said"),
    [("127.0.0.1", 2, True), ("localhost", 3, True), ("::1", 2, True), ("10.0.0.1", 2, False), ("127.0.0.1", 1, False)],
)
def test_a_loopback_master_says_every_node_is_on_this_machine(host, nodes_, said):
    """Node 1's line names --rdzv-endpoint=127.0.0.1, which no other machine reaches: right for a
    test on one machine, a hang across two. The text says which (as `doctor` notes)."""
    text = "\n".join(nodes.launch_text(nodes_, f"{host}:29500", host, None, ["x"] * nodes_, None))
    assert (
        f"# {host} is loopback: every node must run on this machine (a test); for {nodes_} machines" in text
    ) is said


@pytest.mark.parametrize(("iface", "n", "says"), [("eth0", 2, "iface"), (None, 2, "auto"), ("eth0", 1, "")])
def test_the_text_says_how_each_node_gets_its_interface(iface, n, says):
    """--iface puts one name in every node's line; the seed's pair (a Linux box and a Mac) names
    its interfaces differently (eth0 or enp*, en0), so the text says where such a node's own line
    comes from. Without --iface, auto-detection, which doctor checks."""
    text = "\n".join(nodes.launch_text(n, "10.0.0.1:29500", "10.0.0.1", iface, ["x"] * n, None))
    assert ("# --iface eth0 on every node; a node whose interface has another name (a Mac's en0)" in text) is (
        says == "iface"
    )
    assert ("# No --iface: auto-detection chooses each node's NIC" in text) is (says == "auto")
    assert ("`ddplab doctor --master" in text) is bool(says)


def test_slurm_script_is_valid_bash_with_the_lines_a_cluster_needs(tmp_path):
    text = nodes.slurm_script(4, 8, 29500, "ib0", ["train", "--out", "runs/a b"], "gpt", "02:00:00")
    for line in (
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --job-name=gpt",
        "#SBATCH --time=02:00:00",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export NCCL_SOCKET_IFNAME=ib0",
        "export GLOO_SOCKET_IFNAME=ib0",
    ):
        assert line in text.splitlines(), line
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert srun.startswith("srun torchrun --nnodes=$SLURM_NNODES --nproc-per-node=8 --rdzv-backend=c10d")
    assert "--rdzv-endpoint=$MASTER_ADDR:29500 --rdzv-id=$SLURM_JOB_ID" in srun
    assert srun.endswith("-m realrun train --out 'runs/a b' --backend nccl --device cuda")  # the GPUs it asks for
    f = tmp_path / "job.sbatch"
    f.write_text(text)
    p = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "SOCKET_IFNAME" not in nodes.slurm_script(2, 1, 29500, None, [])


def test_slurm_script_runs_with_stand_in_scontrol_and_srun(tmp_path):
    """No Slurm here: stand-ins print what the real tools would, so the script's
    expansions (MASTER_ADDR from the allocation, $SLURM_* in the line) really run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "gpu-a\\ngpu-b\\n"\n')
    (bin_dir / "srun").write_text('#!/bin/sh\necho "srun: $*"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(nodes.slurm_script(2, 4, 29511, "eth0", ["probe", "--out", "runs/p", "--quick"]))
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "gpu-[a-b]",
        "SLURM_NNODES": "2",
        "SLURM_JOB_ID": "77",
    }
    p = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (
        "srun: torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=gpu-a:29511"
        " --rdzv-id=77 -m realrun probe --out runs/p --quick --backend nccl --device cuda"
    )


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--nodes", "2", "--master", "10.0.0.1"], "'10.0.0.1'"),
        (["--nodes", "2", "--master", "10.0.0.1:"], "'10.0.0.1:'"),
        (["--nodes", "2", "--master", "10.0.0.1:70000"], "70000"),
        (["--nodes", "0", "--master", "10.0.0.1:29500"], "--nodes"),
        (["--nodes", "2", "--master", "10.0.0.1:29500", "--nproc-per-node", "0"], "--nproc-per-node"),
        (["--nodes", "2", "--master", "10.0.0.1:29500", "--", "fit"], "'fit'"),
        (["--nodes", "2", "--master", "10.0.0.1:29500", "--", "train"], "--out"),
        (
            ["--nodes", "2", "--master", "10.0.0.1:29500", "--", "train", "--out", "x", "--steps", "0"],
            "--steps",
        ),
        (["--nodes", "2", "--master", "10.0.0.1:29500", "--slurm", "j.sh", "--time", "soon"], "--time"),
    ],
)
def test_bad_input_is_one_line_exit_2(ddplab, argv, needle):
    code, out, err = ddplab("launch", *argv)
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert out == ""


def test_cli_prints_lines_and_writes_the_slurm_script(ddplab, tmp_path):
    job = tmp_path / "sub" / "job.sbatch"
    job.parent.mkdir()  # --slurm writes into an existing folder (a missing one is refused)
    code, out, err = ddplab(
        "launch", "--nodes", "2", "--master", "10.0.0.1:29500", "--iface", "eth0", "--slurm", str(job),
        "--", "train", "--out", "runs/two",
    )  # fmt: skip
    assert code == 0, err
    cmds = [line for line in out.splitlines() if "torchrun " in line]
    assert len(cmds) == 2 and "is_host=1" in cmds[0] and "is_host" not in cmds[1]
    assert job.exists() and subprocess.run(["bash", "-n", str(job)]).returncode == 0
    code, out, _ = ddplab("launch", "--nodes", "2", "--master", "10.0.0.1:29500", "--json")
    d = json.loads(out)
    assert d["slurm"] is None and len(d["commands"]) == 2


@pytest.mark.slow
def test_exec_runs_this_node_and_passes_the_exit_code(ddplab, tmp_path):
    """One node, for real: the c10d rendezvous with is_host and --local-addr, then training."""
    port = free_port()
    train = ["train", "--out", str(tmp_path / "run"), "--steps", "1", "--seq-len", "16", "--micro-batch", "1"]
    code, _, err = ddplab("launch", "--nodes", "1", "--master", f"127.0.0.1:{port}", "--exec", "--", *train)
    assert code == 0, err[-3000:]
    assert f"--rdzv-endpoint=127.0.0.1:{port} --rdzv-conf=is_host=1 --local-addr=127.0.0.1" in err
    assert (tmp_path / "run" / "train-rank0000.jsonl").exists()
    # A failure only the worker can see (a missing data file): torchrun's exit code comes through.
    bad = ["train", "--out", str(tmp_path / "bad"), "--steps", "1", "--data", str(tmp_path / "missing.txt")]
    code, _, err = ddplab("launch", "--nodes", "1", "--master", f"127.0.0.1:{free_port()}", "--exec", "--", *bad)
    assert code != 0 and code != 2, err[-3000:]  # torchrun's failure, not our input check
    # A bad preset is refused before anything starts.
    bad = ["train", "--out", str(tmp_path / "bad2"), "--steps", "1", "--model", "no-such-model"]
    code, _, err = ddplab("launch", "--nodes", "1", "--master", f"127.0.0.1:{free_port()}", "--exec", "--", *bad)
    assert code == 2 and "--model" in err and len(err.strip().splitlines()) == 1, err


def _ip(*args, check=True):
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and p.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")
    return p


@pytest.mark.slow
def test_exec_two_namespaces_where_auto_detection_hangs(tmp_path):
    """Two hosts whose hostname maps to 127.0.1.1 and whose first interface is a VPN:
    plain torchrun would hang; --exec with the doctor's settings trains across the veth."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("ip")):
        pytest.skip("network namespaces need root and iproute2 (`ip`)")
    tag = uuid.uuid4().hex[:6]
    a, b = f"ddplabtest-{tag}-a", f"ddplabtest-{tag}-b"
    procs = []
    try:
        if _ip("netns", "add", a, check=False).returncode:
            pytest.skip("cannot create a network namespace here")
        _ip("netns", "add", b)
        for ns in (a, b):
            _ip("-n", ns, "link", "set", "lo", "up")
            d = Path("/etc/netns") / ns
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {socket.gethostname()}\n")
        _ip("-n", a, "tuntap", "add", "dev", "tun0", "mode", "tun")
        _ip("-n", a, "addr", "add", "10.8.0.2/24", "dev", "tun0")
        _ip("-n", a, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", b)
        _ip("-n", a, "addr", "add", "10.78.0.1/24", "dev", "veth0")
        _ip("-n", b, "addr", "add", "10.78.0.2/24", "dev", "veth1")
        _ip("-n", a, "link", "set", "veth0", "up")
        _ip("-n", b, "link", "set", "veth1", "up")
        port = free_port()
        train = [
            "train",
            "--out",
            str(tmp_path / "run"),
            "--steps",
            "2",
            "--seq-len",
            "16",
            "--micro-batch",
            "1",
        ]
        env = {k: v for k, v in os.environ.items() if not k.endswith("_SOCKET_IFNAME")}
        env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        for ns in (b, a):  # the rendezvous host first
            argv = [sys.executable, "-m", "ddplab", "launch", "--nodes", "2", "--master", f"10.78.0.2:{port}"]
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, *argv, "--exec", "--", *train, "--timeout-s", "60"],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,  # torchrun and its ranks die with it (finally)
                )
            )
        try:
            outs = [p.communicate(timeout=240)[0] for p in procs]
        except subprocess.TimeoutExpired:  # say where each node was, not only that one hung
            for p in procs:  # TERM: torchrun passes it on to its ranks
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
            outs = [p.communicate(timeout=30)[0] for p in procs]
            shown = "\n".join(f"--- {n}:\n{o[-3000:]}" for n, o in zip((b, a), outs, strict=True))
            pytest.fail(f"a node still ran after 240 s:\n{shown}")
        assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs)
        assert "GLOO_SOCKET_IFNAME=veth1" in outs[0] and "--rdzv-conf=is_host=1" in outs[0]
        assert "GLOO_SOCKET_IFNAME=veth0" in outs[1] and "--local-addr=10.78.0.1" in outs[1]
        assert sorted(p.name for p in (tmp_path / "run").glob("train-rank*.jsonl")) == [
            "train-rank0000.jsonl",
            "train-rank0001.jsonl",
        ]
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for ns in (a, b):
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
