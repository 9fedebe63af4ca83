"""Run every command README.md shows and check that it prints what the README says.

    .venv/bin/python tests/readme_commands.py [--fast | --all] [--list] [--timeout-s S] [--readme FILE]

    git clone /work/main /tmp/x && cd /tmp/x && python3 tests/readme_commands.py --all

A command is a line starting with "$ " inside a fenced code block; the lines after it,
up to the next "$ " line or the block's end, are the output the README shows for it.
Each command runs with bash from the repository root, .venv/bin first on PATH (as
after `source .venv/bin/activate`), stdout and stderr together (what a terminal
shows), under `set -o pipefail` so that `ddplab ... | grep` still fails when ddplab
does. Shell variables the README sets (`V=measurements/validation`) carry over to
every later command, as in the reader's shell.

Matching, line by line after collapsing runs of whitespace (column widths may move):
- volatile fields are masked on both sides first (MASKS: the simulator's own wall
  time, a sweep's per-scale times, "(N s)" durations, dates, pids, temporary paths);
- a command whose output is a measurement of this machine (probe, train, netlab run,
  the demo) has every number masked: its lines must match in shape and words;
- a "..." line in the README stands for any number of lines; a "trimmed" in the
  command's comment means the README left lines out anywhere (its lines must appear
  in order); otherwise the output must be the README's, line for line. A command the
  README shows with no output at all (a step before the one it shows) is held to its
  exit status only. A long simulation's progress lines, which a terminal rewrites in
  place and clears, are dropped (TERMINAL_ONLY).
The exit status expected is the README's: 2 when it shows "ddplab X: error:", 1 for a
doctor run that lists problems, else 0.

Commands are classified (CLASSES): fast (seconds), slow (torch, minutes), this-machine
(output describes the README machine's own network), and the needs: root (netlab,
sudo), a GPU (--backend nccl) or other machines (launch --exec, multi-node torchrun).
Without what a command needs it is reported as skipped, with the reason, never as
passed. `--fast` runs only the fast ones (what tests/test_readme_commands.py runs).

`--all` is the acceptance check "every README command runs as written in a fresh clone
after `make demo`": run it from a fresh clone with any python3 (the checker needs
nothing beyond the standard library). It runs every command in README order, slow ones
included: the README's own `make demo` line comes first and builds .venv (when that line
cannot run here, as a non-root user, plain `make demo` runs first in its place, so the
later commands find .venv). Each command is held to its exit status; its output is
compared where it is deterministic (simulations, calibrate and validate of committed
runs), in shape where it is a measurement (numbers masked: the demo, probe, train,
netlab run) and not at all where it describes the README's machine (doctor: its
interfaces and hostname are not a clone's). A slow command may run for
`--slow-timeout-s` (default 1800 s: `make demo` builds .venv and measures for minutes).
It says when the tree is not a fresh clone (local changes, an earlier runs/), since
what it proves is what a new reader gets. A command that refuses a run folder holding
an earlier run (probe, train, simulate, compare, netlab run) finds it moved aside
first, as --force would (never deleted), so the check sees a fresh clone's runs/.
After the last command (a later one may read what an earlier wrote) the runs the
check wrote are removed and the earlier ones renamed back, and a file a command names
and creates outside the ignored paths (launch's `--slurm job.sbatch`) is removed, so
the check leaves the tree, runs/ included, as it found it.

Prints one line per command (status, seconds, README line, command), the differences
under each mismatch, and a summary; exits 1 when any command that ran failed, timed
out or printed something else than the README.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Volatile fields, masked on both sides before comparing: (pattern, replacement, why).
MASKS: list[tuple[re.Pattern, str, str]] = [
    (re.compile(r"simulated in \d+(\.\d+)? s"), "simulated in <s> s", "the simulator's own wall time"),
    (re.compile(r"\((\w+ )*\d+(\.\d+)? s( in all)?\)"), "(<duration>)", "wall durations such as '(12 s)'"),
    (
        re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?|\d{8}-\d{6}"),
        "<date>",
        "dates and times, including run folders moved aside",
    ),
    (re.compile(r"^(\[\d+/\d+\] .*): \d+(\.\d+)? s$"), r"\1: <s> s", "a sweep's per-scale progress time"),
    (re.compile(r"\bpid \d+"), "pid <pid>", "process ids"),
    (re.compile(r"/tmp/[^\s:,;)'\"]+"), "<tmp>", "temporary paths"),
]
# Lines a terminal never keeps: a long simulation's progress (workflow/progress.py) is one line
# rewritten in place and cleared there, but a line per quarter when stderr is not a
# terminal, as here; whether it shows at all depends on the machine's load.
TERMINAL_ONLY = re.compile(r"^simulating [\d,]+ ranks: step [\d,]+/[\d,]+ \(\d+%\), \d+ s$")
# Every number, for outputs that are measurements of this machine.
NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?([eE][-+]?\d+)?")

ELISION = "..."


@dataclass(frozen=True)
class Class:
    speed: str  # "fast", "slow" or "this-machine"
    needs: str | None  # None, "root", "gpu" or "machines"
    measured: bool  # the output is a measurement: numbers masked
    why: str


# First match wins; the pattern is searched in the command as written.
CLASSES: list[tuple[re.Pattern, Class]] = [
    (re.compile(r"^[A-Za-z_]\w*=\S*$"), Class("fast", None, False, "sets a shell variable later commands use")),
    (re.compile(r"(^|[|;&]\s*)sudo\b"), Class("slow", "root", False, "runs under sudo")),
    (
        re.compile(r"^(echo|printf) [^|;&`$]*(>\s*\S+)?$"),
        Class("fast", None, False, "the shell writes a line or a small file a later command reads"),
    ),
    (re.compile(r"--backend[= ]nccl\b"), Class("slow", "gpu", True, "--backend nccl needs CUDA GPUs")),
    (
        re.compile(r"\bddplab launch\b.*--exec\b"),
        Class("slow", "machines", True, "--exec starts this node's torchrun and waits for the other nodes"),
    ),
    (
        re.compile(r"\btorchrun\b.*--nnodes[= ]([2-9]|\d\d)"),
        Class("slow", "machines", True, "a multi-node torchrun waits for the other nodes"),
    ),
    (
        re.compile(r"\bddplab netlab\b"),
        Class("slow", "root", True, "netlab makes network namespaces and shaped links: root and iproute2"),
    ),
    (
        re.compile(r"^make demo\b.*#.*\bas root\b"),
        Class("slow", "root", True, "probes, trains, fits and simulates for minutes; the README shows its netlab run"),
    ),
    (re.compile(r"^make demo\b"), Class("slow", None, True, "probes, trains, fits and simulates for minutes")),
    (re.compile(r"\bddplab (probe|train)\b"), Class("slow", None, True, "starts torch on every rank via torchrun")),
    (
        re.compile(r"\bddplab calibrate\b"),
        Class("slow", None, False, "fits three committed probe runs with bootstrap intervals"),
    ),
    (re.compile(r"\bddplab validate\b"), Class("slow", None, False, "predicts the committed training runs")),
    (
        re.compile(r"\bddplab doctor\b"),
        Class("this-machine", None, False, "prints the README machine's own interfaces, route and hostname"),
    ),
    (
        re.compile(r"\bddplab launch\b"),
        Class("fast", None, False, "prints every node's torchrun line (and --slurm's batch script); starts nothing"),
    ),
    (
        re.compile(r"\bddplab (cost|collective|scenarios|models|simulate|compare|whatif|goodput|stragglers|sweep)\b"),
        Class("fast", None, False, "a simulation or arithmetic: seconds, no torch"),
    ),
    (re.compile(r"\bddplab\b.*(--help|--version)\b"), Class("fast", None, False, "prints help or the version")),
]
UNKNOWN = Class("slow", None, False, "not a command this checker knows to be quick")

# Commands that refuse an --out folder holding an earlier run (realrun/runfolder.py).
# Commands that refuse a folder an earlier run filled (simulate --out: issue 25 D7): the checker
# moves the earlier one aside first, as a user would pass --force.
CLAIMS_FOLDER = re.compile(r"\bddplab (probe|train|netlab run|simulate|compare)\b")


@dataclass
class Command:
    line: int  # README line number of the "$ " line
    text: str  # as written, comment included (bash ignores it)
    expected: list[str] = field(default_factory=list)
    trimmed: bool = False

    @property
    def comment(self) -> str:
        m = re.search(r"\s#\s.*$", self.text)
        return m.group(0).strip() if m else ""

    @property
    def cls(self) -> Class:
        return classify(self.text)

    @property
    def expected_rc(self) -> int:
        if any(re.match(r"ddplab [\w-]+: error:", line) for line in self.expected):
            return 2  # the README shows a refusal: ddplab's usage-error status
        if re.search(r"\bddplab doctor\b", self.text) and any(line.startswith("problems (") for line in self.expected):
            return 1  # doctor exits 1 when it lists problems (README, step 2)
        return 0


@dataclass
class Result:
    command: Command
    status: str  # "pass", "fail", "diff", "timeout", "skip"
    seconds: float = 0.0
    rc: int | None = None
    output: str = ""
    why: str = ""  # skip reason or failure summary
    diff: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)  # files it named and wrote in the tree
    # The folder it claimed with --out, when the check made room for it (absent before, or an
    # earlier run moved aside: the second path), to be put back as it was after the check.
    claimed: tuple[Path, Path | None] | None = None


def extract(markdown: str) -> list[Command]:
    """Every "$ " line inside a fenced block, with the output lines that follow it."""
    commands: list[Command] = []
    in_fence, current = False, None
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence, current = not in_fence, None
            continue
        if not in_fence:
            continue
        if line.startswith("$ "):
            current = Command(number, line[2:].strip())
            current.trimmed = "trimmed" in current.comment
            commands.append(current)
        elif current is not None:
            if line.strip() == "(trimmed)":
                current.trimmed = True
            else:
                current.expected.append(line)
    for c in commands:
        while c.expected and not c.expected[-1].strip():
            c.expected.pop()
    return commands


def classify(text: str) -> Class:
    for pattern, cls in CLASSES:
        if pattern.search(text):
            return cls
    return UNKNOWN


def normalise(line: str, measured: bool = False) -> str:
    line = " ".join(line.split())
    for pattern, replacement, _ in MASKS:
        line = pattern.sub(replacement, line)
    if measured:
        line = NUMBER.sub("<n>", line)
    return line


def compare(expected: list[str], actual: list[str], *, trimmed: bool = False, measured: bool = False) -> list[str]:
    """The differences between the README's lines and the printed ones; empty when they
    match. '- ' lines are the README's, '+ ' lines what the command printed."""
    actual = [x for x in actual if not TERMINAL_ONLY.match(x.strip())]
    while actual and not actual[-1].strip():
        actual.pop()
    exp = [normalise(x, measured) for x in expected]
    act = [normalise(x, measured) for x in actual]
    if trimmed:  # the README's lines, in order, anywhere in the output
        at = 0
        for i, line in enumerate(exp):
            if line == ELISION:
                continue
            try:
                at = act.index(line, at) + 1
            except ValueError:
                return [f"- {expected[i]}", "+ (not printed, in this order)"]
        return []
    if ELISION not in exp:
        if exp == act:
            return []
        # Compared masked, shown unmasked (whitespace collapsed): the values that differ.
        out = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=exp, b=act, autojunk=False).get_opcodes():
            if tag != "equal":
                out += [f"- {' '.join(x.split())}" for x in expected[i1:i2]]
                out += [f"+ {' '.join(x.split())}" for x in actual[j1:j2]]
        return out
    # "..." lines: the segments between them in order; the first is anchored at the
    # start and the last at the end unless the README begins or ends with "...".
    segments, seg = [], []
    for line in exp:
        if line == ELISION:
            segments.append(seg)
            seg = []
        else:
            seg.append(line)
    segments.append(seg)
    at = 0
    for k, seg in enumerate(segments):
        if not seg:
            continue
        if k == 0:
            got = act[: len(seg)]
            if got != seg:
                return _first_difference(seg, got)
            at = len(seg)
        elif k == len(segments) - 1:
            got = act[len(act) - len(seg) :] if len(act) - len(seg) >= at else act[at:]
            if got != seg:
                return _first_difference(seg, got)
        else:
            found = next((i for i in range(at, len(act) - len(seg) + 1) if act[i : i + len(seg)] == seg), None)
            if found is None:
                return [f"- {seg[0]}", "+ (this run of README lines is not printed, in this order)"]
            at = found + len(seg)
    return []


