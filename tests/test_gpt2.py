"""Parameter counts, FLOPs and DDP buckets from the GPT-2 layer shapes."""

import pytest

from sim.buckets import MIB, build_buckets
from sim.transformer import flops_per_token, gradient_ready_order, model_shape, param_count, param_tensors

COUNTS = {
    "gpt2-124m": 124_439_808,
    "gpt2-350m": 354_823_168,
    "gpt2-760m": 760_300_032,
    "gpt2-large": 774_030_080,
    # Hugging Face's gpt2-xl (tied embeddings); llm.c's "GPT-2 (1.5B)".
    "gpt2-xl": 1_557_611_200,
}


@pytest.mark.parametrize("preset", COUNTS)
def test_param_counts(preset):
    assert param_count(model_shape(preset)) == COUNTS[preset]


def test_flops_per_token_760m():
    # 6N + 12 L H Q T at T = 2048: ~5.47 GFLOP/token (docs/references.md "Models").
    s = model_shape("gpt2-760m")
    assert flops_per_token(s, 2048) == 6 * 760_300_032 + 12 * 24 * 1536 * 2048
    assert flops_per_token(s, 2048) == pytest.approx(5.47e9, rel=1e-3)


def test_ready_order_is_reverse_parameter_order():
    s = model_shape("gpt2-124m")
    names = [n for n, _ in gradient_ready_order(s, 1024)]
    params = [t.name for t in param_tensors(s)]
    assert sorted(names) == sorted(params)
    # Same tensors, reverse order, except within an op (weight/bias of one layer).
    assert names[0].startswith("transformer.ln_f") and names[-1] == "transformer.wte.weight"
    fracs = [f for _, f in gradient_ready_order(s, 1024)]
    assert fracs == sorted(fracs) and fracs[-1] == 1.0 and fracs[0] > 0


def test_lm_head_delays_first_gradient():
    # The tied lm_head (2 V d FLOPs/token) runs first in backward but produces no
    # complete gradient, so the first ready fraction is its share of the FLOPs.
    s = model_shape("gpt2-760m")
    first = gradient_ready_order(s, 2048)[0][1]
    d, v, L, T = 1536, 50257, 24, 2048
    total = 2 * v * d + L * (2 * 12 * d * d + 4 * T * d)
    assert first == pytest.approx(2 * v * d / total, rel=1e-12)


@pytest.mark.parametrize("cap_mb,bytes_per_grad", [(25, 2), (25, 4), (1, 2), (100, 4)])
def test_buckets_follow_ddp_rules(cap_mb, bytes_per_grad):
    s = model_shape("gpt2-760m")
    buckets = build_buckets(s, 2048, bytes_per_grad=bytes_per_grad, bucket_cap_mb=cap_mb, first_bucket_mb=1)
    sizes = {t.name: t.numel for t in param_tensors(s)}
    assert sum(b.numel for b in buckets) == param_count(s)
    assert sorted(p for b in buckets for p in b.params) == sorted(sizes)
    for b in buckets[:-1]:
        limit = (1 if b.index == 0 else cap_mb) * MIB
        # Closed as soon as it reached its limit, not before.
        assert b.size_bytes >= limit
        assert b.size_bytes - sizes[b.params[-1]] * bytes_per_grad < limit
    assert [b.ready_fraction for b in buckets] == sorted(b.ready_fraction for b in buckets)
    assert buckets[-1].ready_fraction == 1.0
    assert "transformer.wte.weight" in buckets[-1].params


def test_bigger_cap_fewer_buckets():
    s = model_shape("gpt2-760m")
    counts = [
        len(build_buckets(s, 2048, bytes_per_grad=2, bucket_cap_mb=c, first_bucket_mb=1)) for c in (5, 25, 100, 10_000)
    ]
    assert counts == sorted(counts, reverse=True)
    assert counts[-1] == 2  # the 1 MiB first bucket, then everything else


def test_powersgd_elements():
    s = model_shape("gpt2-tiny")
    b = build_buckets(s, 64, bytes_per_grad=4, bucket_cap_mb=1000, first_bucket_mb=1000, powersgd_rank=1)
    assert len(b) == 1
    # Matrices n x m send (n + m) r; vectors go uncompressed.
    expected = 0
    for t in param_tensors(s):
        expected += (t.shape[0] + t.shape[1]) if len(t.shape) == 2 else t.shape[0]
    assert b[0].powersgd_numel == expected


def test_bad_model_preset():
    with pytest.raises(ValueError, match="model.preset"):
        model_shape("gpt2-9000b")
