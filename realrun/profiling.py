"""``ddplab train --profile N``: a PyTorch profiler (Kineto) trace of N training steps per rank.

The trace is what a user's own job would hand `ddplab calibrate` (calibrate/kineto.py reads
it; docs/traces.md), written beside the records as ``trace-rankNNNN.json.gz`` by
``export_chrome_trace`` (the same format ``tensorboard_trace_handler`` writes). Steps are
numbered as the records number them: the schedule waits, warms up on the step before the
first profiled one (the PyTorch profiler recipe: the first traced step carries the profiler's
own start-up), and ``ProfilerStep#k`` is training step k, so the trace and the step records of
the same steps can be compared one to one (tests/test_traces_realrun.py).
"""

import json
from pathlib import Path

# Step 0 runs before DDP rebuilds its buckets by size (one bucket of every gradient) and step 1
# is the profiler's warm-up, so tracing starts at 2. Torch is imported where the profiler starts:
# realrun/cli.py, torch-free, checks --steps against this before any process starts.
FIRST_PROFILED_STEP = 2
# The training step as step_wall_s times it (data to zero_grad), annotated in a profiled run so
# that calibrate tells the job's time from this harness's own (records written, the profiler's
# step) inside ProfilerStep#k; calibrate/kineto.py reads the same name (tests/test_twins.py).
STEP_SPAN = "ddplab.train_step"


def trace_path(out: Path, rank: int) -> Path:
    return Path(out) / f"trace-rank{rank:04d}.json.gz"


class StepProfiler:
    """``torch.profiler.profile`` on the training loop's schedule; ``step(k)`` after step k."""

    def __init__(self, out: Path, rank: int, active: int, meta: dict, device):
        from torch.profiler import ProfilerActivity, profile, schedule

        self.path = trace_path(out, rank)
        self.meta = meta
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self.prof = profile(
            activities=activities,
            schedule=schedule(wait=FIRST_PROFILED_STEP - 1, warmup=1, active=active, repeat=1),
            # Shapes give each collective its size on CPU, where no NCCL kernel carries it.
            record_shapes=True,
            on_trace_ready=lambda p: p.export_chrome_trace(str(self.path)),
        )
        self.prof.start()

    def step(self, step: int) -> None:
        self.prof.step()
        if step + 1 == FIRST_PROFILED_STEP:
            # Kineto keeps metadata of the trace being recorded only: added as recording starts.
            # What calibrate cannot read from a trace alone (the model, the tokens, the run).
            self.prof.add_metadata_json("ddplab", json.dumps(self.meta))

    def stop(self) -> None:
        self.prof.stop()