def _first_difference(want: list[str], got: list[str]) -> list[str]:
    for w, g in zip(want, got, strict=False):
        if w != g:
            return [f"- {w}", f"+ {g}"]
    if len(want) > len(got):
        return [f"- {want[len(got)]}", "+ (output ends)"]
    return ["- (README ends)", f"+ {got[len(want)]}"]


def needs_met(cls: Class) -> str | None:
    """None when this machine has what the class needs, else why not."""
    if cls.needs == "root" and os.geteuid() != 0:
        return "needs root"
    if cls.needs == "gpu":
        try:
            import torch  # only here: the rest of the checker needs no torch

            if not torch.cuda.is_available():
                return "needs a CUDA GPU (none here)"
        except ImportError:
            return "needs torch with CUDA (no torch here)"
    if cls.needs == "machines":
        return "needs other machines to join"
    return None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    venv = ROOT / ".venv"
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env.pop("PYTHONHOME", None)
    env["COLUMNS"] = "200"  # argparse's help wraps to the terminal; a fixed width keeps it stable
    return env


def _ignored_or_tracked(path: Path) -> bool:
    rel = str(path.relative_to(ROOT))
    ignored = subprocess.run(["git", "check-ignore", "-q", rel], cwd=ROOT).returncode == 0
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", rel], cwd=ROOT, capture_output=True).returncode
    return ignored or tracked == 0


