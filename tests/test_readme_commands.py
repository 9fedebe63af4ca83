"""README.md's commands run as written and print what it shows (issue 16): the fast ones
through tests/readme_commands.py's own code, and that checker's extraction, matching
and classification on small samples, including a mismatch it must report."""

import os
import subprocess

import pytest
import readme_commands as rc
from conftest import ROOT

README_COMMANDS = rc.extract((ROOT / "README.md").read_text())
FAST = [c for c in README_COMMANDS if c.cls.speed == "fast" and c.cls.needs is None]


# --- the README's fast commands ---------------------------------------------------------


def _untracked() -> set[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True)
    return {line[3:] for line in out.stdout.decode().splitlines() if line.startswith("??")}


@pytest.fixture(scope="module")
def fast_results():
    """The whole fast set once, in README order (`ddplab stragglers runs/lemon` reads what
    the simulate just before it wrote), and the untracked files before and after."""
    if not (ROOT / ".venv" / "bin" / "ddplab").exists():
        pytest.skip("no .venv/bin/ddplab: the README's commands assume `make` built it")
    before = _untracked()
    results = {r.command.line: r for r in rc.check(README_COMMANDS, fast=True, timeout_s=120)}
    return results, before, _untracked()


def test_the_readme_has_fast_commands_to_check():
    # Guards against an extraction that silently finds nothing (every test below passing
    # vacuously): the README shows cost, simulate, collective, compare, whatif, goodput...
    assert len(FAST) >= 15
    assert any(c.text == "ddplab cost" for c in FAST)


@pytest.mark.parametrize("command", FAST, ids=lambda c: f"README:{c.line}")
def test_a_fast_readme_command_prints_what_the_readme_shows(command, fast_results):
    r = fast_results[0][command.line]
    shown = "\n".join([f"$ {command.text}", *r.diff, *r.notes, *r.output.splitlines()[-5:]])
    assert r.status == "pass", f"{r.why}:\n{shown}"
    assert r.rc == command.expected_rc


def test_the_fast_set_leaves_no_file_behind_in_the_tree(fast_results):
    # `launch --slurm job.sbatch` writes into the repository root; the checker removes a
    # file a command named and created, so running the check does not dirty a clone.
    results, before, after = fast_results
    assert after <= before
    for c in FAST:
        if "--slurm" in c.text:
            assert any(n.startswith("removed ") for n in results[c.line].notes), c.text


# --- extraction -------------------------------------------------------------------------

SAMPLE = """\
Prose with `ddplab cost` inline is not a command.

    $ indented, not fenced: not a command

```
$ echo one   # a comment
one
$ X=hello
$ echo "$X world" | tr a-z A-Z
HELLO WORLD

```

```toml
key = 1
```

```
$ printf 'a\\nb\\nc\\nd\\n'
a
...
d
$ printf 'x\\ny\\nz\\n'   # output trimmed
x
z
```
"""


def test_extract_finds_fenced_dollar_lines_with_their_output():
    cmds = rc.extract(SAMPLE)
    assert [c.text for c in cmds] == [
        "echo one   # a comment",
        "X=hello",
        'echo "$X world" | tr a-z A-Z',
        "printf 'a\\nb\\nc\\nd\\n'",
        "printf 'x\\ny\\nz\\n'   # output trimmed",
    ]
    assert [c.expected for c in cmds] == [["one"], [], ["HELLO WORLD"], ["a", "...", "d"], ["x", "z"]]
    assert [c.trimmed for c in cmds] == [False, False, False, False, True]
    assert [c.line for c in cmds] == [6, 8, 9, 19, 23]


def test_the_sample_runs_and_matches_with_variables_elisions_and_trims():
    results = rc.check(rc.extract(SAMPLE), timeout_s=30)
    assert [(r.status, r.rc, r.diff) for r in results] == [("pass", 0, [])] * 5


# --- matching ---------------------------------------------------------------------------


