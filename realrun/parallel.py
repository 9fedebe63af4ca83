"""Tensor x pipeline x data layouts of a real run (`ddplab train --tp T --pp P`): which ranks
form which group, how the blocks split over stages, and the checks that refuse an impossible
layout before any process starts. torch-free (realrun/cli.py imports it at startup).

Ranks are laid out as Megatron-LM's initialize_model_parallel and sim/parallel3d.py do: a TP
group is ``tp`` consecutive ranks, a pipeline stage ``tp x dp`` consecutive ranks, a GPU's DP
group the ranks with its stage and TP position. In torch's DeviceMesh terms that is a mesh of
shape (pp, dp, tp), row-major, so rank = stage * dp * tp + dp_rank * tp + tp_rank.
"""

from typing import NamedTuple

SCHEDULES = ("gpipe", "1f1b", "interleaved")


class Layout(NamedTuple):
    tp: int
    pp: int
    dp: int
    micro_batches: int  # per step per pipeline (--grad-accum)
    schedule: str  # gpipe | 1f1b | interleaved (pp > 1), else "none"
    virtual: int = 1  # interleaved: model chunks per stage (Megatron's v), chunk g on stage g % pp

    def coords(self, rank: int) -> dict:
        """This rank's place: its stage, its position in its DP group and in its TP group."""
        return {
            "stage": rank // (self.tp * self.dp),
            "dp_rank": (rank % (self.tp * self.dp)) // self.tp,
            "tp_rank": rank % self.tp,
        }

    def describe(self, rank: int) -> dict:
        """The ``layout`` object of the meta record (realrun/SCHEMA.md, "train")."""
        return {**self._asdict(), **self.coords(rank)}


DEFAULT_VIRTUAL = 2  # `train --pp-schedule interleaved`'s chunks a stage without --pp-virtual-stages


def virtual_stages(args) -> int:
    """Model chunks a stage of `train --pp`: --pp-virtual-stages (DEFAULT_VIRTUAL without it) under the
    interleaved schedule, else 1."""
    if args.pp > 1 and args.pp_schedule == "interleaved":
        return args.pp_virtual_stages or DEFAULT_VIRTUAL
    return 1


def layout_problem(
    tp: int, pp: int, world_size: int | None, shape: dict, *, virtual: int = 1, micro_batches: int = 1
) -> str | None:
    """One line naming the flag and the value when (tp, pp) cannot run on ``world_size`` ranks of
    a model of ``shape`` (scenarios/models.toml's keys), else None. ``world_size`` None: not known
    here (`ddplab launch` checks before the nodes start), so not checked. ``virtual`` > 1: the
    interleaved schedule's chunks per stage, whose two end chunks may hold no block (the first the
    embedding alone, the last the output layer), as sim/parallel3d.py allows."""
    heads, kv_heads = shape["n_head"], shape.get("n_kv_head") or shape["n_head"]
    layers = shape["n_layer"]
    ffn = shape.get("ffn_hidden") or 4 * shape["n_embd"]
    if heads % tp or kv_heads % tp:
        return f"--tp {tp}: must divide the model's {heads} attention heads and {kv_heads} key/value heads"
    if ffn % tp:
        return f"--tp {tp}: must divide the model's MLP width {ffn}"
    if pp > layers:
        return f"--pp {pp}: the model has {layers} layers; a stage needs at least one"
    if virtual > 1 and pp * virtual > layers + 2:
        return f"--pp-virtual-stages {virtual}: {pp} x {virtual} chunks exceed the model's {layers} layers + 2"
    if virtual > 1 and micro_batches % pp:
        return f"--grad-accum {micro_batches}: the interleaved schedule needs a multiple of --pp ({pp})"
    if world_size is not None and world_size % (tp * pp):
        return f"--nproc {world_size}: not divisible by --tp {tp} x --pp {pp} = {tp * pp}"
    tied = shape.get("tied_embeddings", shape.get("layout", "gpt2") == "gpt2")
    if pp > 1 and tied:
        # The first stage's embedding and the last stage's output layer would be one tensor on two
        # ranks; Megatron allreduces its gradient between them, which these runs do not do.
        return f"--pp {pp}: the model ties its embedding to its output layer; use an untied (Llama-layout) preset"
    return None


def stage_layers(n_layer: int, pp: int) -> list[int]:
    """Blocks per stage: even, the remainder to the middle stages first (the first holds the
    embedding, the last the output layer and the loss). sim/parallel3d.py's chunk_layers with
    one chunk per stage; tests/test_train3d.py holds the two equal (realrun may not import sim)."""
    base, extra = divmod(n_layer, pp)
    sizes = [base] * pp
    order = sorted(range(pp), key=lambda g: (g in (0, pp - 1), abs(g - (pp - 1) / 2)))
    for g in order[:extra]:
        sizes[g] += 1
    return sizes