def _named_paths(text: str, prelude: list[str] = ()) -> list[Path]:
    """The paths in the repository a command names (its arguments, the README's shell
    variables expanded): what it may create or rewrite."""
    for assignment in prelude:
        name, value = assignment.split("=", 1)
        text = re.sub(r"\$(\{" + name + r"\}|" + name + r"\b)", value, text)
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return []
    out = []
    for w in words:
        if "/" in w or "." in w:
            p = (ROOT / w).resolve()
            if p.is_relative_to(ROOT) and p != ROOT:
                out.append(p)
    return out


def _changed_tracked() -> dict[str, int]:
    """Committed files that differ from the index, with their modification times: a file
    a command rewrites shows even when it was already modified."""
    out = subprocess.run(["git", "diff", "--name-only"], cwd=ROOT, capture_output=True, text=True).stdout
    return {n: (ROOT / n).stat().st_mtime_ns for n in out.splitlines() if (ROOT / n).is_file()}


def _claimed_folder(text: str) -> Path | None:
    """The folder a probe, train, simulate or compare command writes its run into (--out)."""
    m = re.search(r"--out[= ](\S+)", text)
    return ROOT / m.group(1) if CLAIMS_FOLDER.search(text) and m else None


def _move_aside(folder: Path) -> Path | None:
    """An earlier run in ``folder`` renamed to a free sibling (probe, train and simulate refuse
    a filled folder, and a fresh clone has none), or None where the folder holds nothing."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return None
    aside = folder.with_name(f"{folder.name}.old-readme-{time.strftime('%Y%m%d-%H%M%S')}")
    folder.rename(aside)
    return aside


def _put_back(folder: Path, aside: Path | None) -> str:
    """After the check: the run a command wrote removed, and the earlier one it displaced
    renamed back, so that checking the README leaves the reader's runs as they were."""
    if folder.exists():
        shutil.rmtree(folder)
    if aside is None:
        return f"removed {_shown(folder)}, which the command wrote, after the check"
    aside.rename(folder)
    return f"removed {_shown(folder)}, which the command wrote, and put the earlier run back"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run(command: Command, prelude: list[str], timeout_s: float, status_only: str = "") -> Result:
    """Run one command as the README's reader would and judge it; with `status_only` (the
    reason), by its exit status alone."""
    res = Result(command, "pass")
    folder = _claimed_folder(command.text)
    if folder is not None:
        existed = folder.exists()
        aside = _move_aside(folder)
        if aside is not None:
            res.notes.append(f"moved an earlier run aside: {_shown(folder)} -> {_shown(aside)}")
        if aside is not None or not existed:
            res.claimed = (folder, aside)
    named_all = _named_paths(command.text, prelude)
    named = [p for p in named_all if not p.exists()]
    # Committed files it may rewrite: those it names and those beside them (calibrate -o
    # DIR/calib.json writes its plots there too); not the whole tree, which others edit.
    watched = set(named_all) | {p.parent for p in named_all if p.parent != ROOT}
    changed_before = _changed_tracked()
    script = "\n".join(["set -o pipefail", *prelude, command.text])
    start = time.monotonic()
    # A session of its own, so a timeout ends the whole tree (torchrun and its ranks).
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        res.output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            res.output, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            res.output, _ = proc.communicate()
        res.status, res.why = "timeout", f"still running after {timeout_s:g} s"
    res.seconds = time.monotonic() - start
    res.rc = proc.returncode
    res.created = [p for p in named if p.is_file() and not _ignored_or_tracked(p)]
    changed = sorted(
        n
        for n, t in _changed_tracked().items()
        if changed_before.get(n) != t and ({ROOT / n, *(ROOT / n).parents} & watched)
    )
    if changed:  # left in place (they may be what the README tells the reader to make), but said
        res.notes.append("changed committed files: " + ", ".join(changed))
    if res.status == "timeout":
        return res
    if res.rc != command.expected_rc:
        res.status = "fail"
        res.why = f"exit status {res.rc}, the README's is {command.expected_rc}"
    if not command.expected:  # the README shows the command as a step, not its output
        if res.output.strip():
            res.notes.append("the README shows no output: exit status checked only")
        return res
    if status_only:
        res.notes.append(f"exit status checked only: {status_only}")
        return res
    res.diff = compare(
        command.expected, res.output.splitlines(), trimmed=command.trimmed, measured=command.cls.measured
    )
    if res.diff and res.status == "pass":
        res.status = "diff"
        res.why = "output differs from the README's"
    return res


