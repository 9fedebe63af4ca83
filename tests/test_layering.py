"""The house's one-way arrows (docs/architecture.md): which package may import which, no
import circle between any two modules (function-local imports count too), the simulator's
model modules do no I/O, sim/ and calibrate/ write no file (output/ does), and sim/ and
calibrate/ never need torch."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGES = ("ddplab", "workflow", "output", "calibrate", "sim", "realrun", "scenarios")
# What each package must never import (of the project's packages, and torch).
FORBIDDEN = {
    "ddplab": {"sim", "calibrate"},  # the front door: parses, calls workflow/, prints
    "workflow": {"ddplab"},
    "output": {"torch", "ddplab", "workflow", "realrun"},
    "calibrate": {"torch", "ddplab", "workflow", "output", "realrun"},
    "sim": {"torch", "ddplab", "workflow", "output", "calibrate", "realrun"},
    "realrun": {"ddplab", "workflow", "output", "calibrate", "sim"},
    "scenarios": {"torch", "ddplab", "workflow", "output", "calibrate", "sim", "realrun"},
}
# sim/ modules that read files (their inputs); every other one is model only (SimPy's core does no I/O).
SIM_IO = {"scenario_file", "scenario_keys", "hf_config", "readfile"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).glob("*.py")):
            out[pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> list[str]:
    """Every module name imported anywhere in the file (function bodies included)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` imports the module pkg.mod when there is one.
            names += [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names
            ]
    return names


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_package_imports_only_downward(name):
    pkg = name.split(".")[0]
    for imported in _imports(MODULES[name]):
        assert imported.split(".")[0] not in FORBIDDEN[pkg], f"{name} imports {imported}"


def test_the_layer_rules_can_fail():
    # The rule above reads real import statements: a forbidden arrow is one it finds.
    assert "sim.config" in _imports(MODULES["calibrate.apply"])
    assert "sim" in FORBIDDEN["realrun"] and "calibrate" in FORBIDDEN["realrun"]


def test_the_front_door_rule_can_fail():
    # ddplab/ parses, calls workflow/ (and realrun's launcher, doctor and netlab) and prints
    # (issue 27): what a command computes lives in workflow/, which may import sim/.
    assert "sim.units" in _imports(MODULES["workflow.units"])
    assert {"sim", "calibrate"} <= FORBIDDEN["ddplab"]


def test_the_front_door_stays_thin():
    # Issue 27's bar: a front door that only parses, calls and prints fits in under 1,000 lines
    # (every line counted, docstrings and blanks too); a journey growing in it shows up here.
    lines = {n: len(p.read_text().splitlines()) for n, p in MODULES.items() if n.split(".")[0] == "ddplab"}
    assert 500 < sum(lines.values()) < 1000, sorted(lines.items(), key=lambda kv: -kv[1])


def _starts_the_cli(source: str) -> bool:
    """Whether the code builds a command line ``... "-m", "ddplab" ...`` (a run-time arrow up
    to the front door that the import rule cannot see)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List | ast.Tuple):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if any(a == "-m" and b == "ddplab" for a, b in zip(words, words[1:], strict=False)):
                return True
    return False


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not n.startswith("ddplab")))
def test_no_package_below_the_front_door_starts_it(name):
    # The demo starts torchrun through realrun and calls workflow's functions (issue 27).
    assert not _starts_the_cli(MODULES[name].read_text()), f"{name} runs `python -m ddplab`"


def test_the_cli_start_check_can_fail():
    assert _starts_the_cli('subprocess.call([sys.executable, "-m", "ddplab", "probe"])')
    assert not _starts_the_cli('subprocess.call([sys.executable, "-m", "realrun", "probe"])')


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.split(".")[0] in ("sim", "calibrate")))
def test_sim_and_calibrate_import_no_output_module(name):
    # They return values; output/ writes them (its modules may import theirs, never the reverse).
    assert [m for m in _imports(MODULES[name]) if m.split(".")[0] == "output"] == []


def test_output_holds_the_writers():
    assert "sim.results" in _imports(MODULES["output.export"])
    assert "output" in FORBIDDEN["sim"] and "output" in FORBIDDEN["calibrate"]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_circle():
    graph = {name: {m for m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _io_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in ("open", "print", "read_text", "write_text", "read_bytes", "write_bytes", "savefig"):
                found.append(f"{name}() at line {node.lineno}")
    found += [f"import {m}" for m in _imports(path) if m.split(".")[0] in ("matplotlib", "csv", "json")]
    return found


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("sim.") and n[4:] not in SIM_IO))
def test_sim_model_modules_do_no_io(name):
    assert _io_calls(MODULES[name]) == []


def test_the_io_check_sees_io():
    assert _io_calls(MODULES["sim.scenario_file"])
    assert _io_calls(MODULES["output.export"])


# What writes, renames, removes or makes a file (reading stays where the input is parsed).
_WRITE_CALLS = {"write_text", "write_bytes", "savefig", "touch", "mkdir", "makedirs", "rmdir", "unlink", "rename"}
_WRITE_CALLS |= {"symlink_to", "hardlink_to", "tofile", "to_csv", "mkstemp", "mkdtemp", "NamedTemporaryFile"}
_WRITE_CALLS |= {"TemporaryDirectory"}
# Names that write only when called on one of these modules (str.replace and list.remove do not).
_MODULE_WRITES = {
    "os": {"replace", "rename", "renames", "remove", "link", "symlink", "truncate", "mkfifo", "write"},
    "np": {"save", "savez", "savez_compressed", "savetxt"},
    "numpy": {"save", "savez", "savez_compressed", "savetxt"},
    "json": {"dump"},
    "pickle": {"dump"},
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move", "rmtree"},
}
_WRITE_MODULES = {"tempfile", "shutil"}
_OPEN_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _opens_to_write(call: ast.Call) -> bool:
    """An ``open``-like call given a mode that writes: ``open(p, "w")``, ``gzip.open(p, mode="at")``,
    ``path.open("wb")``, ``ZipFile(p, "x")``; a mode that is not a literal counts as writing."""
    modes = [k.value for k in call.keywords if k.arg == "mode"]
    modes += [a for a in call.args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    modes += [a for a in call.args[1:2] if not isinstance(a, ast.Constant)]  # open(p, mode_var)
    for m in modes:
        if not (isinstance(m, ast.Constant) and isinstance(m.value, str)):
            return True
        if re.fullmatch(r"[rwxabtU+]{1,4}", m.value) and set(m.value) & set("wax+"):
            return True
    return False


def _writes(source: str) -> list[str]:
    """Every call in ``source`` that writes, renames, removes or makes a file: open/ZipFile/gzip.open
    in a mode other than reading, os.open with a write flag, and the names above."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"import {m} at line {node.lineno}" for m in mods if m.split(".")[0] in _WRITE_MODULES]
            continue
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        base = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        where = f"{base + '.' if base else ''}{name}() at line {node.lineno}"
        if base == "os" and name == "open":
            flags = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} & _OPEN_WRITE_FLAGS
            if flags:
                found.append(where)
        elif name in ("open", "ZipFile", "fdopen") and _opens_to_write(node):
            found.append(where)
        elif name in _WRITE_CALLS or name in _MODULE_WRITES.get(base, ()):
            found.append(where)
        elif name == "replace" and len(node.args) == 1 and not node.keywords:  # Path.replace; str's takes two
            found.append(where)
    return found


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.split(".")[0] in ("sim", "calibrate")))
def test_sim_and_calibrate_write_no_file(name):
    assert _writes(MODULES[name].read_text()) == []


def test_the_write_check_sees_writes():
    source = """
import tempfile
import numpy as np
open(p, "w"); open(p, mode="ab"); open(p, "x"); open(p, "r+"); gzip.open(p, "wt"); zipfile.ZipFile(p, "w")
zf.open(name, "w"); os.open(p, os.O_WRONLY | os.O_CREAT); os.fdopen(fd, "wb")
p.write_text(s); p.write_bytes(b); fig.savefig(p); np.save(p, a); np.savez(p, a=a); np.savez_compressed(p, a=a)
os.replace(a, b); os.rename(a, b); os.remove(p); p.unlink(); p.mkdir(); os.makedirs(p); json.dump(d, f)
shutil.copy(a, b); p.open("w"); p.rename(q); p.replace(q); open(p, mode)
"""
    assert len(_writes(source)) == 28  # each call above, and the import
    # Reading, and the str/list methods that share a name with a file operation, are not writes.
    reads = """
open(p); open(p, "rb"); gzip.open(raw, "rt"); os.open(p, os.O_RDONLY | os.O_NONBLOCK); p.read_text()
json.loads(s); json.dumps(d); s.replace("a", "b"); names.remove(x); np.load(p); p.open(); p.open("rb")
open("w.txt"); zipfile.ZipFile(p); zf.open(name)
"""
    assert _writes(reads) == []
    # The scan reads what output/ does: its writer module trips it.
    assert _writes(MODULES["output.atomic"].read_text())


def test_sim_and_cli_import_without_torch():
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch is blocked in this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import sim.engine, sim.trace, output.export, output.plot, ddplab.cli, calibrate.calib, calibrate.apply\n"
        "import workflow.report, workflow.simstudy\n"
        "from sim.scenario_file import load_scenario\n"
        "from sim.engine import simulate\n"
        "simulate(load_scenario('h100-1024', ranks=16, steps=2))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
