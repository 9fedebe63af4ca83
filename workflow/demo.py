"""The demo: the whole loop on this machine, stage by stage, into one directory.

probe -> train -> calibrate -> validate -> simulate -> report. With root and
iproute2 the two ranks are two emulated hosts on a 1 Gbit/s link (`ddplab netlab`);
otherwise two processes on loopback, and the report says so. Each stage leaves a
stamp in ``demo.json`` when it finishes; a rerun skips stamped stages whose outputs
are still there (``fresh`` redoes everything). The real runs start torchrun through
realrun's launchers (realrun/launch.py, realrun/netlab_run.py), as `ddplab probe`,
`train` and `netlab run` do; each stage's console lines go to ``logs/<stage>.log``
and the caller's ``status`` shows progress (workflow/progress.py draws a status line
from that log).
"""

import json
import os
import shutil
import time
from pathlib import Path

from calibrate.calibration import Calibration
from output.jsonfile import write_json_atomic
from output.outdir import ensure
from realrun.cli import PARSERS, check_args
from realrun.launch import run_local
from realrun.netlab import LabSpec
from realrun.netlab_run import run_in_lab
from realrun.report import failure_line, summarize_train, whole_despite, whole_line
from realrun.runfolder import claim
from sim.units import fmt_seconds
from workflow.plan import MICRO_BATCH, MODEL, PROBE, QUICK_SWEEP, SEQ_LEN, SIM_STEPS, SWEEP, TRAIN_STEPS


