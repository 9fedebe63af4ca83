"""Sizes this machine cannot hold or finish, refused before anything starts.

The estimates are sim/limits.py's (arithmetic on the sizes); what the machine has is read
by realrun/footprint.py, which checks real runs the same way. A run past the memory is
refused; a long one needs ``--yes``; one past a day is refused even then. Each refusal is
one ValueError line with the estimate and the reason, which the CLI (ddplab/cli.py) prints with exit
code 2.
"""

import math

from realrun.footprint import available_bytes
from sim.limits import SimCost
from sim.units import fmt_bytes

# Refuse past this share of the memory available: the rest is the interpreter, the temporaries
# the estimate leaves out and whatever else runs. Linux overcommits, so numpy would not refuse
# such a run: the OOM killer would end it half-way, with nothing written.
MEMORY_SHARE = 0.8
# Past this a run needs --yes: the longest documented run takes ~15 s here (README "Speed",
# straggler-failslow --steps 20000); 5 minutes is 20x that, where an extra zero is likelier
# than intent.
LONG_RUN_S = 300.0
# Past this even --yes is refused: nothing is written before the end, so a run of more than a
# day stakes all of it on no reboot, logout or closed laptop; the estimate is the answer.
MAX_RUN_S = 86400.0


def fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "forever"
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def check_memory(need_bytes: float, what: str, hint: str) -> None:
    """Refuse ``what`` when it needs more than MEMORY_SHARE of the memory available."""
    available = available_bytes()
    if available is None or need_bytes <= MEMORY_SHARE * available:
        return
    raise ValueError(
        f"{what}: needs ~{fmt_bytes(need_bytes)} of memory, more than {MEMORY_SHARE:.0%} of the"
        f" {fmt_bytes(available)} this machine has available; {hint}"
    )


def time_refusal(seconds: float, *, yes: bool) -> str | None:
    """Why a run of ``seconds`` (estimated) may not start, in words; None when it may."""
    took = f"would take {'' if math.isinf(seconds) else '~'}{fmt_duration(seconds)} on this machine (estimated)"
    if seconds > MAX_RUN_S:
        return f"{took}, over the {MAX_RUN_S / 3600:g} h limit (nothing is written before the end)"
    if seconds > LONG_RUN_S and not yes:
        return f"{took}: pass --yes to run it anyway"
    return None


def check_simulation(cost: SimCost, what: str, *, yes: bool) -> None:
    """A simulation (or several in a row): memory first, then time."""
    hint = "simulate fewer ranks or steps"
    check_memory(cost.peak_bytes, what, hint)
    refusal = time_refusal(cost.seconds, yes=yes)
    if refusal:
        raise ValueError(f"{what}: {refusal}; or {hint}")


def check_in_turn(scenarios, noun: str, *, yes: bool) -> None:
    """Simulations run one after another, each result dropped before the next (whatif's rows,
    compare's set-ups): the largest one's memory, every one's time."""
    from sim.limits import simulation_cost

    costs = [simulation_cost(sc) for sc in scenarios]
    total = SimCost(max(c.peak_bytes for c in costs), 0.0, sum(c.seconds for c in costs))
    big = max(scenarios, key=lambda sc: sc.ranks * sc.steps)
    check_simulation(total, f"{len(scenarios)} {noun} (the largest: ranks {big.ranks} x steps {big.steps})", yes=yes)


# Past this many runs a sweep needs --yes: a grid multiplies, and one more key or a few more
# values turn a hundred runs into a million by accident more often than by intent.
MAX_SWEEP_RUNS = 10_000
# Past this even --yes is refused: every point and run is held in the caller until the table is
# written, so the grid's bookkeeping alone grows with it (a gigabyte here); a bigger study is
# several sweeps.
MAX_SWEEP_RUNS_EVER = 100_000


def check_runs(runs: int, what: str, *, yes: bool) -> None:
    """Refuse a grid of more than MAX_SWEEP_RUNS runs without --yes, and of more than
    MAX_SWEEP_RUNS_EVER with it, from its size alone: before any point is built."""
    if runs > MAX_SWEEP_RUNS_EVER:
        raise ValueError(
            f"{what}: {runs:,} runs, over the limit of {MAX_SWEEP_RUNS_EVER:,} (even with --yes); split it"
        )
    if runs > MAX_SWEEP_RUNS and not yes:
        raise ValueError(f"{what}: {runs:,} runs, over {MAX_SWEEP_RUNS:,}; pass --yes to run it anyway")
