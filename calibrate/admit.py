"""`calibrate` never writes a calibration that `simulate` or `validate` would refuse.

``check_admitted`` builds the scenario the calibration implies for the measured machines (as
calibrate/validate.py does for a train run) and lets sim/config.py check every value before the
file is written; a file written before this check is refused where it is used, naming itself
and the fix (calibrate/refusal.py).
"""

from calibrate.apply import apply_calibration
from calibrate.calibration import Calibration
from sim.scenario_file import scenario_from_dict


def check_admitted(calib: Calibration, where: str) -> None:
    """Refuse (one line) a calibration whose values the simulator would refuse: the scenario of
    the measured machines (validate's, calibrate/validate.py) on every measured network, at every
    micro-batch the probe timed."""
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
