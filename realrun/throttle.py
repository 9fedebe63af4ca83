"""A straggler made of real compute: ``--straggler RANK:FACTOR`` on that rank.

A thermally throttled GPU (or a slower card, the seed's M2 next to a 4070) runs
every kernel slower, so forward and backward stretch in proportion and each DDP
bucket becomes ready later. We reproduce that shape: the rank's compute is timed in
spans and (FACTOR - 1) x each span is burned in real matmuls at its end. The spans
tile the model's work: the whole forward (the loss included: the model computes it),
then backward from the forward's end to each gradient's accumulation, burned there,
before DDP's reducer sees the gradient ready (a tensor's post-accumulate-grad hook runs
inside AccumulateGrad, before the node's post hooks, where DDP's reducer listens), and
last DDP's own work after the last gradient (``backward_end``, called by realrun/train.py).
Until 2026-12 backward was burned per transformer block and head only, which left the
loss's and the embeddings' backward unstretched: ``--straggler 1:2`` made compute
1.8x, not 2x (docs/validation.md).

Why not ``time.sleep``: a sleeping rank frees its CPU cores (or its GPU), so the
collectives that overlap backward would run on idle hardware and the
compute/communication interference the simulator models (docs/design.md "Overlap
interference", gamma) would vanish; and a fixed sleep does not scale with the work
of the step.
"""

import time

import torch
import torch.nn as nn

from realrun.dist import synchronize

# Burn once this much is owed: a gradient is ready every few microseconds in places, and each
# burn overshoots by one round of matmuls; what is left is owed to the next span.
MIN_BURN_S = 0.5e-3


class Throttle:
    def __init__(self, model: nn.Module, factor: float, device: torch.device):
        if factor < 1.0:
            raise ValueError(f"--straggler: FACTOR must be >= 1, got {factor}")
        self.extra = factor - 1.0
        self.device = device
        self.burned_s = 0.0  # extra seconds spent since the last take()
        # The compute it was owed for, on the same clock: burned / measured is FACTOR - 1 however
        # loaded the machine is, where wall-clock compute stretches with the load.
        self.measured_s = 0.0
        self._owed_s = 0.0
        # Small matmuls: short enough to stop close to the target, real FLOPs on the device.
        self._a = torch.full((64, 64), 1.0 / 64, device=device)
        self._out = torch.empty_like(self._a)
        # On CPU count this thread's CPU seconds, not wall seconds: on a shared machine a
        # preemption inside a span would otherwise be burned again (F-1)-fold. On a GPU,
        # wall time after a synchronize is device time. CPU autograd runs on the thread that
        # called backward, so the backward spans are this thread's too.
        self._clock = time.perf_counter if device.type == "cuda" else time.thread_time
        self._t = 0.0
        model.register_forward_pre_hook(self._start)
        model.register_forward_hook(lambda *_: self._span_end(0.0))  # the forward, paid whole
        for p in model.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(lambda _p: self._span_end(MIN_BURN_S))

    def backward_end(self) -> None:
        """After backward returns: pay for DDP's own work since the last gradient (the divide
        before the last bucket's allreduce, the copy back into .grad after it), which a slower
        device would do slower too. Its span is this thread's CPU time, so the wait for the
        collectives in between is not burned."""
        self._span_end(0.0)

    def take(self) -> tuple[float, float]:
        """Seconds burned, and the compute they were owed for, since the last call (recorded per
        step as ``throttle_s`` and ``throttle_compute_s``)."""
        burned, measured, self.burned_s, self.measured_s = self.burned_s, self.measured_s, 0.0, 0.0
        return burned, measured

    def _start(self, *_):
        synchronize(self.device)
        self._t = self._clock()

    def _span_end(self, min_burn_s: float) -> None:
        """Owe (FACTOR - 1) x the span since the last mark; pay once min_burn_s is owed."""
        synchronize(self.device)
        span = self._clock() - self._t
        self.measured_s += span
        self._owed_s += self.extra * span
        # FACTOR 1 burns nothing and only measures (a rank's compute on the same clock).
        if self._owed_s > 0.0 and self._owed_s >= min_burn_s:
            self._owed_s -= self._burn(self._owed_s)
        self._t = self._clock()

    def _burn(self, seconds: float) -> float:
        start = self._clock()
        end = start + seconds
        while True:
            for _ in range(4):
                torch.mm(self._a, self._a, out=self._out)
            synchronize(self.device)
            if self._clock() >= end:
                break
        burned = self._clock() - start
        self.burned_s += burned
        return burned
