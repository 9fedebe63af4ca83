"""A straggler made of real compute: ``--straggler RANK:FACTOR`` on that rank.

A thermally throttled GPU (or a slower card, the seed's M2 next to a 4070) runs
every kernel slower, so forward and backward stretch in proportion and each DDP
bucket becomes ready later. We reproduce that shape: hooks on every transformer
Block (and the head) time it and then burn (FACTOR - 1) x that time in real matmuls.

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


class Throttle:
    def __init__(self, model: nn.Module, factor: float, device: torch.device):
        if factor < 1.0:
            raise ValueError(f"--straggler: FACTOR must be >= 1, got {factor}")
        self.extra = factor - 1.0
        self.device = device
        self.burned_s = 0.0  # extra seconds spent since the last take()
        # Small matmuls: short enough to stop close to the target, real FLOPs on the device.
        self._a = torch.full((64, 64), 1.0 / 64, device=device)
        self._out = torch.empty_like(self._a)
        # On CPU count this thread's CPU seconds, not wall seconds: on a shared machine a
        # preemption inside a block would otherwise be burned again (F-1)-fold. On a GPU,
        # wall time after a synchronize is device time.
        self._clock = time.perf_counter if device.type == "cuda" else time.thread_time
        self._t = 0.0
        # Forward: the whole model, the loss included (no collective runs inside forward).
        model.register_forward_pre_hook(self._start)
        model.register_forward_hook(self._stop)
        # Backward: module by module, so each bucket's gradients come later as on a slower
        # device, not all at once. Blocks plus the head cover ~3/4 of gpt2-tiny's backward on
        # CPU; the loss and embedding gradients run unthrottled (no module boundary to hook).
        for module in [*model.transformer.h, model.transformer.ln_f, model.lm_head]:
            module.register_full_backward_pre_hook(self._start)
            module.register_full_backward_hook(self._stop)

    def take(self) -> float:
        """Seconds burned since the last call (recorded per step as ``throttle_s``)."""
        burned, self.burned_s = self.burned_s, 0.0
        return burned

    # The hooked spans never nest or overlap, so one start time suffices.
    def _start(self, *_):
        synchronize(self.device)
        self._t = self._clock()

    def _stop(self, *_):
        synchronize(self.device)
        self._burn(self.extra * (self._clock() - self._t))

    def _burn(self, seconds: float) -> None:
        start = self._clock()
        end = start + seconds
        while True:
            for _ in range(4):
                torch.mm(self._a, self._a, out=self._out)
            synchronize(self.device)
            if self._clock() >= end:
                break
        self.burned_s += self._clock() - start