def test_a_changed_number_is_a_mismatch_shown_line_by_line():
    readme = ["  step time        0.209 s mean", "  simulated in     0.36 s"]
    printed = ["  step time   0.210 s mean", "  simulated in 1.20 s"]
    assert rc.compare(readme, printed) == ["- step time 0.209 s mean", "+ step time 0.210 s mean"]


def test_the_checker_reports_a_command_whose_output_is_not_the_readmes(tmp_path):
    # The README says 2; the command prints 3: the run must come out as a difference,
    # and the script's exit status 1, so the checker can fail.
    md = "```\n$ echo 3\n2\n```\n"
    (r,) = rc.check(rc.extract(md), timeout_s=30)
    assert (r.status, r.rc, r.diff) == ("diff", 0, ["- 2", "+ 3"])
    readme = tmp_path / "README.md"
    readme.write_text(md)
    assert rc.main(["--readme", str(readme)]) == 1
    readme.write_text("```\n$ echo 2\n2\n```\n")
    assert rc.main(["--readme", str(readme)]) == 0


def test_a_command_shown_without_output_is_held_to_its_exit_status():
    md = "```\n$ echo made runs/x\n$ echo next\nnext\n$ false\n$ echo last\nlast\n```\n"
    results = rc.check(rc.extract(md), timeout_s=30)
    assert [(r.status, r.rc) for r in results] == [("pass", 0), ("pass", 0), ("fail", 1), ("pass", 0)]
    assert results[0].notes == ["the README shows no output: exit status checked only"]


def test_an_unexpected_exit_status_fails_even_with_the_same_output():
    (r,) = rc.check(rc.extract("```\n$ echo same; false\nsame\n```\n"), timeout_s=30)
    assert (r.status, r.rc) == ("fail", 1)
    # A pipe does not hide the failure of its first command (set -o pipefail).
    (r,) = rc.check(rc.extract("```\n$ (echo same; exit 3) | grep same\nsame\n```\n"), timeout_s=30)
    assert (r.status, r.rc) == ("fail", 3)


def test_whitespace_and_volatile_fields_are_masked_and_nothing_else():
    assert rc.compare(["a    b  1.00 s"], ["a b 1.00 s   "]) == []
    for readme, printed in [
        ("simulated in     0.36 s", "simulated in 2.5 s"),
        ("report (stages took 282 s in all)", "report (stages took 301 s in all)"),
        ("moved to runs/x.old-20261130-215903", "moved to runs/x.old-20270101-000000"),
        ("started 2026-11-30 21:59:03", "started 2027-01-02 03:04:05"),
        ("the launcher (pid 4242) is gone", "the launcher (pid 77) is gone"),
        ("wrote /tmp/tmpab12/x.json", "wrote /tmp/pytest-9/y.json"),
    ]:
        assert rc.compare([readme], [printed]) == [], readme
    assert rc.compare(["[1/5] 2 ranks x 200 steps: 0.18 s"], ["[1/5] 2 ranks x 200 steps: 0.31 s"]) == []
    assert rc.compare(["[1/5] 2 ranks x 200 steps: 0.18 s"], ["[1/5] 8 ranks x 200 steps: 0.18 s"]) != []
    # Progress a terminal rewrites in place and clears is not output the README could show.
    assert rc.compare(["done"], ["simulating 1,024 ranks: step 75/300 (25%), 3 s", "done"]) == []
    assert rc.compare(["rank 1: 50.4 ms"], ["rank 0: 49.9 ms"]) != []
    # A measurement's numbers are masked, its words are not.
    assert rc.compare(["rank 1: 50.4 ms"], ["rank 0: 49.9 ms"], measured=True) == []
    assert rc.compare(["rank 1: 50.4 ms"], ["rank 0: 49.9 s"], measured=True) != []


