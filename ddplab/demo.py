"""`ddplab demo`: the whole loop on this machine, stage by stage, into one directory.

probe -> train -> calibrate -> validate -> simulate -> report. With root and
iproute2 the two ranks are two emulated hosts on a 1 Gbit/s link (`ddplab netlab`);
otherwise two processes on loopback, and the report says so. Each stage leaves a
stamp in ``demo.json`` when it finishes; a rerun skips stamped stages whose outputs
are still there (``--fresh`` redoes everything). Long stages run as subprocesses with
their output in ``logs/``, and a status line shows the stage, its elapsed time and
the last thing the stage printed.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

MODEL = "gpt2-mini"
SEQ_LEN = 128
MICRO_BATCH = 4
SWEEP = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
QUICK_SWEEP = (2, 8, 64, 256, 1024)
PLATFORMS = ("homelab", "h100-1024", "mi300x-1024")
LEMON = 1.40  # REFERENCES.md lemon GPU: one GPU persistently 1.40x slower (the middle case)

# What each stage runs. Full: ~4 min here; quick: ~1.5 min (demo.json holds the times).
PROBE = {
    False: ["--sizes", "16K:64M", "--iters", "10", "--warmup", "2", "--micro-batches", "1,2,4,8"],
    True: ["--sizes", "256K:16M", "--iters", "5", "--warmup", "1", "--micro-batches", "2,4"],
}
TRAIN_STEPS = {False: 12, True: 8}


def lab_available() -> tuple[bool, str]:
    """(netlab usable, why not)."""
    if os.geteuid() != 0:
        return False, "not root (network namespaces need it)"
    for tool in ("ip", "tc", "taskset"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` not found (iproute2, util-linux)"
    return True, ""


class _Status:
    """One status line per stage: on a terminal rewritten in place every second, else a
    line every 20 s, each with the elapsed time and the stage's latest output line."""

    def __init__(self, label: str, log: Path | None):
        self.label, self.log, self.t0 = label, log, time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self):
        self._print(final=False)
        self.thread.start()
        return self

    def _last_line(self) -> str:
        if not self.log or not self.log.exists():
            return ""
        with open(self.log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 2048))
            lines = [x for x in f.read().decode(errors="replace").splitlines() if x.strip("# \t")]
        return lines[-1].strip()[:70] if lines else ""

    def _print(self, final: bool, note: str = "") -> None:
        elapsed = time.perf_counter() - self.t0
        text = f"{self.label}  {elapsed:6.1f} s  {note or self._last_line()}"
        if self.tty:
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def _tick(self) -> None:
        period = 1.0 if self.tty else 20.0
        while not self.done.wait(period):
            self._print(final=False)

    def __exit__(self, exc_type, exc, tb):
        self.done.set()
        self.thread.join()
        self._print(final=True, note="done" if exc_type is None else "FAILED")
        return False

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0


