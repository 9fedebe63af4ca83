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

- ``tp_block``: the model's forward and backward with its loss, bare and then with its blocks
  split over all the ranks of the probe (tp = world size; ColwiseParallel/RowwiseParallel as
  realrun/tp.py), in turns, as a training micro-batch runs them (embedding, blocks, output layer,
  loss), the TP model TP_REPEATS times back to back, the first not kept. The calibration keeps
  the bare model and the difference per block (TP minus bare over the blocks, forward and
  backward), as functions of tokens. What ran before the TP blocks matters on this box: right
  after unsharded work a TP block took 1.7x (the model: up to 3x) one in sequence (the first
  collective also waits for gloo's thread and the peer to wake), so the probe times them as a
  training step's accumulation runs them, in the model they sit in, one micro-batch after another.
- ``p2p``: rank 0 and rank 1 each run the unsharded block forward, then rank 0 sends the
  micro-batch's activation (tokens x n_embd in fp32) to rank 1 and rank 1 sends it back; half
  the round trip is one in-step send (torch.distributed.pipelining sends with isend/irecv).
"""

import copy
import statistics

import torch
import torch.distributed as dist

from realrun.dist import DistEnv, now

TP_REPEATS = 4  # TP micro-batches per turn; the first is not kept


class _Blocks(torch.nn.Module):
    """The model's blocks in sequence, where realrun/tp.py's shard_blocks looks for them (``.h``)."""

    def __init__(self, blocks):
        super().__init__()
        self.h = torch.nn.ModuleList(blocks)

    def forward(self, x, rope):
        for block in self.h:
            x = block(x, rope)
        return x


def _model_fwd_bwd(model, x, y, device) -> tuple[float, float]:
    model.zero_grad(set_to_none=True)
    t0 = now(device)
    _, per_seq = model(x, y)
    t1 = now(device)
    per_seq.mean().backward()
    return t1 - t0, now(device) - t1


def tp_block(env: DistEnv, a, writer, model) -> dict:
    """Records ``tp_block`` (each rank, each micro-batch size, each iteration: the model's forward
    and backward with its loss, bare (no DDP, as a TP or pipeline run computes) and TP-split
    over the probe's ranks, one after the other) and ``p2p`` (rank 0); returns rank 0's medians
    for the printout. The sizes take turns, iteration by iteration, as the compute probe's do."""
    from torch.distributed.device_mesh import init_device_mesh

    from realrun.tp import shard_blocks

    device, tp = env.device, env.world_size
    cfg = model.cfg
    sharded = copy.deepcopy(model)
    shard_blocks(sharded, init_device_mesh(device.type, (tp,)))
    n = cfg.n_layer
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
            _, idx, tgt = inputs[b]
            mf, mb = _model_fwd_bwd(model, idx, tgt, device)
            # TP micro-batches back to back, as a step's accumulation runs them; the first, right
            # after the bare model, not kept (its collectives wait for gloo's thread and the peer
            # to wake: up to 3x one in sequence on this box).
            reps = [_model_fwd_bwd(sharded, idx, tgt, device) for _ in range(TP_REPEATS)][1:]
            sf, sb = (sum(t[k] for t in reps) / len(reps) for k in (0, 1))
            if i >= a.warmup:
                rows[b].append((mf, mb, sf, sb))
                writer.write(
                    {"type": "tp_block", "tp": tp, "blocks": n, "micro_batch": b, "seq_len": a.seq_len,
                     "tokens": b * a.seq_len, "model_forward_s": mf, "model_backward_s": mb,
                     "tp_model_forward_s": sf, "tp_model_backward_s": sb, "iter": i - a.warmup}
                )  # fmt: skip
    out = {}
    plain = _Blocks(list(model.transformer.h))
    for b in a.micro_batches:
        cols = zip(*rows[b], strict=True)
        out[b] = {k: statistics.median(v) for k, v in zip(("mf", "mb", "sf", "sb"), cols, strict=True)}
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
