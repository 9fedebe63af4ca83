"""Bad input: one line naming the key and the value, exit code 2, no traceback."""

import pytest

CASES = [
    (["simulate", "h100-1024", "--set", "noise.sigm=0.1"], "noise.sigm", "unknown key"),
    (["simulate", "h100-1024", "--set", "bogus=1"], "bogus", "unknown key"),
    (["simulate", "h100-1024", "--set", "noise.sigma=abc"], "noise.sigma", "'abc'"),
    (["simulate", "h100-1024", "--set", "training.overlap=3"], "training.overlap", "3"),
    (["simulate", "h100-1024", "--set", "training.grad_accum=1.5"], "training.grad_accum", "1.5"),
    (["simulate", "h100-1024", "--set", "noise.sigma=-0.1"], "noise.sigma", "-0.1"),
    (["simulate", "h100-1024", "--set", "noise.distribution=cauchy"], "noise.distribution", "cauchy"),
    (["simulate", "h100-1024", "--set", "training.bucket_cap_mb=0"], "training.bucket_cap_mb", "0"),
    (["simulate", "h100-1024", "--ranks", "12"], "ranks", "12"),
    (["simulate", "h100-1024", "--ranks", "0"], "ranks", "0"),
    (["simulate", "h100-1024", "--steps", "0"], "steps", "0"),
    (["simulate", "h100-1024", "--sweep-ranks", "8,x"], "--sweep-ranks", "8,x"),
    (["simulate", "h100-1024", "--sweep-ranks", "8,12"], "ranks", "12"),
    (["simulate", "h100-1024", "--set", "stragglers=5000:1.4"], "stragglers", "5000:1.4"),
    (["simulate", "homelab-1gbe", "--set", "stragglers=1:fast"], "stragglers", "1:fast"),
    # gloo runs its ring whatever the key says: taken and ignored until 2026-12-07.
    (["simulate", "homelab-1gbe", "--set", "network.algorithm=tree"], "network.algorithm", "gloo runs its own ring"),
    (["simulate", "no-such-preset"], "scenario", "no-such-preset"),
    (["simulate", "h100-1024", "--set", "model.preset=gpt5"], "model.preset", "gpt5"),
    (["collective", "h100-1024", "--sizes", "0"], "--sizes", "0"),
    (["collective", "h100-1024", "--sizes=-1M"], "--sizes", "-1M"),
    (["collective", "h100-1024", "--sizes", "1M,lots"], "--sizes", "lots"),
    (["cost", "--ranks", "1"], "--ranks", "1"),
    (["cost", "--efficiency", "1.5"], "--efficiency", "1.5"),
    (["cost", "--link", "fast"], "--link", "fast"),
    (["cost", "--params", "abc"], "--params", "abc"),
]


@pytest.mark.parametrize("args,key,value", CASES, ids=[" ".join(c[0][:4]) for c in CASES])
def test_bad_input_one_line_exit_2(ddplab, args, key, value):
    code, out, err = ddplab(*args)
    assert code == 2, (out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert key in lines[0] and value in lines[0], lines[0]


def test_malformed_toml(ddplab, tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("ranks = 8\n[network\n")
    code, _, err = ddplab("simulate", str(bad))
    assert code == 2 and "Traceback" not in err
    assert str(bad) in err and "malformed TOML" in err and len(err.strip().splitlines()) == 1


def test_wrong_section_type_in_file(ddplab, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('network = "fast"\n')
    code, _, err = ddplab("simulate", str(bad))
    assert code == 2 and "network" in err and "fast" in err


def test_out_is_a_file(ddplab, tmp_path):
    f = tmp_path / "taken"
    f.write_text("")
    code, out, err = ddplab("simulate", "homelab-1gbe", "--steps", "2", "--out", str(f))
    assert code == 2 and "Traceback" not in err and str(f) in err and len(err.strip().splitlines()) == 1


def test_a_study_keyword_without_its_option_is_a_bug_named_not_a_default():
    # ddplab/options.py call: goodput and whatif hand their flags to their studies by name; a
    # keyword the parser never defined must fail loudly rather than run on its default.
    import argparse

    from ddplab import options

    def study(*, mtbf_h, seed=0):
        return mtbf_h, seed

    with pytest.raises(KeyError, match="study: no option for seed"):
        options.call(study, argparse.Namespace(mtbf_h=5.0))
    assert options.call(study, argparse.Namespace(mtbf_h=5.0, seed=3)) == (5.0, 3)
    assert options.call(study, argparse.Namespace(mtbf_h=5.0), seed=7) == (5.0, 7)


@pytest.mark.parametrize(
    "args,says",
    [
        (("--parts", "collectives", "--model", "gpt2-760m"),
         "--model gpt2-760m: only the compute/overlap/tp/pp probe reads it, and --parts is collectives"),
        (("--parts", "compute", "--sizes", "1M"), "--sizes 1048576: only the collectives probe reads it"),
        (("--parts", "compute,overlap", "--sched", "other"), "--sched other: only the collectives probe reads it"),
        (("--parts", "collectives", "--link-bytes", "8M"), "--link-bytes 8388608: only the link probe reads it"),
        (("--quick", "--micro-batches", "2"),
         "--micro-batches 2: only the compute/overlap/tp/pp probe reads it, and --quick runs the 64 MB"),
    ],
)  # fmt: skip
def test_a_probe_option_no_asked_part_reads_is_refused(ddplab, tmp_path, args, says):
    """`probe --parts collectives --model gpt2-760m` once swept collectives and said nothing: its
    user took the records for the 760M model's."""
    out = tmp_path / "run"
    code, _, err = ddplab("probe", "--nproc", "2", "--out", str(out), *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and says in lines[0], err
    assert not out.exists()


def test_probe_options_an_asked_part_reads_pass_the_check():
    from realrun.cli import check_probe_parts, probe_parser

    for argv in (
        ["--parts", "collectives", "--ops", "allreduce", "--sizes", "1K"],
        ["--parts", "compute,link", "--model", "gpt2-124m", "--link-bytes", "1M"],
        ["--parts", "pp", "--micro-batches", "4"],
        ["--parts", "collectives", "--model", "gpt2-tiny"],  # the default, said again: nothing unused
    ):
        check_probe_parts(probe_parser().parse_args(["--out", "x", *argv]))
