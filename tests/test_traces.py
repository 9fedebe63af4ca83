"""Profiler traces in (calibrate/kineto.py, calibrate/trace_fit.py): a synthetic Kineto trace
whose kernel times are known fits to exactly those times; the streaming reader reads what
json.load reads at any buffer size; bad input is one line, exit 2, nothing written."""

import gzip
import json

import numpy as np
import pytest

from calibrate import kineto
from calibrate.kineto import TraceError, read_trace
from calibrate.trace_fit import fit_traces

STEP_US = 10_000.0
MIB = 1 << 20


def _x(name, ts, dur, cat="cpu_op", tid=1, pid=7, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gpu_trace(
    rank: int,
    *,
    slow: float = 1.0,
    steps=(0, 1, 2),
    base_ns: int = 1_700_000_000_000_000_000,
    jitter: float = 0.0,
    forwards=((100, 2000),),
    lead: float = 0.0,
    sync_end: float = 8200.0,
    world: int = 2,
    sync_extra=(),
):
    """One rank of a ``world``-rank job. Per step (times in us from the step's start):
    forward 100-2100 launches a 1000 us kernel; backward (autograd, its own thread) 3000-7000
    launches a 2000 us kernel, a 4 MB NCCL all-reduce at 5000 (runs 5200-8200) and a 1500 us
    kernel at 6100; the optimizer 8300-8800 launches a 300 us kernel. Compute kernels of a
    ``slow`` rank take ``slow`` x as long, on odd steps another (1 + ``jitter``) x. ``forwards``:
    the forward annotations, (start, duration) in us from the step's start. A rank whose host
    starts ``lead`` us late (its data loader) runs forward, backward and its all-reduce's launch
    that much later; the all-reduce ends at ``sync_end`` on every rank (it waits for the last one
    to join), and the optimizer follows it; ``sync_extra``: us more on the all-reduce's end, per step
    in order (the transfer slower that step on every rank)."""
    ev, corr = [], 100
    base_end = sync_end
    for i, n in enumerate(steps):
        t0, k = n * STEP_US, slow * (1 + jitter * (n % 2))
        sync_end = base_end + (sync_extra[i] if i < len(sync_extra) else 0.0)
        ev.append(_x(f"ProfilerStep#{n}", t0, STEP_US, cat="user_annotation"))
        for start, dur in forwards:  # (us from the step's start, us): one per micro-step
            ev.append(_x("DistributedDataParallel.forward", t0 + lead + start, dur, cat="user_annotation"))
        ev.append(_x("autograd::engine::evaluate_function: MmBackward0", t0 + lead + 3000, 4000, tid=2))
        ev.append(_x("Optimizer.step#AdamW.step", t0 + sync_end + 100, 500, cat="user_annotation"))
        ev.append(_x("DistributedDataParallel.forward", t0 + 100, 2000, cat="gpu_user_annotation", pid=0, tid=7))
        kernels = [  # (launch at, runs at, dur, name, extra args)
            (lead + 200, lead + 300, 1000 * k, "ampere_sgemm_128x64_nn", {}),
            (lead + 3100, lead + 3200, 2000 * k, "void at::native::elementwise_kernel<128>", {}),
            (lead + 5000, lead + 5200, sync_end - lead - 5200, "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
             {"Collective name": "allreduce", "In msg nelems": MIB, "dtype": "Float", "Group size": world}),
            (lead + 6000, lead + 6100, 1500 * k, "void cutlass::Kernel<cutlass_80_tensorop>", {}),
            (sync_end + 200, sync_end + 200, 300 * k, "void at::native::multi_tensor_apply_kernel", {}),
        ]  # fmt: skip
        for launch, start, dur, name, extra in kernels:
            corr += 1
            ev.append(_x("cudaLaunchKernel", t0 + launch, 5, cat="cuda_runtime", tid=2, correlation=corr))
            stream = 20 if name.startswith("nccl") else 7
            ev.append(
                _x(name, t0 + start, dur, cat="kernel", pid=0, tid=stream, stream=stream, correlation=corr, **extra)
            )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85 << 30, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "baseTimeNanoseconds": base_ns,
        "traceEvents": ev,
        "traceName": f"rank{rank}",
    }


def write(path, data, gz=True):
    text = json.dumps(data, indent=1)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def two_ranks(tmp_path):
    return [
        write(tmp_path / "rank0.json.gz", gpu_trace(0)),
        write(tmp_path / "rank1.json", gpu_trace(1, slow=1.2), gz=False),
    ]