def lab_available() -> tuple[bool, str]:
    """(netlab usable, why not)."""
    if os.geteuid() != 0:
        return False, "not root (network namespaces need it)"
    for tool in ("ip", "tc", "taskset"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` not found (iproute2, util-linux)"
    return True, ""


class _Timer:
    """The default status: no drawing, only the elapsed time the stamp records."""

    def __init__(self, label: str, log: Path):
        self.t0 = time.perf_counter()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0


class Demo:
    """``status(label, log)`` is a context manager with ``elapsed_s`` around each stage;
    ``say(line)`` gets the few lines worth telling (where it runs, what it reuses)."""

    def __init__(self, out: Path, *, quick: bool, fresh: bool, lab: bool = True, status=_Timer, say=None):
        self.out, self.quick, self.fresh = out, quick, fresh
        self.status, self.say = status, say or (lambda line: None)
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
        write_json_atomic(self.state_path, self.state)

    def _done(self, stage: str, outputs: list[Path]) -> bool:
        return stage in self.state.get("stages", {}) and all(p.exists() for p in outputs)

    def _stamp(self, stage: str, seconds: float) -> None:
        self.state.setdefault("stages", {})[stage] = {"seconds": round(seconds, 1), "unix": time.time()}
        self._save()

    def _launch(self, verb: str, run_dir: Path, args: list[str], log: Path) -> None:
        """A real torchrun run of ``verb`` through realrun's launchers (netlab's two hosts or two
        local ranks), the ranks' console lines in ``log``; a failure is one RuntimeError line."""
        worker = ["--out", str(run_dir), *args]
        check_args(verb, PARSERS[verb](f"ddplab demo: {verb}").parse_args(worker))
        if run_dir.exists():  # a stage redone starts from nothing (its stamp was already dropped)
            shutil.rmtree(run_dir)
        log.parent.mkdir(parents=True, exist_ok=True)
        folder = claim(run_dir)
        with open(log, "w", buffering=1) as console:
            try:
                if self.lab:
                    code, diagnosis, _ = run_in_lab(
                        LabSpec(name="demo", rate="1gbit"), verb, worker, folder,
                        progress=lambda line: print(line, file=console),
                    )  # fmt: skip
                    print(*diagnosis, sep="\n", file=console)
                else:
                    code = run_local(verb, worker, 2, folder, console=console)
            finally:
                folder.release()
            if whole_despite(run_dir, verb, code):  # a teardown abort after complete records
                print(whole_line(code, str(log)), file=console)
                code = 0
            if code == 0 and verb == "train":
                print(*summarize_train(run_dir), sep="\n", file=console)
        if code == 130:  # Ctrl-C reached the launcher: it stopped the run, the demo stops too
            raise KeyboardInterrupt
        if code != 0:
            raise RuntimeError(f"{verb} exited {code}: {failure_line(run_dir, verb, code)} (log: {log})")

    def _calibrate(self, log: Path) -> None:
        from workflow.calibration import calibrate_runs  # scipy and matplotlib: only when it runs

        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w", buffering=1) as console:
            calib = calibrate_runs(
                [self.out / "probe"], self.out / "calib.json", command="ddplab demo",
                say=lambda line: print(line, file=console),
            )  # fmt: skip
            print(f"wrote {self.out / 'calib.json'} and {', '.join(calib.plots)}", file=console)

    # --- the stages
    def stages(self):
        o = self.out
        model = ["--model", MODEL, "--seq-len", str(SEQ_LEN)]
        yield (
            "probe",
            "probe: collectives, raw link, compute, buckets, overlap",
            [o / "probe" / "probe-rank0001.jsonl"],
            lambda: self._launch(
                "probe", o / "probe", [*model, "--ops", "allreduce", *PROBE[self.quick]], o / "logs" / "probe.log"
            ),
        )
        yield (
            "train",
            f"train: real DDP {MODEL}, {TRAIN_STEPS[self.quick]} steps",
            [o / "train" / "train-rank0001.jsonl"],
            lambda: self._launch(
                "train",
                o / "train",
                [*model, "--micro-batch", str(MICRO_BATCH), "--steps", str(TRAIN_STEPS[self.quick])],
                o / "logs" / "train.log",
            ),
        )
        yield (
            "calibrate",
            "calibrate: fit the probe",
            [o / "calib.json"],
            lambda: self._calibrate(o / "logs" / "calibrate.log"),
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
        from calibrate.validate import validate
        from output.calib_plots import predicted_vs_measured

        calib_path = self.out / "calib.json"
        v = validate(Calibration.read(calib_path), str(calib_path), [self.out / "train"])
        predicted_vs_measured(v["rows"], v["mape"], self.out / "validation.png")
        write_json_atomic(self.out / "validation.json", v)

    def _simulate(self) -> None:
        from workflow.simstudy import run_study

        run_study(self.out, sweep=QUICK_SWEEP if self.quick else SWEEP, steps=SIM_STEPS[self.quick])

    def _report(self) -> None:
        from workflow.report import write_report

        write_report(self.out)

    def run(self) -> dict:
        ensure(self.out)  # marked as ours: a rerun replaces what the last one wrote (output/ownfiles.py)
        where = (
            "two emulated hosts (netlab) on a 1 Gbit/s link, one core each"
            if self.lab
            else f"two processes on loopback ({self.why_not}; no emulated link)"
        )
        self.state["where"] = where
        self.state["lab"] = self.lab
        self._save()
        self.say(f"demo: {where}; output in {self.out}/")
        stages = list(self.stages())
        for i, (name, label, outputs, action) in enumerate(stages, 1):
            tag = f"[{i}/{len(stages)}] {label}"
            if not self.fresh and self._done(name, outputs):
                self.say(f"{tag}  reused ({self.state['stages'][name]['seconds']} s before; --fresh redoes it)")
                continue
            log = self.out / "logs" / f"{name}.log"
            log.unlink(missing_ok=True)  # the status line must not show a previous run's last line
            with self.status(tag, log) as status:
                action()
            self._stamp(name, status.elapsed_s)
            # A stage redone invalidates what was built on it.
            for later, *_ in stages[i:]:
                self.state.get("stages", {}).pop(later, None)
            self._save()
        return self.state


def headlines(out: Path) -> list[str]:
    """The lesson in a few lines, from the files the stages wrote."""
    calib = Calibration.read(out / "calib.json", "demo")
    val = json.loads((out / "validation.json").read_text())
    sim = json.loads((out / "sim" / "summary.json").read_text())
    (label, net), *_ = calib.networks.items()
    k = calib.compute
    step = k.step_s.seconds(MICRO_BATCH * k.seq_len)
    lines = [
        f"measured:   link {net.link_gbit_s.value:.3g} Gbit/s, allreduce busbw {net.allreduce.busbw_gb_s:.3g} GB/s"
        f" (stack efficiency {net.stack_efficiency.value:.2f}), compute {fmt_seconds(step)} per micro-step"
    ]
    for r in val["rows"]:
        lines.append(
            f"validation: predicted {fmt_seconds(r['predicted_p50_s'])}, measured {fmt_seconds(r['measured_p50_s'])}"
            f" per step ({r['error_p50']:+.1%}) from the probe alone"
        )
    for platform in ("h100-1024", "mi300x-1024"):
        rows = [r for r in sim["stragglers"] if r["platform"] == platform]
        parts = [
            f"{r['variant']} {fmt_seconds(r['step_time_s']['p50'])} ({r['scaling_efficiency']:.0%} efficient)"
            for r in rows
        ]
        lines.append(f"{platform}: {'; '.join(parts)}")
        lines.append(f"  jitter: {rows[-1].get('jitter', '?')}")  # whose it is, never this CPU's as a GPU's
    return lines
