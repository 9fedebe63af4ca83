import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import ComputeConfig, ModelConfig, NetworkConfig, NoiseConfig, Scenario, TrainingConfig

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny(**kw) -> Scenario:
    """A small, fast scenario; keyword sections override the defaults."""
    sections = {
        "model": ModelConfig(preset="gpt2-tiny"),
        "training": TrainingConfig(micro_batch_size=2, seq_len=64),
        "compute": ComputeConfig(step_compute_s=0.1, optimizer_s=0.0),  # unset: derived (sim/optimizer.py)
        "network": NetworkConfig(backend="gloo", algorithm="ring", gpus_per_node=1, nic_gbit_s=1.0, nics_per_node=1),
        "noise": NoiseConfig(),
    }
    sections.update({k: v for k, v in kw.items() if k in sections})
    top = {k: v for k, v in kw.items() if k not in sections}
    top.setdefault("ranks", 4)
    top.setdefault("steps", 5)
    return Scenario(**sections, **top)


def in_process(capsys, *argv: str) -> tuple[int, str, str]:
    """`ddplab ARGV` in this process, faster than a subprocess: (exit code, stdout, stderr)."""
    from ddplab import cli

    try:
        code = cli.main(list(argv))
    except SystemExit as e:  # argparse's usage errors exit through the Parser
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def ddplab():
    """Run the real console entry point in a subprocess: (returncode, stdout, stderr)."""

    def run(*args: str):
        p = subprocess.run(
            [sys.executable, "-m", "ddplab", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
        )
        return p.returncode, p.stdout, p.stderr

    return run
