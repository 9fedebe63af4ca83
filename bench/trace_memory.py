"""Peak memory of reading a large Kineto trace: calibrate/kineto.py streams it.

    python bench/trace_memory.py [--gb 1.0] [--keep PATH]

Writes a synthetic GPU trace of about ``--gb`` GB (per step: the ProfilerStep, DDP's forward
annotation, 300 CPU ops, 200 kernel launches and their kernels, 60 autograd nodes, 8 NCCL
all-reduces with sizes; a real job's mix, at ~300 bytes an event), then reads and fits it in a
fresh process and prints that process's peak resident memory (getrusage ru_maxrss) against the
2 GiB bound of issue 24. ``json.load`` of the same file would hold the whole text and every
event as Python objects, several times the file.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_trace(path: Path, target_bytes: int) -> tuple[int, int]:
    step_us, corr, n, events = 20_000.0, 0, 0, 0
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],')
        f.write(' "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, "traceEvents": [\n')
        first = True
        while f.tell() < target_bytes:
            t0 = n * step_us
            ev = [
                {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": t0,
                 "dur": step_us},
                {"ph": "X", "cat": "user_annotation", "name": "DistributedDataParallel.forward", "pid": 1, "tid": 1,
                 "ts": t0 + 10, "dur": 6000.0},
            ]  # fmt: skip
            for i in range(300):
                ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1,
                           "ts": t0 + 20 + i * 20, "dur": 15.0, "args": {"External id": i, "Ev Idx": i}})  # fmt: skip
            for i in range(60):
                ev.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0",
                           "pid": 1, "tid": 2, "ts": t0 + 7000 + i * 150, "dur": 140.0})  # fmt: skip
            for i in range(200):
                corr += 1
                at = t0 + 100 + i * 80
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": at, "dur": 4.0, "args": {"correlation": corr, "cbid": 211}})  # fmt: skip
                ev.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize",
                           "pid": 0, "tid": 7, "ts": at + 10, "dur": 60.0,
                           "args": {"stream": 7, "correlation": corr, "device": 0, "grid": [132, 1, 1]}})  # fmt: skip
            for i in range(8):
                corr += 1
                at = t0 + 8000 + i * 1000
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
                           "ts": at, "dur": 4.0, "args": {"correlation": corr}})  # fmt: skip
                ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0,
                           "tid": 20, "ts": at + 20, "dur": 900.0,
                           "args": {"stream": 20, "correlation": corr, "Collective name": "allreduce",
                                    "In msg nelems": 1 << 22, "dtype": "BFloat16", "Group size": 8}})  # fmt: skip
            for e in ev:
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
            events += len(ev)
            n += 1
        f.write('\n], "traceName": "synthetic"}\n')
    return n, events


READ = """
import resource, sys, time
sys.path.insert(0, {root!r})
from calibrate.kineto import read_trace
from calibrate.trace_fit import fit_rank
t0 = time.perf_counter()
last = [0]
def progress(done, total):
    if done - last[0] >= total // 4:
        last[0] = done
        print(f"  read {{done / 1e9:.2f}} of {{total / 1e9:.2f}} GB", flush=True)
t = read_trace({path!r}, progress)
f = fit_rank(t, 0)
print(f"  {{t.events}} events, {{len(f.steps)}} steps fitted in {{time.perf_counter() - t0:.0f}} s;"
      f" peak RSS {{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.3f}} GiB")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--keep", type=Path, help="write the trace here and keep it")
    a = ap.parse_args()
    path = a.keep or Path(tempfile.mkdtemp()) / "big.json"
    t0 = time.perf_counter()
    steps, events = write_trace(path, int(a.gb * 1e9))
    size = os.path.getsize(path)
    print(f"wrote {path}: {size / 1e9:.2f} GB, {steps} steps, {events} events in {time.perf_counter() - t0:.0f} s")
    try:
        p = subprocess.run([sys.executable, "-c", READ.format(root=str(ROOT), path=str(path))], check=False)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
        print(f"reader process peak RSS {peak:.3f} GiB (bound 2 GiB): {'within' if peak < 2 else 'OVER'}")
        return p.returncode or (0 if peak < 2 else 1)
    finally:
        if a.keep is None:
            path.unlink()


if __name__ == "__main__":
    sys.exit(main())
