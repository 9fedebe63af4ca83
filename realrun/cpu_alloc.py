"""A CPU rank's heap kept, as a GPU's caching allocator keeps its memory.

PyTorch's CUDA caching allocator keeps the blocks a step frees and hands them to the next step,
so a GPU step in steady state touches no new memory. On a CPU rank glibc's malloc does not:
every tensor above its mmap threshold (at most 32 MiB; a gpt2-mini micro-batch's logits are
103 MB) gets fresh pages from the kernel and returns them on free, and smaller freed memory is
trimmed from the top of the heap. Each step then faults its activations in again, page by
page, each page zeroed by the kernel. Measured on this repository's 2-core box (2026-12-06,
gpt2-mini, micro-batch 4 x 128 tokens, forward and backward on one pinned core, 40 steps each,
docs/validation.md): 169,000 minor page faults a step, 0.63-0.67 s a step against 0.45 s with
the heap kept: 30 % of a CPU step was the kernel handing out pages, a cost no GPU step has and
one that moves with what else the host does. PyTorch's CPU tuning guide ("Switch Memory
allocator": jemalloc or TCMalloc, which reuse memory) and DeepRec's "CPU Memory Optimization"
page (ptmalloc "can cause severe page faults while allocating large memory chunks common to DL
applications") name the same cost. glibc's own switches do it without a new library
(mallopt(3)): no mmap for large blocks, no trimming, and a heap that grows by 1 GiB of address
space at a time (M_TOP_PAD: fewer brk calls; a page costs only when first touched).

A kept heap still faults pages in over the first steps: for a few rounds glibc places a large
block further on instead of where the same block was freed, then settles and reuses what was
freed (tests/test_cpu_alloc.py: up to ten rounds of a 100 MB tensor; gpt2-mini's first six DDP
steps ran 0.8-2.8 s against 0.6 s steady, its ranks settling at ~1.4 GB each).
``DDPLAB_CPU_PREFAULT_GIB=G`` touches G GiB at start and frees it into the heap, so that step 0
already runs at the steady pace (2 GiB did for gpt2-mini); it costs its pages' faults up front
(2.8-3.9 s for 2 GiB on this box), so it is off by default and docs/validation/measure.sh, whose
runs are compared step by step, sets it. ``DDPLAB_CPU_MALLOC=system`` measures with glibc's
defaults instead.
"""

import ctypes
import os
import platform

from realrun.device import host_bytes

KEPT = "glibc heap kept: no mmap, no trim (realrun/cpu_alloc.py)"
# mallopt(3) parameters (glibc malloc.h).
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
TOP_PAD_BYTES = 1 << 30


def prefault_bytes(local_ranks: int) -> int:
    """DDPLAB_CPU_PREFAULT_GIB in bytes (0 when unset), refused above half the host's memory
    over this host's ranks."""
    text = os.environ.get("DDPLAB_CPU_PREFAULT_GIB", "0")
    try:
        gib = float(text)
    except ValueError:
        gib = -1.0
    most = host_bytes() / 2 / max(1, local_ranks)
    if not 0 <= gib * 2**30 <= most:  # NaN fails too
        raise ValueError(
            f"DDPLAB_CPU_PREFAULT_GIB: must be a number of GiB from 0 to {most / 2**30:.3g} (half this host's"
            f" memory over its {local_ranks} ranks), got {text!r}"
        )
    return int(gib * 2**30)


def keep_freed_memory(local_ranks: int = 1) -> str:
    """Set this process's malloc to keep what it frees, and touch DDPLAB_CPU_PREFAULT_GIB of it
    (module docstring); what it runs with, for the run's meta record."""
    if os.environ.get("DDPLAB_CPU_MALLOC", "") == "system":
        return "system default (DDPLAB_CPU_MALLOC=system)"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return f"system default ({platform.system()}: not glibc)"
    size = prefault_bytes(local_ranks)
    libc = ctypes.CDLL("libc.so.6")
    # Setting these turns off glibc's dynamic thresholds, which follow the largest block freed (mallopt(3)).
    ok = libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1) and libc.mallopt(M_TOP_PAD, TOP_PAD_BYTES)
    if not (ok and libc.mallopt(M_MMAP_MAX, 0)):
        return "system default (mallopt refused)"
    if not size:
        return KEPT
    libc.malloc.restype = ctypes.c_void_p
    block = libc.malloc(ctypes.c_size_t(size))
    if not block:
        raise ValueError(f"DDPLAB_CPU_PREFAULT_GIB: {size / 2**30:g} GiB could not be allocated")
    ctypes.memset(block, 0, size)  # no mmap now: it comes from the heap, and freed it stays there, touched
    libc.free(ctypes.c_void_p(block))
    return f"{KEPT}, {size / 2**30:g} GiB touched at start"