def test_elisions_anchor_the_ends_and_keep_the_order():
    printed = ["head", "1", "2", "mid", "3", "tail"]
    assert rc.compare(["head", "...", "mid", "...", "tail"], printed) == []
    assert rc.compare(["head", "...", "tail"], printed) == []
    assert rc.compare(["...", "mid", "..."], printed) == []
    assert rc.compare(["head", "...", "mid"], printed) == ["- mid", "+ tail"]  # the end is anchored
    assert rc.compare(["1", "...", "tail"], printed) == ["- 1", "+ head"]  # so is the start
    assert rc.compare(["head", "...", "3", "...", "mid", "...", "tail"], printed) != []
    # trimmed: the README's lines anywhere, but in order
    assert rc.compare(["1", "3"], printed, trimmed=True) == []
    assert rc.compare(["3", "1"], printed, trimmed=True) == ["- 1", "+ (not printed, in this order)"]
    # without either, a line the README lacks is a difference
    assert rc.compare(printed[:-1], printed) == ["+ tail"]


# --- classification ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, speed, needs",
    [
        ("ddplab cost --compute-s 1.5", "fast", None),
        ("ddplab scenarios --keys | head", "fast", None),
        ("ddplab launch --nodes 2 --master 1.2.3.4:29500 -- train", "fast", None),
        ("ddplab launch --nodes 2 --master 1.2.3.4:29500 --exec -- train", "slow", "machines"),
        ("torchrun --nnodes=2 --nproc-per-node=8 -m realrun train", "slow", "machines"),
        ("ddplab train --nproc 2 --backend nccl --out runs/x", "slow", "gpu"),
        ("ddplab train --nproc 2 --out runs/x", "slow", None),
        ("ddplab netlab run --rate 1gbit -- train", "slow", "root"),
        ("sudo ip link", "slow", "root"),
        ("make demo DEMO_ARGS=--fresh   # as root", "slow", "root"),
        ("ddplab doctor --master 10.0.0.1:29500", "this-machine", None),
        ("printf 'ranks = 64\\n' > mine.toml", "fast", None),
        ("echo $(rm -rf runs)", "slow", None),
        ("rm -rf runs", "slow", None),  # unknown commands are never assumed quick
    ],
)
def test_classification(text, speed, needs):
    assert (rc.classify(text).speed, rc.classify(text).needs) == (speed, needs)


def test_a_command_needing_what_is_missing_is_skipped_with_its_reason(monkeypatch):
    md = "```\n$ ddplab netlab run -- train\nx\n$ ddplab launch --exec --nodes 2 -- train\n$ ddplab train\n```\n"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    results = rc.check(rc.extract(md), fast=True, timeout_s=30)
    assert [(r.status, r.why.split(" (")[0]) for r in results] == [("skip", "not fast")] * 3
    results = rc.check(rc.extract(md)[:2], timeout_s=30)
    assert [(r.status, r.why.split(":")[0]) for r in results] == [
        ("skip", "needs root"),
        ("skip", "needs other machines to join"),
    ]


def test_expected_exit_status_follows_what_the_readme_shows():
    err = rc.extract("```\n$ ddplab simulate x.toml\nddplab simulate: error: no\n```\n")[0]
    doc = rc.extract("```\n$ ddplab doctor --master a:1\nproblems (2):\n```\n")[0]
    ok = rc.extract("```\n$ ddplab doctor --master a:1\nport 1: open\n```\n")[0]
    assert (err.expected_rc, doc.expected_rc, ok.expected_rc) == (2, 1, 0)


# --- what the checker does around a command ---------------------------------------------


def test_the_paths_a_command_names_expand_the_readmes_variables():
    paths = rc._named_paths("ddplab calibrate $V/1gbit/probe -o ${V}/calib.json  # x.y", ["V=measurements/validation"])
    assert paths == [ROOT / "measurements/validation/1gbit/probe", ROOT / "measurements/validation/calib.json"]