class Demo:
    def __init__(self, out: Path, *, quick: bool, fresh: bool, lab: bool = True):
        self.out, self.quick, self.fresh = out, quick, fresh
        self.state_path = out / "demo.json"
        self.state = {} if fresh or not self.state_path.exists() else json.loads(self.state_path.read_text())
        if self.state.get("quick", quick) != quick:  # a quick run's outputs do not serve a full one
            self.state = {}
        self.state["quick"] = quick
        self.lab, self.why_not = lab_available() if lab else (False, "--no-lab")
        if self.state.get("lab", self.lab) != self.lab:  # measured elsewhere: measure again
            self.state = {"quick": quick}

    # --- bookkeeping
    def _save(self) -> None:
        from ddplab.calcmds import write_json_atomic

        write_json_atomic(self.state_path, self.state)

    def _done(self, stage: str, outputs: list[Path]) -> bool:
        return stage in self.state.get("stages", {}) and all(p.exists() for p in outputs)

    def _stamp(self, stage: str, seconds: float) -> None:
        self.state.setdefault("stages", {})[stage] = {"seconds": round(seconds, 1), "unix": time.time()}
        self._save()

    def _subprocess(self, argv: list[str], log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as f:
            code = subprocess.call([sys.executable, "-m", "ddplab", *argv], stdout=f, stderr=subprocess.STDOUT)
        if code != 0:
            tail = [x for x in log.read_text(errors="replace").splitlines() if x.strip()][-1:] or ["(no output)"]
            raise RuntimeError(f"`ddplab {' '.join(argv[:3])} ...` exited {code}: {tail[0]} (log: {log})")

    def _worker(self, verb: str, run_dir: Path, args: list[str]) -> list[str]:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        if self.lab:
            return ["netlab", "run", "--name", "demo", "--rate", "1gbit", "--", verb, "--out", str(run_dir), *args]
        return [verb, "--nproc", "2", "--out", str(run_dir), *args]

    # --- the stages
    def stages(self):
        o = self.out
        model = ["--model", MODEL, "--seq-len", str(SEQ_LEN)]
        yield (
            "probe",
            "probe: collectives, raw link, compute, buckets, overlap",
            [o / "probe" / "probe-rank0001.jsonl"],
            lambda: self._subprocess(
                self._worker("probe", o / "probe", [*model, "--ops", "allreduce", *PROBE[self.quick]]),
                o / "logs" / "probe.log",
            ),
        )
        yield (
            "train",
            f"train: real DDP {MODEL}, {TRAIN_STEPS[self.quick]} steps",
            [o / "train" / "train-rank0001.jsonl"],
            lambda: self._subprocess(
                self._worker(
                    "train",
                    o / "train",
                    [*model, "--micro-batch", str(MICRO_BATCH), "--steps", str(TRAIN_STEPS[self.quick])],
                ),
                o / "logs" / "train.log",
            ),
        )
        yield (
            "calibrate",
            "calibrate: fit the probe",
            [o / "calib.json"],
            lambda: self._subprocess(
                ["calibrate", str(o / "probe"), "-o", str(o / "calib.json")], o / "logs" / "calibrate.log"
            ),
        )
        yield (
            "validate",
            "validate: predict the train run from the probe alone",
            [o / "validation.json"],
            self._validate,
        )
        yield (
            "simulate",
            "simulate: home lab, H100 and MI300X, 2..1024 ranks",
            [o / "sim" / "summary.json"],
            self._simulate,
        )
        yield ("report", "report: report.html", [o / "report.html"], self._report)

    def _validate(self) -> None:
        from calibrate.plots import predicted_vs_measured
        from calibrate.validate import validate
        from ddplab.calcmds import read_calib, write_json_atomic

        calib_path = self.out / "calib.json"
        v = validate(read_calib(calib_path), str(calib_path), [self.out / "train"])
        predicted_vs_measured(v["rows"], v["mape"], self.out / "validation.png")
        write_json_atomic(self.out / "validation.json", v)

    def _simulate(self) -> None:
        from ddplab.simstudy import run_study

        run_study(self.out, sweep=QUICK_SWEEP if self.quick else SWEEP, steps=60 if self.quick else 100)

    def _report(self) -> None:
        from ddplab.report import write_report

        write_report(self.out)

    def run(self) -> dict:
        self.out.mkdir(parents=True, exist_ok=True)
        where = (
            "two emulated hosts (netlab) on a 1 Gbit/s link, one core each"
            if self.lab
            else f"two processes on loopback ({self.why_not}; no emulated link)"
        )
        self.state["where"] = where
        self.state["lab"] = self.lab
        self._save()
        print(f"demo: {where}; output in {self.out}/", file=sys.stderr)
        stages = list(self.stages())
        for i, (name, label, outputs, action) in enumerate(stages, 1):
            tag = f"[{i}/{len(stages)}] {label}"
            if not self.fresh and self._done(name, outputs):
                print(
                    f"{tag}  reused ({self.state['stages'][name]['seconds']} s before; --fresh redoes it)",
                    file=sys.stderr,
                )
                continue
            log = self.out / "logs" / f"{name}.log"
            log.unlink(missing_ok=True)  # the status line must not show a previous run's last line
            with _Status(tag, log) as status:
                action()
            self._stamp(name, status.elapsed_s)
            # A stage redone invalidates what was built on it.
            for later, *_ in stages[i:]:
                self.state.get("stages", {}).pop(later, None)
            self._save()
        return self.state
