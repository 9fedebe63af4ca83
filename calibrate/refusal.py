"""A refused calibration in one line that names its file and a fix that works.

`simulate --calib` (workflow/simulation.py, on sim/scenario_file.py's Refused) and `validate`
(``scenario_or_refusal``) build their scenario so that when
sim/config.py refuses a value that came from the calibration (an old file, a hand-edited one),
the line names the calibration file and the way out, not only the key. `calibrate` itself
checks before writing (calibrate/admit.py), so a file it writes now never lands here.
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


def refusal(e: ValueError, calib: Calibration, calib_path: str, *, can_set: bool) -> ValueError:
    """A refused value the calibration set, as one line naming the file and the fix
    (``can_set``: the command takes --set)."""
    key = str(e).partition(":")[0]
    return ValueError(f"{calib_path}: {e}; {_fix(key, calib, can_set)}")


def scenario_or_refusal(data: dict, measured: dict, calib: Calibration, calib_path: str, *, can_set: bool) -> Scenario:
    """The scenario of this data; a refused value the calibration set (``measured``'s keys)
    becomes refusal's line."""
    try:
        return scenario_from_dict(data)
    except ValueError as e:
        if str(e).partition(":")[0] not in measured:
            raise  # the scenario's own value, named as usual
        raise refusal(e, calib, calib_path, can_set=can_set) from None