def test_a_claimed_folder_is_made_room_for_and_left_as_it_was(tmp_path, monkeypatch):
    """probe, train and simulate refuse a folder holding an earlier run, so the check moves
    one aside (a second check must see what a fresh clone sees); a later command reads what
    an earlier wrote; after the last, the check's runs are removed and the earlier run is
    back where it was, so `make test` leaves a reader's runs/ as it found it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ddplab"  # writes a marker into its --out folder, as a run would
    fake.write_text(
        '#!/bin/bash\nout=""\nwhile [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done\n'
        'mkdir -p "$out" && echo new > "$out/marker"\n'
    )
    fake.chmod(0o755)
    env = rc._env
    monkeypatch.setattr(rc, "_env", lambda: env() | {"PATH": f"{bin_dir}{os.pathsep}{env()['PATH']}"})
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "marker").write_text("earlier\n")
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "x.json").write_text("{}")
    md = (
        f"```\n$ ddplab simulate h100-1024 --out {tmp_path}/sim\n$ cat {tmp_path}/sim/marker\nnew\n"
        f"$ ddplab train --nproc 2 --out {tmp_path}/fresh\n"
        f"$ ddplab stragglers {tmp_path}/rep --out {tmp_path}/rep\n```\n"
    )
    results = rc.check(rc.extract(md), timeout_s=30)
    assert [r.status for r in results] == ["pass"] * 4
    assert results[0].notes[0].startswith(f"moved an earlier run aside: {tmp_path}/sim -> {tmp_path}/sim.old-readme-")
    assert results[0].notes[1] == f"removed {tmp_path}/sim, which the command wrote, and put the earlier run back"
    assert (tmp_path / "sim" / "marker").read_text() == "earlier\n"
    assert results[2].notes == [f"removed {tmp_path}/fresh, which the command wrote, after the check"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "rep", "sim"]
    assert results[3].notes == [] and (tmp_path / "rep" / "x.json").exists()  # stragglers claims no folder


def test_a_file_a_command_writes_in_the_tree_stays_for_the_next_and_is_removed_after():
    name = "readme-commands-sample.txt"  # not ignored: the clean-up's case (job.sbatch)
    md = f"```\n$ echo kept > {name}\n$ cat {name}\nkept\n```\n"
    try:
        results = rc.check(rc.extract(md), timeout_s=30)
        assert [r.status for r in results] == ["pass", "pass"]
        assert not (ROOT / name).exists()
        assert results[0].notes == [f"removed {name}, which the command wrote, after the check"]
    finally:
        (ROOT / name).unlink(missing_ok=True)


# --- --all: every command in a fresh clone ----------------------------------------------


def test_all_holds_a_this_machine_command_to_its_exit_status(monkeypatch):
    # doctor's output is the README machine's interfaces and hostname: under --all (a
    # fresh clone, maybe elsewhere) it must exit as the README says, its lines may differ.
    monkeypatch.setattr(rc, "classify", lambda text: rc.Class("this-machine", None, False, "its own machine"))
    md = "```\n$ echo elsewhere\nhere\n```\n"
    (strict,) = rc.check(rc.extract(md), timeout_s=30)
    (every,) = rc.check(rc.extract(md), every=True, timeout_s=30)
    assert strict.status == "diff"
    assert (every.status, every.rc, every.diff) == ("pass", 0, [])
    assert every.notes == ["exit status checked only: its own machine"]
    (failing,) = rc.check(rc.extract("```\n$ false\nhere\n```\n"), every=True, timeout_s=30)
    assert failing.status == "fail"


def test_all_runs_make_demo_first_when_nothing_built_it(monkeypatch, tmp_path):
    # "after make demo": without .venv, and with the README's demo line needing root
    # that this user lacks, plain `make demo` runs first so later commands find ddplab.
    commands = rc.extract("```\n$ make demo DEMO_ARGS=--fresh   # as root\nx\n$ ddplab cost\n```\n")
    monkeypatch.setattr(rc, "ROOT", tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    first, *rest = rc.setup_for_all(commands)
    assert (first.line, first.text.split("#")[0].strip(), first.expected) == (0, "make demo", [])
    assert rest == commands
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # the README's own line builds it
    assert rc.setup_for_all(commands) == commands
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "ddplab").write_text("")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # already built
    assert rc.setup_for_all(commands) == commands


def test_all_and_fast_are_exclusive():
    with pytest.raises(SystemExit):
        rc.main(["--all", "--fast", "--list"])
