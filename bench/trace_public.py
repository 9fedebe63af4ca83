"""Every public Kineto trace under a folder, read by calibrate/kineto.py and fitted by
calibrate/trace_fit.py, beside Holistic Trace Analysis' own figures for the same file.

    python bench/trace_public.py DIR [--hta]

DIR: e.g. HTA's tests/data (github.com/facebookresearch/HolisticTraceAnalysis, MIT), or a folder
holding deepseek-ai/profile-data's train.json (docs/traces.md). Each trace
is read alone (one rank); one line per trace: what it is, or the one line saying what it lacks.
With --hta (pip install HolisticTraceAnalysis) HTA's temporal breakdown, communication time and
overlap are computed too, with its nanosecond rounding off (HTA_DISABLE_NS_ROUNDING=1): HTA
rounds each event's start up and its end down to whole microseconds (hta/common/trace_parser.py
round_down_time_stamps), which moves the union of ~1 us kernels by a few %. The table in
docs/traces.md is this script's output.
"""

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.kineto import TraceError, read_trace  # noqa: E402
from calibrate.trace_fit import fit_rank  # noqa: E402


def hta_figures(path: Path) -> dict:
    """HTA's own numbers for one trace (the same quantities as calibrate/trace_fit.py HtaTotals)."""
    os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis
    from hta.utils.utils import is_comm_kernel, merge_kernel_intervals

    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, d)
        a = TraceAnalysis(trace_dir=d)
        tb = a.get_temporal_breakdown(visualize=False).iloc[0]
        ov = a.get_comm_comp_overlap(visualize=False).iloc[0]
        rank = a.t.get_ranks()[0]
        df = a.t.get_trace(rank)
        names = a.t.symbol_table.get_sym_table()
        gpu = df[df["stream"].ne(-1)].copy()
        comm = merge_kernel_intervals(gpu[gpu["name"].apply(lambda i: is_comm_kernel(names[i]))].copy())
        # The CPU's ProfilerStep, not the GPU timeline's copy (gpu_user_annotation, also stream -1 in HTA).
        cpu = df["cat"].apply(lambda i: names[i] != "gpu_user_annotation")
        steps = df[df["stream"].eq(-1) & cpu & df["name"].apply(lambda i: names[i].startswith("ProfilerStep"))]
        return {
            "kernel_time_us": float(tb["kernel_time(us)"]),
            "compute_time_us": float(tb["compute_time(us)"]),
            "idle_time_us": float(tb["idle_time(us)"]),
            "comm_time_us": float((comm["end"] - comm["ts"]).sum()) if len(comm) else 0.0,
            "overlap_ratio": float(ov.iloc[1]) / 100,
            "step_us": {names[i]: float(d) for i, d in zip(steps["name"], steps["dur"], strict=True)},
        }


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    with_hta = "--hta" in argv
    paths = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    for p in paths:
        name = str(p.relative_to(root))
        try:
            t = read_trace(p)
            f = fit_rank(t, t.rank or 0)
        except TraceError as e:
            print(f"{name}: {str(e).split(': ', 1)[-1]}")
            continue
        props = t.meta.get("deviceProperties") or t.meta.get("computeProperties") or [{}]  # the latter: 2021's
        dev = (props[0] or {}).get("name", "no deviceProperties")
        head = f"{name}: rank {f.rank} of {t.world_size or '?'}, {dev}, steps {f.steps[0].step}-{f.steps[-1].step}"
        step_ms = sum(s.step_s for s in f.steps) / len(f.steps) * 1e3
        sizes = sorted({(c.op, c.bytes) for s in f.steps for c in s.collectives if c.bytes})
        if not f.gpu or f.hta is None:
            print(f"{head}; CPU only: step {step_ms:.3f} ms, compute {f.steps[0].compute_s * 1e3:.3f} ms")
            continue
        h = f.hta
        print(
            f"{head}; step {step_ms:.3f} ms; kernel {h.kernel_time_us:.0f} us, compute {h.compute_time_us:.0f},"
            f" comm {h.comm_time_us:.0f}, idle {h.idle_time_us:.0f}, overlap {h.overlap_ratio:.2%};"
            f" {len(sizes)} collective sizes"
            + (f" ({min(b for _, b in sizes)}-{max(b for _, b in sizes)} B)" if sizes else "")
        )
        if f.ep_kernels:  # the per-step fit's split differs from HTA's
            comp, comm, ov = (sum(getattr(s, k) for s in f.steps) / len(f.steps) * 1e3 for k in
                              ("compute_s", "comm_s", "overlap_s"))  # fmt: skip
            print(
                f"    per step, DeepEP as communication: compute {comp:.3f} ms, comm {comm:.3f} ms,"
                f" {ov / comm:.1%} of it under compute; {f.ep_note}"
            )
        if with_hta:
            try:
                x = hta_figures(p)
            except Exception as e:  # HTA's own failure on this file, reported as such
                print(f"    HTA: {type(e).__name__}: {str(e)[:100]}")
                continue
            keys = ("kernel_time_us", "compute_time_us", "comm_time_us", "idle_time_us", "overlap_ratio")
            # HTA's overlap is NaN (0/0) without communication; ours is 0 there.
            errs = {k: (getattr(h, k) / x[k] - 1) if x[k] == x[k] and x[k] else 0.0 for k in keys}
            ours = {f"ProfilerStep#{s.step}": s.step_s * 1e6 for s in f.steps}
            errs["step"] = max((abs(ours[k] / x["step_us"][k] - 1) for k in ours if k in x["step_us"]), default=0.0)
            print(
                f"    HTA: kernel {x['kernel_time_us']:.0f}, compute {x['compute_time_us']:.0f}, comm"
                f" {x['comm_time_us']:.0f}, idle {x['idle_time_us']:.0f}, overlap {x['overlap_ratio']:.2%};"
                f" worst difference {max(abs(v) for v in errs.values()):.2e}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
