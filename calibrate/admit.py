"""Whether the simulator takes what a calibration sets, checked where it matters.

`simulate --calib` and `validate` build their scenario through ``scenario_or_refusal``: when
sim/config.py refuses a value that came from the calibration (an old file, a hand-edited one),
the one line names the calibration file and a fix that works, not only the key. `calibrate`
calls ``check_admitted`` before writing, so it never writes a file that would dead-end there.
"""

from calibrate.calibration import Calibration
from sim.config import Scenario
from sim.scenario_file import scenario_from_dict


def _fix(key: str, calib: Calibration, can_set: bool) -> str:
    rerun = f"rerun `{calib.command}`" if calib.command else "rerun `ddplab calibrate` on its probe runs"
    if key.startswith("noise."):
        way = f"{rerun} (calibrate now fits lognormal or gamma, or keeps the samples, where a normal is too wide)"
        if can_set:
            way += " or add --set noise.distribution=lognormal (the same spread as a lognormal)"
        return way
    return f"{rerun}" + (f" or override it with --set {key}=VALUE" if can_set else "")


def scenario_or_refusal(data: dict, measured: dict, calib: Calibration, calib_path: str, *, can_set: bool) -> Scenario:
    """The scenario of this data; a refused value the calibration set becomes one line naming
    the file and the fix (``can_set``: the command takes --set)."""
    try:
        return scenario_from_dict(data)
    except ValueError as e:
        key = str(e).partition(":")[0]
        if key not in measured:
            raise  # the scenario's own value, named as usual
        raise ValueError(f"{calib_path}: {e}; {_fix(key, calib, can_set)}") from None


def check_admitted(calib: Calibration, where: str) -> None:
    """Refuse (one line) a calibration whose values the simulator would refuse: the scenario of
    the measured machines (validate's, calibrate/validate.py) on every measured network, at every
    micro-batch the probe timed."""
    from calibrate.apply import apply_calibration
    from scenarios import load_models

    c = calib.compute
    if c.model not in load_models():
        raise ValueError(f"{where}: model {c.model!r} is not a preset here; simulate could not use this calibration")
    for label, (tokens, _) in ((n, p) for n in sorted(calib.networks) or [None] for p in c.step_s.points):
        data = {
            "name": f"calibrate:{where}",
            "ranks": calib.world_size,
            "model": {"preset": c.model},
            "training": {
                "micro_batch_size": max(1, tokens // c.seq_len),
                "seq_len": c.seq_len,
                "precision": calib.precision,
            },
            "network": {"backend": calib.backend, "algorithm": "ring", "gpus_per_node": 1, "nics_per_node": 1},
            "noise": {},
            "compute": {},
        }
        applied = apply_calibration(data, calib, calib_path=where, network=label, mode="all")
        try:
            scenario_from_dict(applied.data)
        except ValueError as e:
            raise ValueError(f"{where}: the calibration would be refused by simulate and validate: {e}") from None