def check(
    commands: list[Command],
    *,
    fast: bool = False,
    every: bool = False,
    timeout_s: float = 600.0,
    slow_timeout_s: float = 1800.0,
    echo=None,
) -> list[Result]:
    """Run the commands in README order (a later one may read what an earlier wrote).
    `every` (--all): slow commands get `slow_timeout_s`, and a command whose output
    describes the README's machine is held to its exit status."""
    results, prelude = [], []
    for c in commands:
        cls = c.cls
        if fast and cls.speed != "fast":
            r = Result(c, "skip", why=f"not fast ({cls.speed}: {cls.why})")
        elif (missing := needs_met(cls)) is not None:
            r = Result(c, "skip", why=f"{missing}: {cls.why}")
        elif every:
            limit = timeout_s if cls.speed == "fast" else max(timeout_s, slow_timeout_s)
            status_only = cls.why if cls.speed == "this-machine" else ""
            r = run(c, prelude, limit, status_only)
        else:
            r = run(c, prelude, timeout_s)
        if re.match(r"^[A-Za-z_]\w*=\S*$", c.text):
            prelude.append(c.text)  # the reader's shell keeps it for every later command
        results.append(r)
        if echo:
            echo(r)
    # Only after the last command: a later one may read what an earlier one wrote.
    for r in results:
        for p in r.created:
            if p.is_file():
                p.unlink()
                r.notes.append(f"removed {_shown(p)}, which the command wrote, after the check")
    for r in reversed(results):  # a folder claimed twice is put back as the first found it
        if r.claimed is not None:
            r.notes.append(_put_back(*r.claimed))
    return results


