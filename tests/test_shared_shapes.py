"""One definition of the models, two readings: the simulator's arithmetic (sim/transformer.py,
sim/buckets.py) must equal the torch module realrun builds and the buckets real DDP
forms after its first-iteration rebuild."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT, free_port, run_here
from test_realrun_probe import _check_buckets, sim_buckets

from scenarios import load_models
from sim.transformer import model_shape, param_tensors

torch = pytest.importorskip("torch", reason="realrun needs torch")


@pytest.mark.parametrize("preset", list(load_models()))
def test_parameter_names_shapes_and_order(preset):
    from realrun.model import build

    module = build(preset, device="meta")
    real = [(name, tuple(p.shape)) for name, p in module.named_parameters()]
    assert real == [(t.name, t.shape) for t in param_tensors(model_shape(preset))]


# Run in a fresh process: a 1-rank gloo group, real DDP, a comm hook that records the
# bucket sizes DDP hands it. Step 0 uses one bucket; from step 1 the rebuilt ones.
_DDP_BUCKETS = """
import json, os, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from realrun.model import build
preset, seq, cap = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[4])
dist.init_process_group("gloo", rank=0, world_size=1)
model = build(preset)
kwargs = {} if cap == "default" else {"bucket_cap_mb": float(cap)}
ddp = DDP(model, **kwargs)
seen = []
def hook(_, bucket):
    seen.append(bucket.buffer().numel())
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut
ddp.register_comm_hook(None, hook)
x = torch.randint(0, model.cfg.vocab_size, (1, seq))
for step in range(2):
    seen.clear()
    ddp(x, x)[1].sum().backward()
print(json.dumps(seen))
"""


@pytest.mark.parametrize(
    "preset,seq,cap",
    [
        ("gpt2-tiny", 64, "0.02"),
        ("gpt2-tiny", 64, "0.05"),
        ("gpt2-tiny", 64, "default"),
        ("gpt2-124m", 8, "default"),
        ("llama-tiny", 64, "0.02"),  # untied lm_head first, no biases: the Llama layout's order
    ],
)
def test_sim_buckets_equal_real_ddp_buckets(preset, seq, cap, tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", _DDP_BUCKETS, preset, str(seq), cap, str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    real = json.loads(p.stdout.strip().splitlines()[-1])
    # sim's rule for the first bucket: 1 MiB with the default cap, else the cap itself.
    sim = sim_buckets(preset, seq, None if cap == "default" else float(cap))
    assert real == [b.numel for b in sim]
    assert len(real) > 1 or preset == "gpt2-tiny"


@pytest.mark.parametrize("precision,count", [("bf16-amp", 73), ("fp32", 73), ("bf16", 37)])
def test_760m_buckets_equal_torchs_own_assignment(precision, count):
    """DDP rebuilds its buckets after step 1 by compute_bucket_assignment_by_size over the
    gradients in the order they became ready (reducer.cpp rebuild_buckets), limits [1 MiB,
    25 MiB]. The same call on the preset built on the meta device in the precision's
    parameter dtype, taken in sim's ready order, gives sim's buckets: under AMP the gradients
    are fp32, 73 buckets of about 37.8 MB, as measured on an H200 (docs/gpu.md); only pure
    bf16 halves them. A bf16 comm hook keeps AMP's 73 buckets and halves the bytes sent."""
    import numpy as np
    import torch.distributed as dist

    from realrun.model import build
    from sim.scenario_file import load_scenario
    from sim.transformer import gradient_ready_order
    from sim.workload import build_workload

    sc = load_scenario("h100-1024", [f"training.precision={precision}"], ranks=8)
    module = build("gpt2-760m", device="meta").to(torch.bfloat16 if precision == "bf16" else torch.float32)
    params = dict(module.named_parameters())
    order = [name for name, _ in gradient_ready_order(model_shape("gpt2-760m"), 2048)]
    buckets, _ = dist._compute_bucket_assignment_by_size([params[n] for n in order], [1 << 20, 25 << 20])
    real = [sum(params[order[i]].numel() for i in b) for b in buckets]
    sim = build_workload(sc, np.random.default_rng(0))
    assert [b.numel for b in sim.buckets] == real
    assert len(real) == count
    if precision == "bf16-amp":
        mean_mb = np.mean([b.size_bytes for b in sim.buckets]) / 1e6
        assert 37.7 < np.median([b.size_bytes for b in sim.buckets]) / 1e6 < 37.9 and mean_mb > 37.8
        hook = load_scenario("h100-1024", ["training.comm_hook=bf16"], ranks=8)
        hooked = build_workload(hook, np.random.default_rng(0))
        assert len(hooked.buckets) == 73
        np.testing.assert_allclose(hooked.wire_bytes, sim.wire_bytes / 2)


def test_the_probes_bucket_profile_at_its_cap(tmp_path):
    """`ddplab probe --parts compute --bucket-cap-mb 0.05` on gpt2-tiny: the bucket-ready records
    name the 7 buckets DDP forms at that cap, in ready order, as sim/buckets.py builds them. One
    rank: the buckets and their order are a rank's own, a peer adds only its cost."""
    p = run_here(
        *("probe", "--nproc", "1", "--out", str(tmp_path), "--parts", "compute", "--model", "gpt2-tiny"),
        *("--seq-len", "64", "--micro-batches", "1", "--iters", "1", "--warmup", "0", "--bucket-cap-mb", "0.05"),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    from realrun.records import read_run

    (rank,) = read_run(tmp_path, "probe")
    _check_buckets(rank, "gpt2-tiny", 64, bucket_cap_mb=0.05)
    assert len(rank.of_type("bucket_ready")) == 7
    # The calibration's `buckets_default_cap` (the report's grey bars) takes a default-cap probe
    # only: these are another cap's buckets.
    from calibrate import compute_fit
    from calibrate.records import read_run as read_for_calibration

    run = read_for_calibration(tmp_path, "probe")
    assert run.config["bucket_cap_mb"] == 0.05 and len(run.of("bucket_ready", 0)) == 7
    assert compute_fit.bucket_profile([run]) == []
