"""Progress on stderr for long commands, the callbacks the journeys take: one status line per
stage of `ddplab demo` (workflow/demo.py status=), the engine's steps (workflow/simulation.py
progress=), a sweep's runs (workflow/sweep.py), and ``say`` for one line."""

import sys
import threading
import time
from pathlib import Path

from output.terminal import ERASE_LINE


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class StatusLine:
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
            sys.stderr.write(ERASE_LINE + text + ("\n" if final else ""))
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


class StepProgress:
    """The progress callback of sim's simulate(): silent for the first ``after_s`` seconds (most
    simulations end sooner); then on a terminal one line rewritten in place, else a line at
    each quarter done, so a log gets at most a few lines."""

    def __init__(self, label: str, after_s: float = 2.0, stream=None):
        self.label, self.after_s = label, after_s
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.perf_counter()
        self.next_s = after_s  # elapsed time of the next terminal redraw
        self.quarter = 0  # quarters already reported (not on a terminal)
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.perf_counter() - self.t0
        if elapsed < self.after_s:
            return
        if self.tty:
            if elapsed >= self.next_s or done == total:
                self.next_s = elapsed + 0.5  # redraw twice a second, not once per step
                self._write(ERASE_LINE + self._text(done, total, elapsed))
        elif 4 * done // total > self.quarter:
            self.quarter = 4 * done // total
            self._write(self._text(done, total, elapsed) + "\n")

    def _text(self, done: int, total: int, elapsed: float) -> str:
        return f"{self.label}: step {done:,}/{total:,} ({done / total:.0%}), {elapsed:.0f} s"

    def _write(self, text: str) -> None:
        self.shown = True
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        """Clear the rewritten line so what prints next starts on a clean one."""
        if self.tty and self.shown:
            self._write(ERASE_LINE)


class RunProgress:
    """A sweep's completed runs (`ddplab sweep`): on a terminal one line rewritten after every
    run, else a line at each quarter done, so a log gets four lines whatever the grid's size
    and the same four on every machine (the runs finish in any order; only the count is said)."""

    def __init__(self, total: int, stream=None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.perf_counter()
        self.quarter = 0

    def __call__(self) -> None:
        self.done += 1
        text = f"[{self.done}/{self.total}] runs done: {time.perf_counter() - self.t0:.1f} s"
        if self.tty:
            self.stream.write(ERASE_LINE + text + ("\n" if self.done == self.total else ""))
        elif 4 * self.done // self.total > self.quarter:
            self.quarter = 4 * self.done // self.total
            self.stream.write(text + "\n")
        self.stream.flush()
