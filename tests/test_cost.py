"""`ddplab cost` reproduces the seed's comm_cost.py table and extends it."""

import json

import pytest

from sim.cost import link_costs, parse_link, ring_traffic_bytes


def test_seed_table():
    rows = link_costs(params=760e6, bytes_per_param=2, ranks=2, efficiency=0.85)
    got = {r.link: r.seconds_per_step for r in rows}
    # The seed: 14.31 / 5.72 / 1.43 / 0.036 s per step.
    assert round(got["1GbE"], 2) == 14.31
    assert round(got["2.5GbE"], 2) == 5.72
    assert round(got["10GbE"], 2) == 1.43
    assert round(got["RoCE 400G"], 3) == 0.036


def test_ring_traffic_closed_form():
    # 2(N-1)/N x S; N=2 moves S, N -> infinity approaches 2S.
    assert ring_traffic_bytes(1e9, 2, 2) == 2e9
    assert ring_traffic_bytes(1e9, 2, 1024) == pytest.approx(2 * 1023 / 1024 * 2e9, rel=1e-15)


def test_accumulation_divides_the_ratio():
    one = link_costs(params=760e6, bytes_per_param=2, ranks=2, efficiency=0.85, compute_s=1.5)
    four = link_costs(params=760e6, bytes_per_param=2, ranks=2, efficiency=0.85, compute_s=1.5, grad_accum=4)
    for a, b in zip(one, four, strict=True):
        assert a.seconds_per_step == b.seconds_per_step  # still one allreduce per optimizer step
        assert b.comm_compute_ratio == pytest.approx(a.comm_compute_ratio / 4, rel=1e-12)
    # 1GbE at 1.5 s compute: 14.31 / 1.5 = 9.5x communication-bound (the seed's "10x").
    assert one[0].comm_compute_ratio == pytest.approx(14.3059 / 1.5, rel=1e-4)


def test_parse_link():
    assert parse_link("25GbE=25") == ("25GbE", 25.0)
    for bad in ("25GbE", "=25", "x=-1", "x=fast"):
        with pytest.raises(ValueError, match="--link"):
            parse_link(bad)


def test_cli_json(ddplab):
    code, out, err = ddplab("cost", "--json", "--link", "1GbE=1", "--link", "100G=100", "--compute-s", "1.5")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["link"] for r in rows] == ["1GbE", "100G"]
    assert set(rows[0]) >= {"link", "link_gbit_s", "traffic_bytes", "seconds_per_step", "comm_compute_ratio"}
    assert rows[0]["traffic_bytes"] == 1.52e9
    assert rows[0]["seconds_per_step"] == pytest.approx(1.52e9 / (1e9 / 8 * 0.85), rel=1e-12)


def test_cli_table_reproduces_seed(ddplab):
    code, out, _ = ddplab("cost", "--compute-s", "1.5")
    assert code == 0
    for text in ("14.31 s", "5.72 s", "1.43 s", "0.036 s", "communication-bound x 9.5"):
        assert text in out
