"""A CPU rank keeps its heap (realrun/cpu_alloc.py): a step's large tensors are carved from
memory already touched instead of fresh pages from the kernel. Counted in page faults, not
timed. A 100 MB tensor made and freed faults in all its ~24,400 pages every time under glibc's
defaults; with the heap kept, glibc places it further on for a few rounds (up to ten here, through
the 1 GiB of address space the heap grows by) and then reuses what it freed, faulting none;
with DDPLAB_CPU_PREFAULT_GIB above that, none from the first round."""

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt: Linux with glibc only"
)

LOOP = """
import resource, sys, torch
from realrun.cpu_alloc import keep_freed_memory
print(keep_freed_memory(), file=sys.stderr)
for _ in range(WARMUP):
    x = torch.ones(25_000_000)
    del x
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    x = torch.ones(25_000_000)  # 100 MB: above glibc's largest mmap threshold (32 MiB)
    del x
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""
PAGES = 100e6 / 4096  # a 100 MB tensor's 4 KiB pages (fewer with huge pages: then the first test says so)


def _faults_per_tensor(warmup: int, **env: str) -> tuple[float, str]:
    """Minor page faults per 100 MB tensor over 10 rounds after ``warmup``; what the heap ran with."""
    mine = {k: v for k, v in os.environ.items() if not k.startswith("DDPLAB_CPU_")} | env
    loop = LOOP.replace("WARMUP", str(warmup))
    p = subprocess.run([sys.executable, "-c", loop], capture_output=True, text=True, env=mine, check=True)
    return float(p.stdout.strip()), p.stderr.strip()


def test_glibcs_default_faults_every_tensor_in_and_a_kept_heap_settles_on_none():
    system, said = _faults_per_tensor(1, DDPLAB_CPU_MALLOC="system")
    assert said == "system default (DDPLAB_CPU_MALLOC=system)"
    assert system > 0.9 * PAGES, f"glibc's default faulted {system:.0f} pages per 100 MB tensor"
    kept, what = _faults_per_tensor(20)
    assert what == "glibc heap kept: no mmap, no trim (realrun/cpu_alloc.py)"
    assert kept < 0.01 * PAGES, f"the kept heap faulted {kept:.0f} pages per 100 MB tensor after 20 rounds"


def test_a_prefault_is_touched_once_and_then_reused():
    """DDPLAB_CPU_PREFAULT_GIB: the pages are faulted at start, so the tensors fault none from
    the first round on; the meta record says how much was touched."""
    first, what = _faults_per_tensor(0, DDPLAB_CPU_PREFAULT_GIB="1.25")
    assert what == "glibc heap kept: no mmap, no trim (realrun/cpu_alloc.py), 1.25 GiB touched at start"
    assert first < 0.01 * PAGES, f"{first:.0f} pages faulted per 100 MB tensor after the prefault"


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "1e9"])
def test_a_bad_prefault_is_one_line_before_any_rank_starts(ddplab, tmp_path, monkeypatch, value):
    monkeypatch.setenv("DDPLAB_CPU_PREFAULT_GIB", value)
    code, out, err = ddplab("train", "--out", str(tmp_path / "run"), "--model", "gpt2-tiny", "--nproc", "2")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("ddplab train: error: DDPLAB_CPU_PREFAULT_GIB: must be a number of GiB from 0 to")
    assert line.endswith(f"got {value!r}")
    assert not (tmp_path / "run").exists()