def test_synthetic_gpu_trace_fits_its_own_kernel_times(two_ranks):
    fit = fit_traces([read_trace(p) for p in two_ranks])
    r0 = fit.ranks[0]
    # The last profiled step is left out, as HTA leaves it out: its kernels may outlive the trace.
    assert [s.step for s in r0.steps] == [0, 1]
    assert r0.provenance == "measured in rank0.json.gz, rank 0, steps 0-1"
    for s in r0.steps:
        assert s.step_s == pytest.approx(STEP_US * 1e-6, rel=1e-12)
        assert s.forward_s == pytest.approx(1000e-6, rel=1e-12)
        assert s.backward_s == pytest.approx(3500e-6, rel=1e-12)  # 2000 + 1500, launched inside autograd's span
        assert s.optimizer_s == pytest.approx(300e-6, rel=1e-12)
        assert s.compute_s == pytest.approx(4800e-6, rel=1e-12)
        assert s.comm_s == pytest.approx(3000e-6, rel=1e-12)
        assert s.overlap_s == pytest.approx(1500e-6, rel=1e-12)  # the 1500 us kernel inside 5200-8200
        assert s.exposed_comm_s == pytest.approx(1500e-6, rel=1e-12)
        assert [(b.bytes, b.ready_fraction) for b in s.buckets] == [(4 * MIB, 0.5)]  # issued at 5000 of 3000-7000
        assert s.wait_s == pytest.approx(600e-6, rel=1e-12)  # backward's last kernel ends 7600, the all-reduce 8200
    # It joins the sync when backward's compute ends, 7600 us into step 1, timed from the previous
    # step's sync (its all-reduce's end, 8200 us into step 0): 9400 us. Step 0 has none before it.
    # The lead is the rest of that: the optimizer and launch gaps.
    assert [s.ready_s for s in r0.steps] == [None, pytest.approx(9400e-6, rel=1e-12)]
    assert r0.steps[1].lead_s == pytest.approx((9400 - 4500) * 1e-6, rel=1e-12)
    (size,) = fit.size_bandwidth()
    assert (size.op, size.bytes, size.ranks, size.calls) == ("allreduce", 4 * MIB, 2, 4)
    assert size.busbw_gb_s == pytest.approx(4 * MIB * 2 * 1 / 2 / 3000e-6 / 1e9, rel=1e-12)
    # HTA's whole-trace figures: kernels launched before the last step began (steps 0 and 1).
    h = r0.hta
    assert h.kernel_time_us == pytest.approx(STEP_US + 8700 - 300)  # first kernel 300, last ends 18700
    assert h.compute_time_us == pytest.approx(2 * 4800)
    assert h.comm_time_us == pytest.approx(2 * 3000)
    assert h.overlap_ratio == pytest.approx(0.5)
    # Rank 1's compute kernels take 1.2x: it is the slowest, and the median of two is their mean.
    assert fit.ranks[1].steps[0].compute_s == pytest.approx(1.2 * 4800e-6, rel=1e-12)
    rank, factor = fit.slowest_rank()
    assert rank == 1 and factor == pytest.approx(1.2 / 1.1, rel=1e-12)
    # Stragglers removed: both at the median speed, over step 1 (the one both rank show joining).
    # Rank 1's kernels start when rank 0's do (the host launches them), so its 1.2 x compute fills
    # launch gaps and it joins the sync at 9700 us, only 300 after rank 0. At the median speed each
    # computes 1.1 x 4500 us and spends the median rank's 4600 around it (rank 0's 4900, rank 1's
    # 4300): both join at 9550, and the 300 us after rank 1 joined stay. (Before 2026-12-07 the
    # what-if scaled compute alone and took it for the whole path to the sync: 1.1 x 4800 + 10000
    # - 1.2 x 4800 us, 4.8 % cost, where slowing rank 1 had cost the step 3 %.)
    cost = fit.straggler_cost()
    at_median = (4600 + 1.1 * 4500 + 300) * 1e-6
    assert cost["steps"] == 1 and cost["measured_s"] == pytest.approx(STEP_US * 1e-6, rel=1e-12)
    assert cost["at_median_speed_s"] == pytest.approx(at_median, rel=1e-12)
    assert cost["fraction"] == pytest.approx(1 - at_median / (STEP_US * 1e-6), rel=1e-12)