def setup_for_all(commands: list[Command]) -> list[Command]:
    """--all: the commands to run. The README's first `make demo` builds .venv; when it
    cannot run here (it needs root) and there is no .venv, plain `make demo` (README "Two
    commands") runs first in its place, held to its exit status."""
    if (ROOT / ".venv" / "bin" / "ddplab").exists():
        return commands
    demo = next((c for c in commands if c.text.startswith("make demo")), None)
    if demo is not None and needs_met(demo.cls) is None:
        return commands
    return [Command(0, 'make demo   # README "Two commands": builds .venv for the commands below'), *commands]


def fresh_clone_notes() -> list[str]:
    """Why this tree is not what a fresh clone gives a new reader, if it is not."""
    notes = []
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    if status.returncode != 0:
        notes.append("not a git checkout: cannot tell whether it is a fresh clone")
    elif status.stdout.strip():
        notes.append(f"local changes ({len(status.stdout.splitlines())} paths): the check runs them, not the commit")
    runs = ROOT / "runs"
    if runs.is_dir() and any(runs.iterdir()):
        notes.append("runs/ holds earlier runs: a fresh clone has none (claimed folders are moved aside, then back)")
    return notes


def line_for(r: Result) -> str:
    text = r.command.text
    head = f"{r.status.upper():8}{r.seconds:7.1f} s  README:{r.command.line:<4} $ {text}"
    tail = [f"          {r.why}"] if r.why and r.status != "pass" else []
    tail += [f"          {n}" for n in r.notes]
    tail += [f"            {d}" for d in r.diff[:20]]
    if r.status in ("fail", "timeout") and r.output:
        tail += [f"          | {x}" for x in r.output.splitlines()[-8:]]
    return "\n".join([head, *tail])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--fast", action="store_true", help="run only the commands that finish in seconds")
    mode.add_argument(
        "--all",
        action="store_true",
        dest="every",
        help="every command in a fresh clone, slow ones included, after make demo (see the docstring)",
    )
    ap.add_argument("--list", action="store_true", help="print the commands and their class; run nothing")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per command (default: %(default)s)")
    ap.add_argument(
        "--slow-timeout-s", type=float, default=1800.0, help="per slow command under --all (default: %(default)s)"
    )
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = ap.parse_args(argv)
    commands = extract(args.readme.read_text())
    if args.list:
        for c in commands:
            cls = c.cls
            kind = cls.speed + (f", needs-{cls.needs}" if cls.needs else "") + (", measured" if cls.measured else "")
            print(f"README:{c.line:<4} {kind:26} $ {c.text}\n{'':32}{cls.why}")
        return 0
    start = time.monotonic()
    if args.every:
        for note in fresh_clone_notes():
            print(f"note: {note}")
        commands = setup_for_all(commands)
    results = check(
        commands,
        fast=args.fast,
        every=args.every,
        timeout_s=args.timeout_s,
        slow_timeout_s=args.slow_timeout_s,
        echo=lambda r: print(line_for(r), flush=True),
    )
    for r in results:
        for note in r.notes:
            if note.startswith("removed "):
                print(f"README:{r.command.line}: {note}")
    count = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "diff", "timeout", "skip")}
    print(
        f"{len(results)} commands: {count['pass']} passed, {count['diff']} differ from the README,"
        f" {count['fail']} failed, {count['timeout']} timed out, {count['skip']} skipped (not counted as passed)"
        f"; {time.monotonic() - start:.1f} s"
    )
    return 1 if count["fail"] + count["diff"] + count["timeout"] else 0


if __name__ == "__main__":
    sys.exit(main())
