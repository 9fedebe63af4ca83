"""The tensor-parallel block probe: what a Megatron-style TP split (realrun/tp.py, torch's
DTensor API) adds to one transformer block's forward and backward on these ranks, and what one
point-to-point activation send costs between two ranks that compute in between.

Why (docs/parallelism.md, "Real runs on CPU"): on a CPU with gloo, a TP block is not its
unsharded self at 1/tp of the FLOPs plus four allreduces priced in a tight loop. Each of its four
collectives runs on gloo's worker thread while the caller sleeps, and a rank that computed before
it waits for that thread and its peer to be scheduled again (a tight loop keeps them awake); and
DTensor's dispatch (sharding propagation, redistribution, the wrapping of every parallel linear's
input and output) is paid per operator, whatever the tensor's size. None of that is in the
compute probe (one rank, unsharded) or the collective sweep (a tight loop). So this probe times
it, on a block of the probe's model, at the probe's micro-batch sizes:

- ``tp_block``: the model's blocks in sequence (no embedding, output layer or loss), forward and
  backward, unsharded and then split over all the ranks of the probe (tp = world size;
  ColwiseParallel/RowwiseParallel as realrun/tp.py), in turns; the record holds both per block
  (the stack's time / its blocks), per iteration. The calibration keeps the difference (TP minus
  unsharded, forward and backward) as a function of tokens. The TP stack runs three times in a
  row and the first is not kept: a TP block right after other work took 1.7x one in sequence
  here (the first collective waits for gloo's thread and the peer to wake), and a training step
  runs its micro-batches' TP blocks one after another.
- ``p2p``: rank 0 and rank 1 each run the unsharded block forward, then rank 0 sends the
  micro-batch's activation (tokens x n_embd in fp32) to rank 1 and rank 1 sends it back; half
  the round trip is one in-step send (torch.distributed.pipelining sends with isend/irecv).
"""

import copy
import statistics

import torch
import torch.distributed as dist

from realrun.dist import DistEnv, now

TP_REPEATS = 3


class _Blocks(torch.nn.Module):
    """The model's blocks in sequence, where realrun/tp.py's shard_blocks looks for them (``.h``)."""

    def __init__(self, blocks):
        super().__init__()
        self.h = torch.nn.ModuleList(blocks)

    def forward(self, x, rope):
        for block in self.h:
            x = block(x, rope)
        return x


def _fwd_bwd(blocks, x, rope, device) -> tuple[float, float]:
    blocks.zero_grad(set_to_none=True)
    xi = x.detach().requires_grad_(True)
    t0 = now(device)
    y = blocks(xi, rope)
    t1 = now(device)
    y.sum().backward()
    return t1 - t0, now(device) - t1


def _model_fwd_bwd(model, x, y, device) -> tuple[float, float]:
    model.zero_grad(set_to_none=True)
    t0 = now(device)
    _, per_seq = model(x, y)
    t1 = now(device)
    per_seq.mean().backward()
    return t1 - t0, now(device) - t1


def tp_block(env: DistEnv, a, writer, model) -> dict:
    """Records ``tp_block`` (each rank, each micro-batch size, each iteration: per block, the
    model's blocks run in sequence, so a block's collectives follow one another as in a training
    step; and the whole model's forward and backward with its loss, bare: no DDP, as a TP or
    pipeline run computes) and ``p2p`` (rank 0); returns rank 0's medians for the printout. The
    sizes take turns, iteration by iteration, as the compute probe's do."""
    from torch.distributed.device_mesh import init_device_mesh

    from realrun.tp import shard_blocks

    device, tp = env.device, env.world_size
    cfg = model.cfg
    plain = _Blocks(list(model.transformer.h))
    sharded = copy.deepcopy(plain)
    shard_blocks(sharded, init_device_mesh(device.type, (tp,)))
    n = len(plain.h)
    rope = (model.rope_cos[: a.seq_len], model.rope_sin[: a.seq_len]) if cfg.llama else None
    gen = torch.Generator().manual_seed(a.seed)
    inputs = {}
    for b in a.micro_batches:
        ids = torch.randint(0, cfg.vocab_size, (b, a.seq_len + 1), generator=gen)
        x = torch.randn(b, a.seq_len, cfg.n_embd, generator=gen).to(device)
        inputs[b] = (x, ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device))
    rows = {b: [] for b in a.micro_batches}
    for i in range(a.warmup + a.iters):
        for b in a.micro_batches:
            x, idx, tgt = inputs[b]
            mf, mb = _model_fwd_bwd(model, idx, tgt, device)
            pf, pb = (t / n for t in _fwd_bwd(plain, x, rope, device))
            # The TP stack TP_REPEATS times in a row, the first not kept: a training step runs
            # micro-batch after micro-batch through its TP blocks, while the first TP collective
            # after other work also waits for gloo's thread and the peer to wake (a TP block
            # right after unsharded work took 1.7x one in sequence here).
            reps = [_fwd_bwd(sharded, x, rope, device) for _ in range(TP_REPEATS)][1:]
            sf, sb = (sum(t[k] for t in reps) / len(reps) / n for k in (0, 1))
            if i >= a.warmup:
                rows[b].append((pf, pb, sf, sb))
                writer.write(
                    {"type": "tp_block", "tp": tp, "blocks": n, "micro_batch": b, "seq_len": a.seq_len,
                     "tokens": b * a.seq_len, "forward_s": pf, "backward_s": pb, "tp_forward_s": sf,
                     "tp_backward_s": sb, "model_forward_s": mf, "model_backward_s": mb, "iter": i - a.warmup}
                )  # fmt: skip
    out = {}
    for b in a.micro_batches:
        cols = zip(*rows[b], strict=True)
        out[b] = {k: statistics.median(v) for k, v in zip(("pf", "pb", "sf", "sb"), cols, strict=True)}
        out[b]["p2p_s"] = _p2p(env, a, writer, plain, inputs[b][0], rope, b)
    return out


def _p2p(env: DistEnv, a, writer, block, x, rope, b: int) -> float | None:
    if env.world_size < 2:
        return None
    device = env.device
    buf = torch.zeros(b * a.seq_len * x.shape[-1], device=device)
    times = []
    for i in range(a.warmup + a.iters):
        with torch.no_grad():
            block(x, rope)  # the compute a pipeline stage does between two sends
        if env.rank == 0:
            t = now(device)
            dist.isend(buf, 1).wait()
            dist.irecv(buf, 1).wait()
            one_way = (now(device) - t) / 2
            if i >= a.warmup:
                times.append(one_way)
                writer.write(
                    {"type": "p2p", "micro_batch": b, "size_bytes": buf.numel() * buf.element_size(),
                     "time_s": one_way, "iter": i - a.warmup}
                )  # fmt: skip
        elif env.rank == 1:
            dist.irecv(buf, 0).wait()
            dist.isend(buf, 0).wait()
    return statistics.median(times) if times else None
