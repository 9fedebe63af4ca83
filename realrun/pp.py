"""Pipeline parallelism of realrun/model.py's GPT with torch's own API
(torch.distributed.pipelining: PipelineStage and ScheduleGPipe / Schedule1F1B /
ScheduleInterleaved1F1B, which run on CPU with gloo in torch 2.13, its sends and receives as gloo
isend/irecv). The model is cut by hand into stage modules, the embedding on the first, the final
norm and output layer on the last (what sim/parallel3d.py and sim/memory3d.py assume), the blocks
as realrun/parallel.py's stage_layers says. Interleaved (Megatron's schedule, Narayanan et al.
2021): pp x v chunks, chunk g on stage g % pp, each its own PipelineStage; a rank's chunks are a
``Chunks`` list whose times are their sums.

A stage times its own compute, for the records: its forward wraps itself; its backward starts
when the gradient of its output arrives (a hook on the output tensor) and ends when its last
parameter's gradient is accumulated (post-accumulate-grad hooks: on the first stage, whose input
is token ids, a module's full backward hook would fire at the start of its backward, not at the
end). What the schedule's step takes beyond the two is the pipeline's wait: the bubble and the
point-to-point transfers.
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from realrun.parallel import stage_layers

SCHEDULE_CLASSES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class StageModule(nn.Module):
    """Blocks ``first_block`` .. + ``n_blocks`` of ``model``, with the embedding if ``first``,
    the final norm and output layer if ``last``. Takes token ids (first) or the residual stream."""

    def __init__(self, model, first_block: int, n_blocks: int, *, first: bool, last: bool):
        super().__init__()
        self.cfg, self.first, self.last = model.cfg, first, last
        tr = model.transformer
        self.wte = tr.wte if first else None
        self.wpe = tr["wpe"] if first and "wpe" in tr else None
        self.h = nn.ModuleList(tr.h[first_block : first_block + n_blocks])
        self.ln_f = tr.ln_f if last else None
        self.lm_head = model.lm_head if last else None
        if model.cfg.llama:
            self.register_buffer("rope_cos", model.rope_cos, persistent=False)
            self.register_buffer("rope_sin", model.rope_sin, persistent=False)
        self.forward_s = self.backward_s = 0.0
        self._bwd_start = self._bwd_end = None
        for p in self.parameters():
            p.register_post_accumulate_grad_hook(self._grad_done)

    def forward(self, x):
        t0 = time.perf_counter()
        t = x.shape[1]
        if self.first:
            idx, x = x, self.wte(x)
            if self.wpe is not None:
                x = x + self.wpe(torch.arange(t, device=idx.device))
        rope = (self.rope_cos[:t], self.rope_sin[:t]) if self.cfg.llama else None
        for block in self.h:
            x = block(x, rope)
        if self.last:
            x = self.lm_head(self.ln_f(x))
        if x.requires_grad:  # this micro-batch's backward begins when its output's gradient arrives
            x.register_hook(self._backward_begins)
        self.forward_s += time.perf_counter() - t0
        return x

    def _backward_begins(self, grad):
        self.close_backward()  # the previous micro-batch's (1F1B runs forwards in between)
        self._bwd_start = self._bwd_end = time.perf_counter()

    def _grad_done(self, param):
        # Once per parameter per backward: the last call is where this micro-batch's backward ends.
        self._bwd_end = time.perf_counter()

    def take_times(self) -> tuple[float, float]:
        """(forward_s, backward_s) since the last call."""
        out = self.forward_s, self.backward_s
        self.forward_s = self.backward_s = 0.0
        return out

    def close_backward(self) -> None:
        """Add the open micro-batch's backward (at the next one's start, and after the step)."""
        if self._bwd_start is not None:
            self.backward_s += self._bwd_end - self._bwd_start
            self._bwd_start = None


def stage_chunks(model, pp: int, virtual: int, stage: int) -> list[StageModule]:
    """``stage``'s chunks of ``model`` cut in pp x ``virtual`` (chunk g on stage g % pp; one chunk
    a stage unless interleaved), the blocks as realrun/parallel.py's stage_layers splits them."""
    n = pp * virtual
    sizes = stage_layers(model.cfg.n_layer, n)
    return [StageModule(model, sum(sizes[:g]), sizes[g], first=g == 0, last=g == n - 1) for g in range(stage, n, pp)]


class Chunks(nn.ModuleList):
    """One rank's model chunks under the interleaved schedule, timed as one module."""

    def take_times(self) -> tuple[float, float]:
        times = [m.take_times() for m in self]
        return sum(f for f, _ in times), sum(b for _, b in times)

    def close_backward(self) -> None:
        for m in self:
            m.close_backward()


def cross_entropy(logits, targets):
    """Mean over the micro-batch's tokens; the schedule divides the gradients by the
    micro-batches (scale_grads), so a step's gradient is the mean over all its sequences, as
    realrun/train.py's 1 / (b K) weighting gives."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def build_schedule(
    stage_module: StageModule | Chunks,
    stage: int,
    pp: int,
    group,
    device,
    schedule: str,
    micro_batches: int,
    micro_shape,
):
    """``micro_shape``: (sequences, tokens) of one micro-batch. ``stage_module``: the stage's
    module, or under the interleaved schedule its Chunks (chunk k is pipeline stage stage + k pp
    of pp x v). Each stage's input and output shapes are given (static metadata): left to infer
    them at run time, torch 2.13's pipelining deadlocked here on the first step over gloo (the
    last stage sent its backward metadata while the first, whose input is integer token ids, was
    already waiting in the schedule's p2p)."""
    if schedule == "interleaved":
        n = pp * len(stage_module)
        stages = [_stage(m, stage + k * pp, n, group, device, micro_shape) for k, m in enumerate(stage_module)]
        return ScheduleInterleaved1F1B(stages, n_microbatches=micro_batches, loss_fn=cross_entropy)
    pipe_stage = _stage(stage_module, stage, pp, group, device, micro_shape)
    # Every stage gets the loss function: a schedule without one runs forward only on that rank
    # (torch's _has_backward), and its peer then waits forever to send the gradient back.
    return SCHEDULE_CLASSES[schedule](pipe_stage, n_microbatches=micro_batches, loss_fn=cross_entropy)


def _stage(stage_module: StageModule, index: int, n_stages: int, group, device, micro_shape) -> PipelineStage:
    b, t = micro_shape
    cfg = stage_module.cfg
    # requires_grad: in static mode it is what tells a stage to send its input's gradient back;
    # without it the first stage got no gradients at all (seen: its AdamW state stayed empty).
    hidden = torch.empty(b, t, cfg.n_embd, device=device, requires_grad=True)
    inputs = torch.zeros(b, t, dtype=torch.long, device=device) if stage_module.first else hidden
    outputs = torch.empty(b, t, cfg.vocab_size, device=device) if stage_module.last else hidden
    grads = {
        "output_grads": None if stage_module.last else torch.empty_like(hidden),  # from the next stage
        "input_grads": None if stage_module.first else torch.empty_like(hidden),  # to the previous one
    }
    return PipelineStage(
        stage_module, index, n_stages, device, input_args=inputs, output_args=outputs, group=group, **grads
    )
