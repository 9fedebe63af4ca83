"""One-way dependencies (DESIGN.md "The house"): sim/ and calibrate/ never need torch,
never import the packages above them, and calibrate reads realrun's files, not its code."""

import ast
import subprocess
import sys

import pytest
from conftest import ROOT


def test_sim_and_cli_import_without_torch():
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch is blocked in this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import sim.engine, sim.export, sim.trace, sim.plot, ddplab.cli\n"
        "from sim.config import load_scenario\n"
        "from sim.engine import simulate\n"
        "simulate(load_scenario('h100-1024', ranks=16, steps=2))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


FORBIDDEN = {"sim": {"torch", "ddplab", "calibrate", "realrun"}, "calibrate": {"torch", "ddplab", "realrun"}}


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "sim").glob("*.py")) + sorted((ROOT / "calibrate").glob("*.py")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_core_imports_only_downward(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            assert top not in FORBIDDEN[path.parent.name], f"{path.parent.name}/{path.name} imports {name}"
