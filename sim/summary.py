"""The summary of one simulated scale, typed: what `ddplab simulate --json` prints, what
summary.json, scaling.csv, compare.csv, the tables and the plots read. The engine's numbers come
from SimResult.summary() (sim/results.py); `simulate` adds the memory estimate, rare episodes'
expected cost, the calibration's provenance and the days and dollars to train
(workflow/simulation.py). Units are in the names; ``to_json_dict()`` is the JSON, key for key
and in the order the commands have always printed it (README.md shows it)."""

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

# A rank's own time, as README "Per rank, a step splits..." defines scaling efficiency: its
# compute, its loader, its host delay and its optimizer are its own (one GPU alone pays them
# too); the others' wait for them, and communication, are not.
OWN_PARTS = ("compute_s", "dataloader_s", "host_delay_s", "optimizer_s")


def own_time_s(parts: Mapping[str, float]) -> float:
    """A rank's own time per step from a mapping holding OWN_PARTS (a summary's, a what-if's)."""
    return sum(parts[k] for k in OWN_PARTS)


@dataclass(frozen=True)
class StepTimeS:
    """The step time over the simulated steps, seconds: the mean and percentiles."""

    mean: float
    p5: float
    p50: float
    p95: float
    p99: float


@dataclass
class Summary:
    scenario: str
    model: str
    model_shape: dict  # sim/model_source.py shape_keys_of: the keys a scenario file sets
    params: int
    mode: str  # training.mode: ddp, fsdp, hsdp
    ranks: int
    nodes: int
    steps: int
    seed: int
    step_time_s: StepTimeS
    compute_s: float  # forward + backward, per rank, mean of a step
    slowest_rank: int
    slowest_rank_compute_s: float
    fastest_rank_compute_s: float
    dataloader_s: float
    host_delay_s: float  # Scenario.host_delays_s, mean over ranks
    optimizer_s: float
    exposed_comm_s: float
    straggler_wait_s: float
    comm_s: float  # collectives' busy time per step
    comm_compute_ratio: float
    scaling_efficiency: float  # share of each rank's time that is its own (compute, optimizer, loader, host delay)
    tokens_per_s: float
    stack: str  # what the compute time rests on (sim/mfu.py compute_basis)
    flops_per_token: float
    flop_count: str  # which FLOP count (sim/mfu.py FLOP_COUNT)
    peak_tflop_s: float
    mfu: float
    compute_mfu: float
    buckets: int
    traffic_bytes_per_step: float
    algorithms: list[str]
    wall_s: float  # this machine's time to simulate, not the model's answer
    # What `simulate` adds (workflow/simulation.py), absent from the engine's own summary:
    memory_gib: dict | None = None  # sim/memory.py's terms, the total and whether it fits
    episodes: dict | None = None  # rare episodes' expected cost over the horizon
    calibration: dict | None = None  # the calib.json applied: file, mode, why, withheld
    parameters: list | None = None  # each calibrated key's value and source
    to_train: dict | None = None  # days, GPU-hours and dollars to train (sim/train_cost.py)
    record: dict | None = None  # how published steps of jobs like this came out (calibrate/record.py)

    def __post_init__(self):
        # The last guard before a number is printed: a NaN or infinity here is a bug upstream
        # (sim/results.py _check_computable refuses the inputs that make one).
        for f in fields(self):
            value = getattr(self, f.name)
            values = [getattr(value, g.name) for g in fields(value)] if isinstance(value, StepTimeS) else [value]
            if any(isinstance(v, float) and not math.isfinite(v) for v in values):
                raise ValueError(f"summary {f.name}: {value} is not a finite number")
        if self.ranks < 1 or self.steps < 1:
            raise ValueError(f"summary ranks {self.ranks}, steps {self.steps}: must be >= 1")

    def to_json_dict(self) -> dict:
        """The summary as `--json` prints it and summary.json holds it: what `simulate` did not
        add is left out, not written as null."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, StepTimeS):
                value = {g.name: getattr(value, g.name) for g in fields(value)}
            elif value is None:
                continue
            out[f.name] = value
        return out

    def part_s(self, name: str) -> float:
        """A per-step quantity by name: the mean for ``step_time_s``, else the field."""
        value = getattr(self, name)
        return value.mean if isinstance(value, StepTimeS) else value
