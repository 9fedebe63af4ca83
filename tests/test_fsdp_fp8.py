"""training.fp8_all_gather: FSDP gathers each block's linear weights in FP8, one byte a parameter
(torchao's enable_fsdp_float8_all_gather, as torchtitan runs it); the root and the norms stay
16-bit and the reduce-scatters are unchanged. Closed forms on Llama 3 8B's shapes."""

import numpy as np
import pytest

from sim.fsdp import build_fsdp_workload
from sim.memory import estimate_memory
from sim.scenario_file import load_scenario

GIB = 1 << 30
D, KV, FFN, VOCAB = 4096, 1024, 14336, 128256
# One block's linear weights: Q and O (d x d), K and V (d x kv), and the SwiGLU's three d x ffn.
LINEAR = 2 * D * D + 2 * D * KV + 3 * D * FFN
NORMS = 2 * D


def _scenario(fp8_all_gather: bool):
    sets = ["model.preset=llama3-8b", "training.seq_len=8192", "training.mode=fsdp", "training.micro_batch_size=1",
            "training.precision=fp8", f"training.fp8_all_gather={str(fp8_all_gather).lower()}"]  # fmt: skip
    return load_scenario("h100-1024", sets, ranks=16)


def test_blocks_gather_fp8_linear_weights_and_everything_else_is_unchanged():
    off, on = (build_fsdp_workload(_scenario(f), np.random.default_rng(0)) for f in (False, True))
    assert off.ops == on.ops and off.units == on.units
    for op, unit, a, b in zip(on.ops, on.units, off.wire_bytes, on.wire_bytes, strict=True):
        if op == "allgather" and unit > 0:
            assert a == 2 * (LINEAR + NORMS) and b == LINEAR + 2 * NORMS  # bf16 -> FP8 linears
        else:  # the root's allgather (embeddings, final norm, output layer) and every reduce-scatter
            assert a == b
    gathers = sum(op == "allgather" and u > 0 for op, u in zip(on.ops, on.units, strict=True))
    assert gathers == 2 * 32  # each block gathered for forward and again for backward
    saved = float(np.sum(off.wire_bytes) - np.sum(on.wire_bytes))
    assert saved == gathers * LINEAR
    assert np.sum(on.collective_s) < np.sum(off.collective_s)


def test_the_gathered_blocks_in_memory_are_fp8_too():
    off, on = (estimate_memory(_scenario(f)) for f in (False, True))
    in_flight = 2  # the block computing and the one prefetched (fsdp_prefetch = 1)
    assert (off.fsdp_unsharded_gib - on.fsdp_unsharded_gib) * GIB == pytest.approx(in_flight * LINEAR)
    assert off.optimizer_state_gib == on.optimizer_state_gib and off.activations_gib == on.activations_gib


@pytest.mark.parametrize(
    ("sets", "why"),
    [
        (["training.precision=bf16-amp"], "needs training.precision = fp8"),
        (["training.mode=ddp"], "needs training.mode fsdp or hsdp"),
        (["training.tp=8", "training.sequence_parallel=true"], "is modelled for FSDP alone"),
    ],
)
def test_refused_where_it_does_not_apply(ddplab, sets, why):
    base = ["--set", "model.preset=llama3-8b", "--set", "training.mode=fsdp", "--set", "training.precision=fp8"]
    extra = [w for s in sets for w in ("--set", s)]
    code, out, err = ddplab("simulate", "h100-1024", "--ranks", "64", *base, *extra,
                            "--set", "training.fp8_all_gather=true")  # fmt: skip
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "training.fp8_all_gather: " + why in line and line.endswith("got True")