def test_expert_parallel_all_to_all_is_communication_here_and_computation_in_htas_figures(tmp_path):
    """DeepEP's dispatch and combine kernels move tokens between ranks without NCCL (their names as
    deepseek-ai/DeepEP and DeepSeek's published trace write them). Nine 8000 us steps, step n: a
    4000 + 10 n us GEMM on stream 7 from 100, a dispatch on stream 27 at 1000-2000 (under the
    GEMM), a combine at 4500-5500 (exposed) and DeepEP's local layout kernel at 6000-6200
    (computation)."""
    from calibrate.trace_calib import JobShape, calibrate_traces

    ev, corr = [], 0
    for n in range(9):
        t0 = n * 8000
        ev.append(_x(f"ProfilerStep#{n}", t0, 8000, cat="user_annotation"))
        for start, dur, stream, name in (
            (100, 4000 + 10 * n, 7, "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::Gemm>(P)"),
            (1000, 1000, 27, "void deep_ep::legacy::internode::dispatch<false, 8, false, 8>(void*, int)"),
            (4500, 1000, 27, "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)"),
            (6000, 200, 7, "void deep_ep::legacy::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)"),
        ):
            corr += 1
            ev.append(_x("cudaLaunchKernel", t0 + start - 50, 5, cat="cuda_runtime", correlation=corr))
            ev.append(_x(name, t0 + start, dur, cat="kernel", pid=0, tid=stream, stream=stream, correlation=corr))
    data = {"deviceProperties": [{"name": "NVIDIA H800"}], "distributedInfo": {"rank": 0, "world_size": 64},
            "traceEvents": ev}  # fmt: skip
    path = write(tmp_path / "ep.json", data, gz=False)
    fit = fit_traces([read_trace(path)])
    f = fit.ranks[0]
    assert len(f.steps) == 8  # the last profiled step left out, as HTA leaves it out
    for n, s in enumerate(f.steps):
        assert s.compute_s == pytest.approx((4000 + 10 * n + 200) * 1e-6, rel=1e-12)  # GEMM and layout kernel
        assert s.comm_s == pytest.approx(2000e-6, rel=1e-12)
        assert s.overlap_s == pytest.approx(1000e-6, rel=1e-12)  # the dispatch, under the GEMM
        assert [(c.op, c.bytes) for c in s.collectives] == [("alltoall", None)] * 2
    assert fit.size_bandwidth() == []  # no sizes in their args: none invented
    assert (f.ep_kernels, f.ep_kernel_s) == (18, pytest.approx(18 * 1000e-6, rel=1e-12))
    assert any("18 expert-parallel all-to-all kernels (DeepEP), 18.000 ms" in n for n in f.notes)
    h = f.hta  # HTA's rule: not NCCL, so computation (steps 0-7, as HTA keeps them)
    assert (h.compute_time_us, h.comm_time_us) == (pytest.approx(sum(4000 + 10 * n + 1200 for n in range(8))), 0.0)
    # A calibration from it says what it could not measure of them.
    c = calibrate_traces([path], given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp"))
    assert any(a.startswith("sizes of 18 expert-parallel all-to-all kernels") for a in c.trace.absent)


@pytest.mark.parametrize("chunk", [7, 64, 4096])
def test_streaming_reader_matches_json_load_at_any_buffer(tmp_path, monkeypatch, chunk):
    path = write(tmp_path / "r.json.gz", gpu_trace(0))
    whole = read_trace(path)
    monkeypatch.setattr(kineto, "CHUNK_CHARS", chunk)
    small = read_trace(path)
    data = json.loads(gzip.open(path, "rt").read())
    assert small.events == whole.events == len(data["traceEvents"])
    assert small.meta == whole.meta == {k: v for k, v in data.items() if k != "traceEvents"}
    assert small.steps == whole.steps and list(small.gpu_dur) == list(whole.gpu_dur)


def test_calibrate_names_what_the_trace_lacks(two_ranks):
    from calibrate.trace_calib import calibrate_traces

    with pytest.raises(ValueError, match="does not say its model, seq-len, micro-batch, precision"):
        calibrate_traces(two_ranks)


def test_too_few_steps_to_fit_jitter_calibrate_the_rest_and_keep_the_scenarios_jitter(two_ranks):
    """2 ranks x 2 steps: under the jitter fit's 8 samples. Compute, ranks and overlap are
    measured all the same; the jitter is "none", named absent, and a scenario keeps its own."""
    from calibrate.apply import calibration_layer
    from calibrate.trace_calib import JobShape, calibrate_traces
    from sim.scenario_file import load_scenario

    given = JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp")
    c = calibrate_traces(two_ranks, given=given)
    assert (c.noise.distribution, c.noise.candidates, c.noise.samples) == ("none", [], 4)
    assert c.noise.chosen_because == "4 compute samples: a distribution fit needs at least 8"
    jitter = "jitter: 4 profiled rank-steps (2 ranks), a distribution fit needs 8"
    assert any(a.startswith(jitter) for a in c.trace.absent)
    assert c.ranks[1].speed_factor == pytest.approx(1.2, rel=1e-9)  # measured as with more steps
    sc = load_scenario("h100-1024")
    for mode in ("shape", "all"):
        layer = calibration_layer(sc, c, calib_path="c.json", mode=mode)
        assert not [p for p in layer.patches if p.key == "noise.distribution"], mode
        (held,) = [w for w in layer.withheld if w["key"] == "noise.distribution"]
        assert held["value"] == "none" and held["reason"].endswith("the scenario's jitter stays")


def test_calibration_from_a_gpu_trace_carries_its_device_and_provenance(tmp_path):
    from calibrate.calibration import Calibration
    from calibrate.trace_calib import JobShape, calibrate_traces

    steps = tuple(range(6))  # 5 used per rank: 10 rank-steps
    paths = [
        write(tmp_path / f"r{r}.json.gz", gpu_trace(r, slow=1 + 0.01 * r, steps=steps, jitter=0.02)) for r in (0, 1)
    ]
    j = (1 + 1.02 + 1 + 1.02 + 1) / 5  # steps 0-4, odd ones 2 % slower
    c = calibrate_traces(paths, given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp"))
    c = Calibration.from_json(json.loads(json.dumps(c.to_json())), "round trip")
    assert (c.device, c.device_info["name"], c.device_class, c.world_size, c.backend) == (
        "cuda", "NVIDIA H100 80GB HBM3", "h100", 2, "nccl"
    )  # fmt: skip
    # Forward + backward of the speed-1 rank, per token of the micro-step (one size: through 0).
    assert c.compute.step_s.points == [(128, pytest.approx(4500e-6 * j, rel=1e-9))]
    # After the wait, the optimizer kernel of rank 1, the slowest computer and so the last to join
    # the gradient sync, and the rest of its 10 ms
    # step: less forward's 1000 us kernel, backward's 2000 + 1500, the wait to the all-reduce's end
    # at 8200 from the 1500 us kernel's at 6100 + 1500 k, and the optimizer: idle GPU.
    k = 1.01 * j
    assert c.compute.optimizer_s.value == pytest.approx(300e-6 * k, rel=1e-9)
    wait = 8200 - 6100 - 1500 * k
    rest = STEP_US - 1000 * k - 3500 * k - wait - 300 * k
    assert c.compute.outside_s.value == pytest.approx(rest * 1e-6, rel=1e-9)
    assert "rank 1's, the last to join the gradient sync, mean step outside forward, backward, the" in (
        c.compute.outside_s.source
    )
    assert c.ranks[1].speed_factor == pytest.approx(1.01, rel=1e-9)
    assert c.trace.ranks[1].provenance == "measured in r1.json.gz, rank 1, steps 0-4"
    assert "r0.json.gz, rank 0, steps 0-4" in c.compute.achieved_tflop_s.source
    # Per rank-step the 1500 us kernel runs inside the all-reduce, and the 2000 us one reaches into
    # it (from 5200) when stretched past 2000 us.
    ks = [(1 + 0.01 * r) * (1 + 0.02 * (n % 2)) for r in (0, 1) for n in range(5)]
    over = sum(1500 * k + max(0.0, 3200 + 2000 * k - 5200) for k in ks)
    assert c.trace.overlap_fraction.value == pytest.approx(over / (3000 * len(ks)), rel=1e-9)
    assert c.trace.ranks[0].bucket_count == 1 and c.trace.buckets[0].bytes == 4 * MIB


def _bad(ddplab, tmp_path, name, *paths, match):
    out = tmp_path / name / "calib.json"
    out.parent.mkdir()  # calibrate -o writes into a folder that exists (issue 25, D2)
    code, _, err = ddplab("calibrate", *map(str, paths), "-o", str(out))
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("calibrate: reading")]
    assert code == 2, err
    assert len(lines) == 1 and match in lines[0], err
    assert not out.exists() and not list(out.parent.glob("*.png"))


def test_bad_traces_are_one_line_exit_2_nothing_written(ddplab, tmp_path):
    other = tmp_path / "viztracer.json"
    other.write_text(json.dumps({"traceEvents": [_x("f", 1, 2, cat="FEE")], "viztracer_metadata": {"version": "1"}}))
    _bad(ddplab, tmp_path, "other", other, match="another profiler's trace")
    speedscope = tmp_path / "speedscope.json"
    speedscope.write_text(json.dumps({"$schema": "https://www.speedscope.app/file-format-schema.json", "profiles": []}))
    _bad(ddplab, tmp_path, "speedscope", speedscope, match="no traceEvents")
    # Execution traces (what Chakra and ASTRA-sim replay) are graphs, not timings: named as such.
    et = tmp_path / "et.json"
    et.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [{"id": 1, "name": "[pytorch]"}]}))
    _bad(ddplab, tmp_path, "et", et, match="et.json: a PyTorch execution trace, a graph of operators, not a timeline")
    chakra = tmp_path / "chakra.0.json"
    chakra.write_text(json.dumps({"workload_graph": [{"Id": 1, "Name": "aten::add", "runtime": 3}]}))
    _bad(ddplab, tmp_path, "chakra", chakra, match="chakra.0.json: a Chakra execution trace, a graph of operators")
    # A bare array of events is Chrome's other form, Kineto's before torch 1.8: read, and judged by
    # its events like any other (another profiler's; Kineto's, here without a ProfilerStep).
    array = tmp_path / "array.json"
    array.write_text(json.dumps([_x("f", 1, 2, cat="FEE")]))
    _bad(ddplab, tmp_path, "array", array, match="another profiler's trace")
    array.write_text(json.dumps([_x("f", 1, 2)]))
    _bad(ddplab, tmp_path, "array_kineto", array, match="no ProfilerStep#N events")

    whole = gzip.compress(json.dumps(gpu_trace(0)).encode())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    _bad(ddplab, tmp_path, "cut", cut, match="truncated gzip")
    plain_cut = tmp_path / "cut.json"
    plain_cut.write_text(json.dumps(gpu_trace(0))[:5000])
    _bad(ddplab, tmp_path, "plain_cut", plain_cut, match="truncated")

    nostep = gpu_trace(0)
    nostep["traceEvents"] = [e for e in nostep["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    _bad(ddplab, tmp_path, "nostep", write(tmp_path / "nostep.json.gz", nostep), match="no ProfilerStep#N events")

    # Rank 1 profiled an hour later: not the same run's steps.
    late = write(tmp_path / "late.json.gz", gpu_trace(1, base_ns=1_700_000_000_000_000_000 + 3600 * 10**9))
    _bad(
        ddplab, tmp_path, "runs", write(tmp_path / "r0.json.gz", gpu_trace(0)), late, match="ranks from different runs"
    )
    world = gpu_trace(1)
    world["distributedInfo"]["world_size"] = 8
    _bad(ddplab, tmp_path, "world", tmp_path / "r0.json.gz", write(tmp_path / "w.json.gz", world), match="world size 8")
    _bad(ddplab, tmp_path, "twice", tmp_path / "r0.json.gz", tmp_path / "r0.json.gz", match="rank 0 again")
    _bad(ddplab, tmp_path, "mixed", tmp_path / "r0.json.gz", tmp_path, match="not both")


def test_a_trace_in_the_2020_form_fits_as_todays(tmp_path):
    """Before torch 1.8 Kineto wrote a bare array of events, and until 1.9 capitalised categories
    (the TensorBoard plugin's samples, measurements/trace_public_kineto.txt): the same events in
    that form fit to the same steps."""
    modern = gpu_trace(0)
    old = {"kernel": "Kernel", "cuda_runtime": "Runtime", "cpu_op": "Operator", "user_annotation": "Operator"}
    events = [
        {**e, "cat": old.get(e["cat"], e["cat"])} for e in modern["traceEvents"] if e["cat"] != "gpu_user_annotation"
    ]
    a = fit_traces([read_trace(write(tmp_path / "now.json.gz", modern))]).ranks[0]
    b = fit_traces([read_trace(write(tmp_path / "then.json", events, gz=False))]).ranks[0]
    assert b.gpu and [vars(s) for s in b.steps] == [vars(s) for s in a.steps]


def test_reader_errors_are_trace_errors(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "missing.json")
    p = tmp_path / "bad.json"
    p.write_text('{"traceEvents": [{"ph": "X",, }]}')
    with pytest.raises(TraceError, match="not valid JSON"):
        read_trace(p)


def test_simulate_h100_1024_takes_an_h100_trace_calibration_in_device_mode(ddplab, tmp_path):
    """The synthetic H100 trace above stands in for a real one (HTA's tests/data/h100 trace is not
    in the public snapshot read here; docs/traces.md): its compute reaches h100-1024 in mode
    ``device``, each value citing the traces, ranks and steps it was measured in."""
    paths = [
        write(tmp_path / f"r{r}.json.gz", gpu_trace(r, slow=1 + 0.01 * r, steps=tuple(range(6)), jitter=0.02))
        for r in (0, 1)
    ]
    calib = tmp_path / "calib.json"
    shape = ("--model", "gpt2-tiny", "--seq-len", "64", "--micro-batch", "2", "--precision", "bf16-amp")
    code, _, err = ddplab("calibrate", *map(str, paths), *shape, "-o", str(calib))
    assert code == 0, err
    code, out, err = ddplab("simulate", "h100-1024", "--calib", str(calib), "--steps", "20")
    assert code == 0, err
    assert "applied in mode 'device'" in out
    mfu = next(line for line in out.splitlines() if line.strip().startswith("compute.mfu"))
    assert "measured in r0.json.gz, rank 0, steps 0-4; measured in r1.json.gz, rank 1, steps 0-4" in mfu


def test_a_job_shape_faster_than_the_devices_peak_is_refused(ddplab, tmp_path):
    """The FLOPs of an achieved rate are the model's per token x the tokens the caller says the step
    ran: llama3-70b at 8 x 8192 tokens in a 4.5 ms step is ~460 PFLOP/s on one H100, above its
    989.4 TFLOP/s bf16 peak, so that is not the job that was traced: one line, exit 2, nothing
    written. gpt2-tiny at 2 x 64 tokens, the traced job, is far under it."""
    from calibrate import plausible
    from calibrate.trace_calib import JobShape, calibrate_traces

    steps = tuple(range(6))
    paths = [write(tmp_path / f"r{r}.json.gz", gpu_trace(r, steps=steps, jitter=0.02)) for r in (0, 1)]
    ok = calibrate_traces(paths, given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp"))
    assert ok.device_class == "h100" and plausible.problems(ok) == []
    from dataclasses import replace

    # An A100 has no FP8 matmuls (a100-8's compute.peak_fp8_tflop_s = 0): no FP8 step ran on one.
    assert plausible.problems(replace(ok, device_class="a100", precision="fp8")) == [
        "precision: fp8 on the a100 class, which has no such matmuls (a100-8)"
    ]
    out = tmp_path / "calib.json"
    job = ("--model", "llama3-70b", "--seq-len", "8192", "--micro-batch", "8", "--precision", "bf16-amp")
    code, _, err = ddplab("calibrate", *map(str, paths), *job, "-o", str(out))
    (line,) = [x for x in err.splitlines() if x.strip() and not x.startswith("calibrate: reading")]
    assert code == 2 and "above the h100 class's bf16-amp peak, 989.4 TFLOP/s (h100-1024)" in line, err
    assert line.endswith("pass the traced job's --model, --seq-len, --micro-batch and --precision")
    assert not out.exists() and not list(tmp_path.glob("*.png"))


def traced_job_step_s(c, *, ranks: int) -> float:
    """The mean simulated step of the synthetic traced job (gpt2-tiny, micro-batch 2, seq 64, one
    GPU a node) with the calibration ``c`` applied in mode all."""
    return traced_job(c, ranks=ranks).step_time_s.mean


def traced_job(c, *, ranks: int):
    """traced_job_step_s's simulation, its summary."""
    from calibrate.apply import apply_calibration
    from sim.engine import simulate
    from sim.scenario_file import scenario_from_dict

    data = {
        "name": "traced job", "ranks": ranks, "steps": 300, "model": {"preset": "gpt2-tiny"},
        "training": {"micro_batch_size": 2, "seq_len": 64, "precision": "bf16-amp"},
        "network": {"backend": "nccl", "algorithm": "ring", "gpus_per_node": 1, "nics_per_node": 1},
        "noise": {}, "compute": {},
    }  # fmt: skip
    applied = apply_calibration(data, c, calib_path="c.json", mode="all")
    return simulate(scenario_from_dict(applied.data), trace_steps=0).summary()


def test_a_gpu_trace_predicts_its_own_jobs_step_idle_included(tmp_path):
    """Each synthetic 10 ms step keeps the GPU busy 4.5-4.7 ms with compute and waits 0.5 ms for
    the all-reduce; the rest is idle (host work, data: whatever a job does between kernels). The
    simulator, calibrated in mode all on the traced job, must take 10 ms a step, not the 5.4 ms it
    took while the idle was dropped (before 2026-12-07: -45 %)."""
    from calibrate.trace_calib import JobShape, calibrate_traces

    paths = [
        write(tmp_path / f"r{r}.json.gz", gpu_trace(r, slow=1 + 0.01 * r, steps=tuple(range(10)), jitter=0.02))
        for r in (0, 1)
    ]
    c = calibrate_traces(paths, given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp"))
    assert traced_job_step_s(c, ranks=2) == pytest.approx(STEP_US * 1e-6, rel=0.02)


def test_on_another_model_the_optimizer_scales_with_parameters_and_the_rest_is_held(tmp_path):
    """In mode device (an H100 trace carried to h100-1024's GPT-2 760M) AdamW's step grows with
    the parameters; the step's rest (data, host work, GPU idle) is the job's, held as measured."""
    from calibrate.apply import calibration_layer
    from calibrate.trace_calib import JobShape, calibrate_traces
    from sim.scenario_file import load_scenario
    from sim.transformer import model_shape, param_count

    paths = [write(tmp_path / f"r{r}.json.gz", gpu_trace(r, steps=tuple(range(10)))) for r in (0, 1)]
    c = calibrate_traces(paths, given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp"))
    sc = load_scenario("h100-1024")
    layer = calibration_layer(sc, c, calib_path="c.json", mode="device")
    assert layer.mode == "device"
    (opt,) = [p for p in layer.patches if p.key == "compute.optimizer_s"]
    ratio = param_count(sc.model.shape) / param_count(model_shape("gpt2-tiny"))
    assert opt.value == pytest.approx(c.compute.optimizer_s.value * ratio + c.compute.outside_s.value, rel=1e-12)
    assert c.compute.outside_s.value == pytest.approx((STEP_US - 1000 - 3500 - (8200 - 7600) - 300) * 1e-6)
    assert "held at every scale" in opt.detail


@pytest.mark.parametrize(
    "forwards,given,micro_steps",
    [
        (((100, 1000), (1100, 1000)), None, 2),  # two forward passes a step: accumulation, counted
        (((100, 1000), (1100, 1000)), 1, 1),  # --grad-accum says otherwise: the caller's word
        (((100, 2000), (150, 1500)), None, 1),  # a user's "## forward ##" inside DDP's: one pass
    ],
)
def test_micro_steps_a_step_are_the_forward_passes_counted(tmp_path, forwards, given, micro_steps):
    """A job with gradient accumulation runs its forward once per micro-step inside one
    ProfilerStep; compute per micro-step is the step's over that count, as the probe times it."""
    from calibrate.trace_calib import JobShape, calibrate_traces

    paths = [write(tmp_path / f"r{r}.json.gz", gpu_trace(r, steps=tuple(range(10)), forwards=forwards)) for r in (0, 1)]
    job = JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp", grad_accum=given)
    c = calibrate_traces(paths, given=job)
    # The forward kernel (1000 us, launched at 200) and backward's 2000 + 1500, per micro-step.
    assert c.compute.step_s.points == [(128, pytest.approx(4500e-6 / micro_steps, rel=1e-9))]
    assert f"traced compute per micro-step ({micro_steps} a step)" in c.compute.achieved_tflop_s.source


def test_without_forward_annotations_a_gpu_steps_compute_leaves_the_optimizer_out(tmp_path):
    """With no forward annotation the step's compute is every compute kernel in it, the optimizer's
    300 us kernel too; forward + backward (split 1/3, 2/3 by FLOPs) is that less the optimizer's
    annotated kernels: 1000 + 2000 + 1500 us, as with the annotations (before: 4800)."""
    from calibrate.trace_calib import JobShape, calibrate_traces

    paths = [write(tmp_path / f"r{r}.json.gz", gpu_trace(r, steps=tuple(range(10)), forwards=())) for r in (0, 1)]
    c = calibrate_traces(paths, given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp"))
    assert c.compute.step_s.points == [(128, pytest.approx(4500e-6, rel=1e-9))]
    assert c.compute.optimizer_s.value == pytest.approx(300e-6, rel=1e-9)
    assert any(a.startswith("forward/backward annotations: compute split 1/3") for a in c.trace.absent)


def test_a_slow_data_loader_is_a_straggler_not_communication(tmp_path):
    """Three ranks, the same compute; rank 2's host starts each step 1000 us late (its data
    loader), so it joins the gradient sync at 8600 where the others join at 7600 and wait for it
    (their all-reduce runs to 9200). Before 2026-12-07 the calibration saw no straggler (the
    what-if scaled compute alone: 0 %), took the rest of the step from rank 0 (3600 us, without
    the delay) and tuned the network to the ranks' mean wait (1267 us, the delay in it): the
    traced job simulated 3.3 % fast, its loader's delay as communication."""
    from calibrate.trace_calib import JobShape, calibrate_traces
    from workflow.render_calib import trace_lines

    job = JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp")
    steps = tuple(range(10))

    def traces(name, late_us):
        return [
            write(
                tmp_path / f"{name}{r}.json.gz",
                gpu_trace(r, steps=steps, world=3, lead=late_us * (r == 2), sync_end=8200 + late_us),
            )
            for r in range(3)
        ]

    late = traces("late", 1000.0)
    fit = fit_traces([read_trace(p) for p in late])
    assert fit.last_to_sync() == (2, pytest.approx(1000e-6, rel=1e-9), pytest.approx(1000e-6, rel=1e-9))
    # Every rank at the median rank's speed: rank 2's 1000 us before its compute goes, 10 % of a step.
    assert fit.straggler_cost()["fraction"] == pytest.approx(0.10, rel=1e-9)
    c = calibrate_traces(late, given=job)
    assert c.trace.straggler_cost.value == pytest.approx(0.10, rel=1e-9)
    assert (c.trace.late_rank, c.trace.late_lead_s) == (2, pytest.approx(1000e-6, rel=1e-9))
    # Rank 2 is 1000 us late before the sync, outside compute, where the others are not: the
    # simulator puts that before rank 2's forward. The rest of the step is rank 2's less it:
    # 10000 - 4500 - 600 (its wait) - 300 - 1000 us. (Until 2026-12-07, second session, the rest
    # held the delay, 4600 us, after the wait on every rank: the step came out right, the others'
    # wait for rank 2 did not.)
    assert c.compute.host_delays_s.value == {2: pytest.approx(1000e-6, rel=1e-9)}
    assert c.compute.outside_s.value == pytest.approx(3600e-6, rel=1e-9)
    assert "rank 2's, the last to join the gradient sync, mean step outside" in c.compute.outside_s.source
    assert "less its 1 ms late before the sync" in c.compute.outside_s.source
    # Exposed communication is the least-waiting rank's: rank 2's all-reduce, 6200-9200 us, less
    # the 1500 us kernel under it; the others' (5200-9200 less theirs) hold 1000 us of waiting for
    # rank 2 more, said beside it.
    assert c.trace.exposed_comm_s.value == pytest.approx(1500e-6, rel=1e-9)
    assert "rank 0's, the most-waiting, 2.5 ms, its wait for the others in it" in c.trace.exposed_comm_s.source
    # The network is tuned to the wait after the last rank joined (600 us), as without the delay.
    on_time = calibrate_traces(traces("on_time", 0.0), given=job)
    busbw = c.networks["trace"].collectives["allreduce"].fit.busbw_gb_s
    assert busbw == pytest.approx(on_time.networks["trace"].collectives["allreduce"].fit.busbw_gb_s, rel=0.01)
    sim = traced_job(c, ranks=3)
    assert sim.step_time_s.mean == pytest.approx(STEP_US * 1e-6, rel=0.02)
    assert sim.host_delay_s == pytest.approx(1000e-6 / 3, rel=1e-9)
    # The ranks' mean wait, as traced: ranks 0 and 1 from 7600 to 9200 us, rank 2 from 8600
    # (1267 us); with the delay after the wait it was every rank's 600.
    assert sim.exposed_comm_s + sim.straggler_wait_s == pytest.approx((1600 + 1600 + 600) / 3 * 1e-6, rel=0.05)
    (late_line,) = [x for x in trace_lines(c) if x.startswith("late ")]
    assert late_line.startswith("late      rank 2 1.00 ms a step before the gradient sync outside compute"), late_line
    (line,) = [x for x in trace_lines(c) if x.startswith("stragglers")]
    assert "rank 2 joins the gradient sync last" in line and "10.0% less time" in line, line
    assert line.startswith("stragglers every rank computes at the median rank's speed; rank 2 joins"), line
    # The ranks picture shows it: the same compute, rank 2's bar taller by its lead.
    from output.calib_plots import sync_bars, write_calibration_plots

    who, comp, lead = sync_bars(c)
    assert who == [0, 1, 2] and comp == pytest.approx([4500e-6] * 3, rel=1e-9)
    assert lead == pytest.approx([3900e-6, 3900e-6, 4900e-6], rel=1e-9)  # from the last sync, 800 us before
    (png,) = [p for p in write_calibration_plots(c, tmp_path / "calib") if p.name == "calib-ranks.png"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_host_that_runs_ahead_is_not_a_late_rank(tmp_path):
    """Rank 1's host runs 2 ms ahead of its GPU (it never syncs: no loss.item()), so its
    ProfilerStep and launches come 2 ms earlier against the same kernels as rank 0's. Timed from
    the CPU's step start it would look 2 ms late to the sync and cost 10 % as a straggler; timed
    on the GPU from the previous sync, as now, both ranks join together and nothing is late."""
    ahead_us = 2000.0
    traces = []
    for r in (0, 1):
        data = gpu_trace(r, steps=tuple(range(6)))
        if r == 1:
            for e in data["traceEvents"]:
                if e["cat"] not in ("kernel", "gpu_user_annotation"):
                    e["ts"] -= ahead_us
        traces.append(read_trace(write(tmp_path / f"r{r}.json.gz", data)))
    fit = fit_traces(traces)
    rank, late_by, lead = fit.last_to_sync()
    assert late_by == pytest.approx(0.0, abs=1e-12) and lead == pytest.approx(0.0, abs=1e-12)
    assert fit.straggler_cost()["fraction"] == pytest.approx(0.0, abs=1e-12)


def test_whatif_tries_fixes_on_the_traced_job(tmp_path):
    """`whatif SCENARIO --calib <from traces>`: each fix tried on the measured job. The synthetic
    3-rank job whose rank 2 is 1 ms late each 10 ms step (its host, not its compute): the
    calibration lands in mode all (the measured machines), doing nothing takes the traced 10 ms,
    and with the delay gone (`host_delays_s=`, offered by default) the step is 1 ms shorter, which
    is what the delay cost: 10 % of the step, as the trace's what-if says with every rank at the
    median (here the median rank is on time)."""
    import json

    from calibrate.trace_calib import JobShape, calibrate_traces
    from workflow.whatif import study

    paths = [
        write(tmp_path / f"r{r}.json.gz", gpu_trace(r, steps=tuple(range(10)), world=3, lead=1000.0 * (r == 2),
                                                    sync_end=9200.0))
        for r in range(3)
    ]  # fmt: skip
    c = calibrate_traces(paths, given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp"))
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps(c.to_json()))
    job = tmp_path / "job.toml"
    job.write_text(
        'base = "h100-1024"\nranks = 3\nstragglers = ""\n[model]\npreset = "gpt2-tiny"\n'
        '[training]\nmicro_batch_size = 2\nseq_len = 64\nprecision = "bf16-amp"\n'
        '[network]\nbackend = "nccl"\ngpus_per_node = 1\nnics_per_node = 1\n'
    )
    found = study(str(job), steps=300, calib=str(calib))
    assert found.calibration == f"calibration {calib} applied in mode 'all' (the measured machines: nccl, 3 ranks)"
    rows = {r["mitigation"]: r for r in found.rows}
    assert "host_delays_s=" in rows and rows["nothing"]["host_delay_s"] == pytest.approx(1e-3 / 3, rel=1e-6)
    assert rows["nothing"]["step_time_s"] == pytest.approx(STEP_US * 1e-6, rel=0.02)
    saved = 1 - rows["host_delays_s="]["step_time_s"] / rows["nothing"]["step_time_s"]
    assert saved == pytest.approx(c.trace.straggler_cost.value, abs=0.01) and saved == pytest.approx(0.10, abs=0.01)


def test_each_all_reduce_draws_its_time_from_the_last_rank_to_sync(tmp_path):
    """The all-reduces' call-to-call jitter comes from the spans of the rank that waits least (the
    last to join the sync): its spans are the transfers, 2500 us plus that step's slowdown here,
    where the on-time rank's also hold its 500 us wait for the late one. Each multiplier is a span
    over its size's median, and `simulate --calib` resamples them per collective."""
    from calibrate.apply import apply_calibration
    from calibrate.trace_calib import JobShape, calibrate_traces

    extra = (0.0, 300.0, 0.0, 900.0, 100.0, 0.0, 600.0, 0.0, 200.0, 0.0)
    paths = [
        write(tmp_path / f"r{r}.json.gz", gpu_trace(r, steps=tuple(range(10)), lead=500.0 * r, sync_extra=extra))
        for r in range(2)
    ]
    c = calibrate_traces(paths, given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="bf16-amp"))
    j = c.networks["trace"].allreduce_jitter
    steps = [s.step for s in fit_traces([read_trace(p) for p in paths]).ranks[1].steps]
    spans = np.array([2500.0 + extra[n] for n in steps])
    assert j.multipliers == pytest.approx(spans / np.median(spans), abs=1e-6)
    assert j.sizes_bytes == [4 * MIB] * len(steps) and j.from_bytes == 4 * MIB
    assert "rank 1's (the least-waiting" in j.source
    data = {"ranks": 2, "model": {"preset": "gpt2-tiny"}, "training": {"seq_len": 64, "micro_batch_size": 2}}
    applied = apply_calibration(data, c, calib_path="calib.json", network="trace", mode="all").data
    assert applied["network"]["jitter_samples"] == j.multipliers and applied["network"]["jitter_sigma"] == 0.0


def _cpu_trace(rank: int, spans_us: list[float]) -> dict:
    """One rank of a 2-rank gloo job, CPU only: per step (us from its start) forward 100-2100,
    backward 3000-7000 issuing a 4 MiB all-reduce at 5000 that a gloo worker runs from 5100 for
    that step's ``spans_us``, the optimizer from 8300."""
    ev = []
    dims = {"Input Dims": [[MIB]], "Input type": ["float"]}
    for n, span in enumerate(spans_us):
        t0 = n * STEP_US
        ev.append(_x(f"ProfilerStep#{n}", t0, STEP_US, cat="user_annotation"))
        ev.append(_x("DistributedDataParallel.forward", t0 + 100, 2000, cat="user_annotation"))
        ev.append(_x("autograd::engine::evaluate_function: MmBackward0", t0 + 3000, 4000, tid=2))
        ev.append(_x("c10d::allreduce_", t0 + 5000, 50, tid=2, **dims))
        ev.append(_x("gloo:all_reduce", t0 + 5100, span, tid=3, **dims))
        ev.append(_x("Optimizer.step#AdamW.step", t0 + 8300, 500, cat="user_annotation"))
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": ev,
        "traceName": f"rank{rank}",
    }


def test_a_gloo_span_closed_after_its_step_is_cut_where_the_work_must_have_ended(tmp_path):
    """DDP's backward returns only when its all-reduces have completed, and the optimizer follows,
    so a gloo worker's span that closes after the optimizer began (the last traced step's, when
    the profiler stops on a starved box: 0.5 s after a 19 ms step in a real run) ends, for the fit,
    at the optimizer's start: 3200 us here, not 500 ms, in the collective's time, the step's
    communication and the jitter drawn from it."""
    from calibrate.trace_calib import JobShape, calibrate_traces

    spans = [2000.0, 2400.0, 2200.0, 2100.0, 2300.0, 2000.0, 2500.0, 2200.0, 500_000.0]
    paths = [write(tmp_path / f"r{r}.json.gz", _cpu_trace(r, spans)) for r in range(2)]
    fit = fit_traces([read_trace(p) for p in paths])
    got = [[c.seconds for c in s.collectives] for s in fit.ranks[0].steps]
    assert got == [[pytest.approx(x * 1e-6)] for x in (*spans[:-1], 3200.0)]
    assert fit.ranks[0].steps[-1].comm_s == pytest.approx(3200e-6)
    c = calibrate_traces(paths, given=JobShape(model="gpt2-tiny", seq_len=64, micro_batch=2, precision="fp32"))
    assert max(c.networks["trace"].allreduce_jitter.multipliers) < 2.0
