"""Scenario configuration: validated keyword-only dataclasses, one per TOML section
(sim/scenario_file.py reads the files and fills them).

Every field has its unit in its name and a docstring. A bad value raises ``ValueError``
naming the key (``noise.sigma``) and the value; the CLI turns that into one line and exit 2.
``scenarios/README.md`` documents every key with its source.

Over 400 lines on purpose: this is the whole schema, and a reader looking up one key
should find every other beside it; it holds no logic beyond each field's check and which keys
another key's setting leaves unused (``unused_keys``, ``inert_key``).
"""

import math
from dataclasses import dataclass, field, fields, is_dataclass

from sim.model_source import SHAPE_KEYS, resolve_model
from sim.nccl_time import nvls_loop_128k_us
from sim.precision import PRECISIONS, Precision, precision_dtypes, sharded
from sim.topology import PLACEMENTS
from sim.transformer import GPT2Shape, ulysses_refusal
from sim.tuning_tables import TABLES

NOISE_DISTRIBUTIONS = ("none", "lognormal", "normal", "gamma", "empirical")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")
STACKS = ("eager", "compiled")  # compute.stack: what runs the step (sim/roofline.py)
# Measured multipliers resampled as they are (noise.samples, network.jitter_samples): fewer
# than this is not a distribution to draw from.
MIN_SAMPLES = 8
SHARDED_MODES = ("fsdp", "hsdp")  # training.mode values that run sim/fsdp.py's per-unit model
MODES = ("ddp", "fsdp", "hsdp", "zero1")  # training.mode
# Modes whose module holds 16-bit weights beside an fp32 master copy (sim/precision.py ``sharded``).
MASTER_COPY_MODES = (*SHARDED_MODES, "zero1")
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")  # training.pp_schedule (sim/pipeline.py)
CP_COMMS = ("all_gather", "p2p", "a2a")  # training.cp_comm: Megatron-Core's cp_comm_type names (sim/tp.py)
RECOMPUTE = ("none", "selective", "full", "op")  # training.activation_checkpointing as a string
TP_OVERLAPS = ("none", "wgrad", "full")  # training.tp_comm_overlap (sim/tp.py); true = full, false = none
DEFAULT_BUCKET_CAP_MB = 25.0  # torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB


def _require(cond: bool, key: str, value, why: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {why}, got {value!r}")


def _one_of(key: str, value, allowed) -> None:
    _require(value in allowed, key, value, f"must be one of {', '.join(map(str, allowed))}")


def tp_overlap_level(value) -> str:
    """training.tp_comm_overlap as one of TP_OVERLAPS: true is full, false none."""
    level = {True: "full", False: "none"}[value] if isinstance(value, bool) else value
    why = f"must be one of {', '.join(TP_OVERLAPS)}, true, false"
    _require(level in TP_OVERLAPS, "training.tp_comm_overlap", value, why)
    return level


@dataclass(kw_only=True)
class ModelConfig:
    """The model: a preset, a Hugging Face config.json or shape keys alone; shape keys set beside
    a preset or config.json override theirs (sim/model_source.py)."""

    preset: str | None = None
    """Model preset name from scenarios/models.toml (GPT-2 or Llama layout); unset = gpt2-760m
    when no other model key is set."""
    hf_config: str | None = None
    """A Hugging Face config.json to take the shape from instead of a preset (LlamaForCausalLM,
    MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel; sim/hf_config.py); a relative path
    is from the scenario file's folder (--set: the working directory)."""
    name: str | None = None
    """What outputs call the model; unset = the preset whose shape it is, else the preset's or
    hf_config's name with the keys changed (llama3-8b+n_layer=40), else "custom"."""
    layout: str | None = None
    """gpt2 | llama (sim/transformer.py); unset = the preset's or hf_config's, else gpt2."""
    n_layer: int | None = None
    """Transformer blocks."""
    n_embd: int | None = None
    """Model width d (hidden_size)."""
    n_head: int | None = None
    """Attention (query) heads; n_embd / n_head is the head size."""
    n_kv_head: int | None = None
    """llama: key/value heads (grouped-query attention), dividing n_head; gpt2: n_head."""
    ffn_hidden: int | None = None
    """llama: SwiGLU's hidden size (intermediate_size); gpt2: 4 n_embd."""
    block_size: int | None = None
    """Context length in tokens (max_position_embeddings); training.seq_len 0 trains at it."""
    vocab_size: int | None = None
    """Vocabulary size (embedding and output layer rows)."""
    tied_embeddings: bool | None = None
    """The output layer is the input embedding (gpt2: always; llama: unset = false)."""
    rope_theta: float | None = None
    """llama: RoPE's base (unset = 10000); changes no FLOP or byte."""
    qkv_bias: bool | None = None
    """llama: a bias on Q, K and V as Qwen2's (unset = false); gpt2 biases every linear."""
    shape: GPT2Shape = field(init=False, repr=False, compare=False)
    """The resolved layer shapes, once here (not a TOML key)."""

    def __post_init__(self):
        keys = {k: getattr(self, k) for k in SHAPE_KEYS}
        self.shape = resolve_model(preset=self.preset, hf_config=self.hf_config, name=self.name, keys=keys)


@dataclass(kw_only=True)
class TrainingConfig:
    micro_batch_size: int = 8
    """Sequences per rank per micro-step."""
    seq_len: int = 0
    """Tokens per sequence; 0 = the model's context length."""
    grad_accum: int = 1
    """Micro-steps per optimizer step; only the last one synchronises (DDP no_sync)."""
    bucket_cap_mb: float = 25.0
    """DDP bucket cap in MiB (PyTorch default 25); fsdp and hsdp reduce per unit (sim/fsdp.py,
    sim/parallel3d.py) and refuse another value."""
    first_bucket_mb: float | None = None
    """First bucket's cap in MiB; unset = as PyTorch: 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES)
    when bucket_cap_mb is the default 25, else bucket_cap_mb (torch 2.13 _BucketCapacityConfig).
    fsdp and hsdp (no buckets) and tp, cp, pp or zero1 jobs (buckets all bucket_cap_mb) refuse it."""
    precision: str = "bf16-amp"
    """fp32 | tf32 | bf16-amp | bf16 | fp16-amp, as `ddplab train --precision`: decides the dtype of
    weights, matmuls, gradients (and so DDP's buckets) and optimizer state (sim/precision.py)."""
    overlap: bool = True
    """Launch each bucket's allreduce as soon as it is ready (DDP); false = after backward. fsdp/hsdp
    without tp, cp or pp overlap by fsdp_prefetch instead and refuse false."""
    comm_hook: str = "none"
    """DDP comm hook: none | fp16 | bf16 (2-byte wire format) | powersgd."""
    powersgd_rank: int = 1
    """PowerSGD matrix_approximation_rank (comm_hook powersgd; refused with another hook)."""
    compress_s_per_gb: float = 0.0
    """Encode + decode time per GB of uncompressed gradient, on the comm path (a DDP comm hook's; the
    sharded modes, which have none, refuse it)."""
    mode: str = "ddp"
    """ddp (every rank holds the whole model, gradients allreduced in buckets) | fsdp (FSDP /
    ZeRO-3: parameters, gradients and optimizer state sharded; each unit allgathered for its
    forward and again for its backward, its gradients reduce-scattered; sim/fsdp.py) | hsdp
    (hybrid sharding, FSDP's HYBRID_SHARD / FSDP2 on a 2-D mesh: fsdp within groups of
    hsdp_shard_size ranks, each unit's gradient shard then allreduced across the groups) | zero1
    (Megatron's distributed optimizer, ZeRO stage 1: the fp32 master weights and the optimizer's
    moments sharded over the data-parallel ranks, gradients reduce-scattered in buckets and the
    updated 16-bit weights allgathered; simulated by sim/parallel3d.py at any tp and pp)."""
    hsdp_shard_size: int = 0
    """hsdp: ranks per shard group, consecutive ranks; 0 = network.gpus_per_node (one node),
    or every rank when the job is smaller than a node. Must divide ranks, and divide or be a
    multiple of network.gpus_per_node. With tp, cp or pp: ranks of the data-parallel group
    (dp x cp) per shard group; 0 = the group's ranks in one node (gpus_per_node / tp of them,
    at most dp x cp); must divide dp x cp (sim/parallel3d.py)."""
    fsdp_prefetch: int = 1
    """fsdp, hsdp: units whose allgather is issued ahead of the unit computing (0 = none, 1 = FSDP's
    backward_prefetch=BACKWARD_PRE with forward_prefetch, or FSDP2's implicit prefetch)."""
    fp8_all_gather: bool = False
    """fsdp, hsdp with precision fp8: each block's linear weights allgathered in FP8, one byte a
    parameter, each rank casting its own shard before the gather (torchao's Float8 training with
    enable_fsdp_float8_all_gather: torchtitan's --float8.enable_fsdp_float8_all_gather). The root
    unit (embeddings, final norm, output layer: torchtitan leaves ``output`` out of Float8) and
    the norms stay 16-bit; reduce-scatters are unchanged (sim/fsdp.py, sim/memory.py)."""
    activation_checkpointing: bool | str = False
    """none | selective | full | op (true = full, false = none). full: recompute each transformer
    block's forward in its backward: only block inputs are kept (memory estimate), and backward
    costs one more forward of every block, in ddp and fsdp mode alike (sim/workload.py,
    sim/fsdp.py). selective: Megatron's (Korthikanti et al. 2022): only attention's core (the
    scores, softmax and weighted sum) is recomputed, so its s x s tensors are not kept; each
    engine reruns the core's share of the forward (sim/workload.py forward_shares). Under fused
    attention that core keeps only its log-sum-exp, so selective saves almost nothing there.
    op: torchtitan's per-op selective AC (its default, selective_ac_option "op"): each block keeps
    its input and the outputs of SDPA and of every other matmul (wq, wv, w1, w2) and reruns the
    rest in backward (sim/memory.py op_saved_bytes, sim/roofline.py op_kept_share); modelled for
    Llama blocks in jobs without tp or cp (pipelines and zero1 included)."""
    fused_attention: bool = True
    """Attention through a fused kernel (SDPA/FlashAttention, as realrun's model) that keeps no
    seq x seq score matrix for backward. false: the scores, softmax and weighted sum as separate
    kernels over the whole seq x seq square, timed (sim/roofline.py unfused_attention) and
    kept for backward (sim/memory.py)."""
    fused_loss: bool = False
    """The loss as one fused cross-entropy kernel over the 16-bit logits (flash-attn's
    CrossEntropyLoss, llm-foundry's MPT default; Liger's and others like it), where false is
    eager F.cross_entropy under autocast (realrun's model): an fp32 copy of the logits,
    log_softmax and the NLL, and their backward. Timed (sim/roofline.py loss_kernels) and in
    memory (sim/memory.py loss_bytes_per_logit)."""
    dropout: float = 0.0
    """Dropout probability, as Megatron-LM applies it (its default 0.1; nanoGPT's and llm.c's
    GPT-2 pre-training: 0): on the attention probabilities and after attention and the MLP.
    Only whether it is on matters: its masks are kept (sim/memory.py, sim/memory3d.py) and, with
    unfused attention, the probabilities' dropout is timed; on the residual branches it runs
    fused into the residual add (sim/roofline.py)."""
    tp: int = 1
    """Tensor-parallel ranks (Megatron-style, inside one node): each block's matmuls sharded
    over them, two allreduces per block in forward and two in backward (sim/tp.py)."""
    sequence_parallel: bool = False
    """With tp > 1: Megatron's sequence parallelism, norms and dropout sharded along the sequence;
    each allreduce becomes an allgather and a reduce-scatter, activations all / tp (sim/tp.py)."""
    tp_comm_overlap: bool | str = "none"
    """How much of TP's communication runs under matmuls (sim/tp.py). none (false): all of it
    exposed, as Megatron-LM (2021) and PyTorch's plain DTensor TP issue it. wgrad (tp > 1): each
    column-split layer's input gradient reduce-scattered (all-reduced without sequence
    parallelism) while its weight-gradient matmul runs, Transformer Engine's and Megatron-Core's
    default. full (true; tp > 1 and sequence_parallel): each block's all-gathers and
    reduce-scatters split into tp chunks and run under the matmul each feeds or follows, as
    Transformer Engine's userbuffers (NeMo's ub_tp_comm_overlap) and PyTorch's micro-pipelined TP
    (torchtitan's AsyncTP) do; only what a collective outlasts of (tp - 1) / tp of its matmul is
    exposed."""
    cp: int = 1
    """Context-parallel ranks (Llama 3's all-gather CP): each sequence split over them in 2 x cp
    chunks (rank i holds chunks i and 2 cp - 1 - i, so the causal work is even); every block
    all-gathers K and V over them in forward and reduce-scatters their gradients in backward,
    exposed; activations / cp; gradients reduced over dp x cp (sim/tp.py, sim/parallel3d.py)."""
    cp_comm: str = "all_gather"
    """How a CP group exchanges K and V (Megatron-Core's cp_comm_type): all_gather (Llama 3's,
    exposed) | p2p (ring attention: each rank's chunk passed around the ring in cp - 1 steps,
    each step's transfer under that step's share of attention) | a2a (DeepSpeed Ulysses: all-to-
    alls trade tokens for heads around attention, four a block each way, exposed; the heads must
    split over cp; sim/tp.py)."""
    pp: int = 1
    """Pipeline stages; the blocks split evenly, the embedding on the first, the output layer and
    loss on the last; grad_accum micro-batches per step flow through them (sim/pipeline.py)."""
    pp_schedule: str = "1f1b"
    """gpipe (every forward, then every backward) | 1f1b (PipeDream-Flush) | interleaved
    (Megatron's, pp_virtual_stages model chunks per stage; needs grad_accum a multiple of pp)."""
    pp_virtual_stages: int = 1
    """interleaved: model chunks per stage (Narayanan et al. 2021's v); 1 otherwise."""
    pp_layers: list[int] | None = None
    """Blocks per model chunk, in order (pp x pp_virtual_stages numbers summing to model.n_layer),
    to place them by hand (e.g. fewer on the first and last stages, which hold the embedding and
    the output layer); unset = even, the remainder to the middle chunks (sim/parallel3d.py)."""

    @property
    def effective_first_bucket_mb(self) -> float:
        if self.first_bucket_mb is not None:
            return self.first_bucket_mb
        return 1.0 if self.bucket_cap_mb == DEFAULT_BUCKET_CAP_MB else self.bucket_cap_mb

    def __post_init__(self):
        for key in ("micro_batch_size", "grad_accum", "powersgd_rank"):
            _require(getattr(self, key) >= 1, f"training.{key}", getattr(self, key), "must be >= 1")
        _require(self.seq_len >= 0, "training.seq_len", self.seq_len, "must be >= 0")
        _require(0 <= self.dropout < 1, "training.dropout", self.dropout, "must be in [0, 1)")
        _require(self.bucket_cap_mb > 0, "training.bucket_cap_mb", self.bucket_cap_mb, "must be > 0")
        if self.first_bucket_mb is not None:
            _require(self.first_bucket_mb > 0, "training.first_bucket_mb", self.first_bucket_mb, "must be > 0")
        _one_of("training.precision", self.precision, PRECISIONS)
        _one_of("training.comm_hook", self.comm_hook, COMM_HOOKS)
        _require(
            self.compress_s_per_gb >= 0,
            "training.compress_s_per_gb",
            self.compress_s_per_gb,
            "must be >= 0",
        )
        _one_of("training.mode", self.mode, MODES)
        if isinstance(self.activation_checkpointing, str):
            _one_of("training.activation_checkpointing", self.activation_checkpointing, RECOMPUTE + (True, False))
            # Strings none and full are the booleans every existing reader tests; selective stays.
            self.activation_checkpointing = {"none": False, "full": True}.get(
                self.activation_checkpointing, self.activation_checkpointing
            )
        else:
            _one_of("training.activation_checkpointing", self.activation_checkpointing, (True, False))
        for key in ("tp", "cp", "pp", "pp_virtual_stages"):
            _require(getattr(self, key) >= 1, f"training.{key}", getattr(self, key), "must be >= 1")
        _one_of("training.pp_schedule", self.pp_schedule, PP_SCHEDULES)
        _one_of("training.cp_comm", self.cp_comm, CP_COMMS)
        if self.pp_virtual_stages > 1:
            _require(
                self.pp_schedule == "interleaved",
                "training.pp_virtual_stages",
                self.pp_virtual_stages,
                'needs training.pp_schedule = "interleaved"',
            )
        if self.pp_schedule == "zb-h1" and self.pp > 1:
            # Its order and its bubble, (p - 1)(T_F + T_B - T_W), are Qi et al.'s for m >= p.
            _require(
                self.grad_accum >= self.pp,
                "training.grad_accum",
                self.grad_accum,
                f"ZB-H1 needs at least training.pp ({self.pp}) micro-batches",
            )
        if self.pp_schedule == "interleaved" and self.pp > 1:
            _require(
                self.grad_accum % self.pp == 0,
                "training.grad_accum",
                self.grad_accum,
                f"the interleaved schedule needs a multiple of training.pp ({self.pp})",
            )
        given = self.tp_comm_overlap
        self.tp_comm_overlap = tp_overlap_level(given)
        if self.tp_comm_overlap != "none":
            why = "needs training.tp > 1 (the tensor-parallel collectives it overlaps)"
            _require(self.tp > 1, "training.tp_comm_overlap", given, why)
        if self.tp_comm_overlap == "full":
            why = "full needs training.sequence_parallel (it overlaps TP's all-gathers and reduce-scatters)"
            _require(self.sequence_parallel, "training.tp_comm_overlap", given, why)
        _require(self.fsdp_prefetch >= 0, "training.fsdp_prefetch", self.fsdp_prefetch, "must be >= 0")
        if self.fp8_all_gather:
            why = "needs training.precision = fp8 (the FP8 weights it gathers)"
            _require(self.precision == "fp8", "training.fp8_all_gather", self.fp8_all_gather, why)
            why = "needs training.mode fsdp or hsdp (it is FSDP's allgather of the weights)"
            _require(self.mode in SHARDED_MODES, "training.fp8_all_gather", self.fp8_all_gather, why)
            why = "is modelled for FSDP alone, not with tp, cp or pp"
            _require(self.tp * self.cp * self.pp == 1, "training.fp8_all_gather", self.fp8_all_gather, why)
        _require(self.hsdp_shard_size >= 0, "training.hsdp_shard_size", self.hsdp_shard_size, "must be >= 0")
        # Keys another set-up uses change nothing in this one: refused (until 2026-12-07 they were
        # taken without a word). The first, in unused_keys' order.
        for key, (_, why) in unused_keys(self, self.mode, self.tp, self.cp, self.pp).items():
            _require(False, f"training.{key}", getattr(self, key), why)

    @property
    def recompute(self) -> str:
        """none | selective | full | op."""
        c = self.activation_checkpointing
        return c if isinstance(c, str) else ("full" if c else "none")

    @property
    def dtypes(self) -> Precision:
        """Bytes per element of each kind of tensor under ``precision`` (and, sharded, FSDP's
        mixed precision: sim/precision.py)."""
        dtypes = precision_dtypes(self.precision)
        return sharded(dtypes) if self.mode in MASTER_COPY_MODES else dtypes


def op_refusal(shape: GPT2Shape, *, tp: int, cp: int, fused_attention: bool) -> str | None:
    """Why torchtitan's per-op checkpointing (activation_checkpointing = "op") is not modelled for
    this model and job, or None where it is. Its policy counts aten.mm calls in its Llama block's
    order (a biased linear is an addmm, which it does not count) and keeps SDPA's outputs; with TP
    it also keeps the reduce-scatters and reruns the all-gathers, which sim/tp.py does not model.
    `ddplab plan` asks the same before it searches op (sim/planner.py)."""
    if not shape.swiglu or shape.qkv_bias:
        return f"torchtitan's per-op AC is modelled on its bias-free Llama block, and {shape.name} is not one"
    if tp * cp > 1:
        return "is modelled without tp or cp (there: selective or full)"
    if not fused_attention:
        return "keeps fused attention's (SDPA's) output, and training.fused_attention is false"
    return None


def unused_keys(t: TrainingConfig, mode: str, tp: int, cp: int, pp: int) -> dict[str, tuple]:
    """``t``'s keys that a ``mode`` job at tp x cp x pp has no use for, each with the value such a
    job takes and why: FSDP reduces per unit in any layout (no DDP buckets: sim/fsdp.py,
    sim/parallel3d.py) and alone prefetches (no overlap switch); a tp, cp, pp or zero1 job's buckets
    are all bucket_cap_mb; only fsdp and hsdp prefetch, only hsdp has shard groups; the sharded
    modes and zero1 reduce plain gradients in the precision's dtype (no comm hook), and a tp, cp or
    pp job has no PowerSGD. TrainingConfig refuses them (``t``'s own mode and layout); what changes
    a job's mode or layout sets them to those values (``keys_for``)."""
    default = {f.name: f.default for f in fields(TrainingConfig)}  # not TrainingConfig(): its check calls this
    three_d = tp * cp * pp > 1 or mode == "zero1"
    hook = "none" if mode in MASTER_COPY_MODES or (tp * cp * pp > 1 and t.comm_hook == "powersgd") else t.comm_hook
    rules = [
        ("comm_hook", "none", mode in MASTER_COPY_MODES,
         f"{mode} mode models no DDP comm hook (training.precision sets the reduce dtype)"),
        ("comm_hook", "none", tp * cp * pp > 1 and t.comm_hook == "powersgd",
         "powersgd with tp, cp or pp is not modelled (none, fp16 or bf16)"),
        ("compress_s_per_gb", 0.0, mode in MASTER_COPY_MODES,
         f"{mode} mode models no DDP comm hook, whose encoding this times"),
        ("bucket_cap_mb", default["bucket_cap_mb"], mode in SHARDED_MODES,
         f"{mode} mode reduces per unit (a block), not in DDP's buckets; leave it unset"),
        ("first_bucket_mb", None, mode in SHARDED_MODES,
         f"{mode} mode reduces per unit (a block), not in DDP's buckets; leave it unset"),
        ("first_bucket_mb", None, three_d,
         "a tp, cp, pp or zero1 job's buckets are all bucket_cap_mb (sim/parallel3d.py bucket_count)"),
        ("overlap", default["overlap"], mode in SHARDED_MODES and not three_d,
         f"{mode} mode overlaps by training.fsdp_prefetch (0: no prefetch; sim/fsdp.py)"),
        ("fsdp_prefetch", default["fsdp_prefetch"], mode not in SHARDED_MODES,
         f"is fsdp's and hsdp's (units gathered ahead); {mode} mode has none"),
        ("hsdp_shard_size", default["hsdp_shard_size"], mode != "hsdp",
         f"is hsdp's (ranks per shard group); {mode} mode has none"),
        ("powersgd_rank", default["powersgd_rank"], hook != "powersgd",
         f"is PowerSGD's rank (training.comm_hook = powersgd); the hook is {hook}"),
    ]  # fmt: skip
    out: dict[str, tuple] = {}
    for key, value, applies, why in rules:
        if applies and key not in out and getattr(t, key) != value:
            out[key] = (value, why)
    return out


def keys_for(t: TrainingConfig, mode: str, tp: int, cp: int, pp: int) -> dict:
    """``unused_keys``' values alone: what a change to ``mode`` at tp x cp x pp sets them to
    (`plan`'s candidates, sim/planner.py; the memory fit's alternatives, sim/memory_fit.py;
    whatif's rows, sim/whatif.py)."""
    return {key: value for key, (value, _) in unused_keys(t, mode, tp, cp, pp).items()}


@dataclass(kw_only=True)
class ComputeConfig:
    device_class: str = ""
    """The GPU class (h100, mi300x, a100; calibrate/devices.py) whose one-GPU calibration carries
    into this scenario (`simulate --calib`, mode device); "" = none."""
    peak_tflop_s: float = 989.4
    """Dense bf16/fp16 tensor peak of one accelerator, TFLOP/s."""
    peak_tf32_tflop_s: float = 494.7
    """Dense TF32 tensor peak, TFLOP/s (training.precision = tf32)."""
    peak_fp32_tflop_s: float = 66.9
    """fp32 peak without tensor cores, TFLOP/s (training.precision = fp32)."""
    peak_fp8_tflop_s: float = 1978.9
    """Dense FP8 tensor peak, TFLOP/s (training.precision = fp8): H100 SXM 1,978.9 (NVIDIA's
    datasheet: 3,958 with sparsity). 0 = the device has no FP8 matmuls (A100, and the home lab's
    pair: the M2 has none), and training.precision = fp8 is refused."""
    hbm_tb_s: float = 3.35
    """Device memory bandwidth, TB/s (the roofline's memory-bound kernels, the optimizer step)."""
    stack: str = "eager"
    """What runs the step (sim/roofline.py): eager (plain PyTorch, as `ddplab train` without
    --compile: every op its own kernel, memory-bound ones at eager_memory_efficiency) | compiled
    (a fused step: torch.compile, llm.c; memory-bound kernels at memory_efficiency)."""
    mfu: float | None = None
    """A fixed model FLOPs utilisation (FLOPs / (peak x mfu) per micro-step); unset = the roofline
    of every kernel (sim/roofline.py), which follows the work per kernel. Activation
    checkpointing's rerun forward is added on top, so the MFU printed comes out below it."""
    matmul_efficiency: float = 0.80
    """Roofline: achieved fraction of the precision's peak in large matmuls."""
    attention_efficiency: float = 0.35
    """Roofline: achieved fraction of the peak in fused causal attention."""
    memory_efficiency: float = 0.90
    """Roofline, stack compiled: achieved fraction of hbm_tb_s in memory-bound kernels."""
    eager_memory_efficiency: float = 0.31
    """Roofline, stack eager: achieved fraction of hbm_tb_s in eager PyTorch's unfused memory-bound
    kernels (fitted on one H200 eager step, docs/gpu.md)."""
    kernel_launch_us: float = 5.0
    """Roofline: the least time one eager kernel takes (the host's cost of issuing it), microseconds."""
    step_compute_s: float | None = None
    """Forward + backward time of one micro-step, given directly (overrides the roofline and mfu)."""
    backward_fraction: float | None = None
    """Share of a micro-step spent in backward; unset = the roofline's split (2/3 with mfu or
    step_compute_s: backward is 2 x forward FLOPs)."""
    optimizer_s: float | None = None
    """Optimizer step time of the whole model, the same on every rank, seconds; unset = derived
    from the parameters, the precision's optimizer bytes and hbm_tb_s (sim/optimizer.py)."""
    dataloader_batch_s: float = 0.0
    """One loader worker's time to build one micro-batch, seconds (0 = data is free). The
    loop takes one batch per micro-step from PyTorch's DataLoader (sim/loader.py): it waits
    only where the workers fall behind compute, or for the first batch."""
    dataloader_workers: int = 0
    """DataLoader num_workers: 0 builds each batch in the training loop, blocking (torch's
    default); W > 0 builds them ahead in W processes."""
    dataloader_prefetch_factor: int = 2
    """DataLoader prefetch_factor: batches each worker has queued ahead (torch's default 2)."""
    interference_gamma: float = 0.0
    """Compute slows by (1 + gamma) while a collective runs on the same rank."""
    ready_fractions: dict[str, float] | None = None
    """Measured bucket-ready profile: parameter name -> fraction of the last backward done
    when its gradient is ready (`ddplab calibrate`); unset = from FLOP counts (sim/transformer.py)."""
    memory_peak_gib: float | None = None
    """Peak allocated memory per GPU as measured (`ddplab calibrate` on a GPU probe), reported
    beside sim/memory.py's estimate and used to say whether it fits; unset = the estimate."""
    device_memory_gib: float = 79.65
    """Memory of one device as its driver reports it, GiB (2^30 bytes): the budget the per-GPU
    memory estimate must fit, or `simulate` refuses (exit 3) and names what would fit. Default:
    the H100 SXM's 81,559 MiB (nvidia-smi), as the other defaults here; 0 = no check (a CPU-only
    rank, whose host RAM the OS pages: docs/gpu.md "Does it fit?")."""

    def __post_init__(self):
        if self.memory_peak_gib is not None:
            _require(self.memory_peak_gib > 0, "compute.memory_peak_gib", self.memory_peak_gib, "must be > 0")
        _require(
            0 <= self.device_memory_gib < math.inf,
            "compute.device_memory_gib",
            self.device_memory_gib,
            "must be >= 0 and finite (0 = no memory check)",
        )
        if self.ready_fractions is not None:
            for name, frac in self.ready_fractions.items():
                _require(0 <= frac <= 1, f"compute.ready_fractions.{name}", frac, "must be in [0, 1]")
        for key in ("peak_tflop_s", "peak_tf32_tflop_s", "peak_fp32_tflop_s", "hbm_tb_s"):
            _require(getattr(self, key) > 0, f"compute.{key}", getattr(self, key), "must be > 0")
        _require(self.peak_fp8_tflop_s >= 0, "compute.peak_fp8_tflop_s", self.peak_fp8_tflop_s, "must be >= 0")
        if self.mfu is not None:
            _require(0 < self.mfu <= 1, "compute.mfu", self.mfu, "must be in (0, 1]")
        _one_of("compute.stack", self.stack, STACKS)
        for key in ("matmul_efficiency", "attention_efficiency", "memory_efficiency", "eager_memory_efficiency"):
            _require(0 < getattr(self, key) <= 1, f"compute.{key}", getattr(self, key), "must be in (0, 1]")
        _require(self.kernel_launch_us >= 0, "compute.kernel_launch_us", self.kernel_launch_us, "must be >= 0")
        if self.step_compute_s is not None:
            _require(
                self.step_compute_s > 0,
                "compute.step_compute_s",
                self.step_compute_s,
                "must be > 0",
            )
        if self.backward_fraction is not None:
            _require(
                0 < self.backward_fraction < 1,
                "compute.backward_fraction",
                self.backward_fraction,
                "must be in (0, 1)",
            )
        if self.optimizer_s is not None:
            _require(self.optimizer_s >= 0, "compute.optimizer_s", self.optimizer_s, "must be >= 0")
        for key in ("dataloader_batch_s", "dataloader_workers", "interference_gamma"):
            _require(getattr(self, key) >= 0, f"compute.{key}", getattr(self, key), "must be >= 0")
        _require(
            self.dataloader_prefetch_factor >= 1,
            "compute.dataloader_prefetch_factor",
            self.dataloader_prefetch_factor,
            "must be >= 1",
        )

    def peak_for(self, dtypes: Precision) -> float:
        """The dense peak the precision's matmuls run at, TFLOP/s."""
        peaks = {"bf16": self.peak_tflop_s, "tf32": self.peak_tf32_tflop_s, "fp32": self.peak_fp32_tflop_s}
        return (peaks | {"fp8": self.peak_fp8_tflop_s})[dtypes.peak]


@dataclass(kw_only=True)
class NetworkConfig:
    enabled: bool = True
    """false = communication is free (ranks still synchronise every step)."""
    backend: str = "nccl"
    """nccl (NCCL/RCCL protocol table) | gloo (ring, TCP)."""
    algorithm: str = "auto"
    """auto (the library's own choice, sim/nccl.py) | ring | tree | nvls | nvlstree."""
    tuner: str = "nccl-hopper"
    """Whose choice: nccl-hopper | nccl-ampere | rccl-mi300x (the constants of sim/tuning_tables.py)."""
    gpus_per_node: int = 8
    """Ranks per node, joined by the intra-node link."""
    intra_link: str = "nvlink"
    """nvlink | xgmi | pci: which per-hop latencies apply inside a node."""
    intra_gb_s: float = 450.0
    """Intra-node link rate per GPU per direction, GB/s."""
    intra_efficiency: float = 0.82
    """Achieved ring bus bandwidth / intra_gb_s."""
    nics_per_node: int = 8
    """NICs per node, one ring channel each."""
    nic_gbit_s: float = 400.0
    """Line rate of one NIC, Gbit/s."""
    nic_efficiency: float = 0.94
    """Achieved bus bandwidth / NIC line rate."""
    gloo_hop_latency_us: float = 50.0
    """gloo: latency of one ring step (roughly a TCP round trip), microseconds."""
    channels: int = 16
    """NCCL ring/tree channels: the per-channel bandwidth ceilings of LL128 and the tree x this."""
    cpu_vendor: str = "intel"
    """intel | amd: the host CPU; NCCL's LL ceiling across nodes and its per-step net overhead follow it."""
    nvls_gb_s: float = 0.0
    """NVLink SHARP allreduce bus bandwidth inside a node, GB/s; 0 = no NVLS (no NVSwitch)."""
    net_hop_us: float = 16.0
    """What each step across nodes adds to NVIDIA's measured NET latency (NIC, switches, the
    proxy thread), microseconds (sim/nccl_time.py)."""
    latency_ll_us: float = 17.0
    """NCCL/RCCL: a collective's fixed latency on one node with the LL protocol (launch, first
    and last step, completion), microseconds, with a process per GPU; fitted per platform on a
    one-node curve."""
    latency_ll128_us: float = 31.5
    """The same with LL128, microseconds."""
    latency_simple_us: float = 45.0
    """The same with Simple, microseconds."""
    nvls_latency_us: float = 80.0
    """NVLS-tree: the NVLink SHARP stage's fixed latency inside a node, microseconds."""
    gpus_per_process: int = 1
    """GPUs one process drives (nccl-tests -g); 1 for DDP and FSDP under torchrun, a process per GPU."""
    ll_us_per_process_gpu: float = 2.6
    """An LL collective from one process driving several GPUs: what each GPU past the first adds to
    its latency, microseconds (sim/nccl_time.py)."""
    nvls_channels: int = 16
    """NVLS on one node: NCCL's NVLS channels (NVLS_NCHANNELS: 16 on Hopper, 32 on Blackwell)."""
    nvls_fixed_us: float = 9.5
    """NVLS on one node: the fixed part of a collective besides its loops, microseconds (sim/nccl_time.py)."""
    nvls_loop_us: float = 4.4
    """NVLS on one node: the overhead of one loop of NCCL's NVLS kernel besides its bytes, microseconds."""
    msccl_gb_s: float = 0.0
    """RCCL's MSCCL all-pairs allreduce (8 GPUs of one fully connected node, 512 KiB-16 MiB, the
    Simple protocol on 8 channels) bus bandwidth, GB/s; 0 = the library has none (sim/msccl.py)."""
    msccl_latency_us: float = 0.0
    """That all-pairs allreduce's fixed latency, microseconds."""
    jitter_sigma: float = 0.0
    """Lognormal sigma of a per-collective time multiplier (mean 1)."""
    jitter_samples: list[float] | None = None
    """Measured per-collective time multipliers over the median time, resampled as they are (the
    collective model is fitted to medians); `ddplab calibrate` writes them. Instead of jitter_sigma."""
    jitter_samples_bytes: list[int] | None = None
    """The call size each of jitter_samples was timed at, bytes, in the same order: a collective
    then draws from the multipliers of the measured size nearest its own (sim/noise.py
    SizePools); without it, from all of them. `ddplab calibrate` writes it beside them."""
    gpus_per_rack: int = 0
    """GPUs under one rack (ToR) switch, a multiple of gpus_per_node; 0 = no rack tier (sim/topology.py)."""
    gpus_per_pod: int = 0
    """GPUs in one full-bisection pod, a multiple of gpus_per_rack (or gpus_per_node); 0 = no pod tier:
    every node on one flat network."""
    cluster_pods: int = 0
    """Pods in the whole cluster, that a scattered job is dealt over; 0 = as many as the job fills."""
    pod_oversubscription: float = 1.0
    """A pod's downlink capacity / its uplink capacity to the tier above (Llama 3's 1:7 = 7);
    1 = full bisection."""
    tier_hop_us: float = 0.0
    """Latency each tier climbed above the ToR adds to a network step (two more switch traversals),
    microseconds: a step across racks pays it once, across pods twice."""
    placement: str = "packed"
    """packed (ranks fill racks and pods in order) | scattered (nodes dealt round-robin over the
    pods, every ring or tree edge crossing the top tier: a fragmented cluster's worst case)."""

    def __post_init__(self):
        _one_of("network.backend", self.backend, ("nccl", "gloo"))
        _one_of("network.algorithm", self.algorithm, ("auto", "ring", "tree", "nvls", "nvlstree"))
        if self.backend == "gloo":  # gloo's allreduce is its ring whatever this says: tree, NVLS are NCCL's
            why = "gloo runs its own ring (tree, nvls and nvlstree are NCCL's); use ring or auto"
            _require(self.algorithm in ("auto", "ring"), "network.algorithm", self.algorithm, why)
        _one_of("network.tuner", self.tuner, tuple(TABLES))
        _one_of("network.intra_link", self.intra_link, ("nvlink", "xgmi", "pci"))
        _one_of("network.cpu_vendor", self.cpu_vendor, ("intel", "amd"))
        _require(self.channels >= 1, "network.channels", self.channels, "must be >= 1")
        _require(self.nvls_channels >= 1, "network.nvls_channels", self.nvls_channels, "must be >= 1")
        _require(self.gpus_per_process >= 1, "network.gpus_per_process", self.gpus_per_process, "must be >= 1")
        if self.nvls_gb_s > 0 and self.gpus_per_node > 1:
            # A full node's loop of 128 KiB chunks moves its bytes at nvls_gb_s with its overhead in
            # (sim/nccl_time.py nvls_one_node): the overhead must leave the bytes some time.
            loop_us = nvls_loop_128k_us(self.nvls_gb_s, self.nvls_channels, self.gpus_per_node)
            _require(
                self.nvls_loop_us < loop_us,
                "network.nvls_loop_us",
                self.nvls_loop_us,
                f"must be below one loop of 128 KiB chunks at nvls_gb_s ({loop_us:.1f} us)",
            )
        latencies = ("latency_ll_us", "latency_ll128_us", "latency_simple_us", "nvls_latency_us", "msccl_latency_us")
        latencies += ("nvls_fixed_us", "nvls_loop_us", "ll_us_per_process_gpu")
        for key in ("nvls_gb_s", "msccl_gb_s", "net_hop_us", *latencies):
            _require(getattr(self, key) >= 0, f"network.{key}", getattr(self, key), "must be >= 0")
        for key in ("gpus_per_node", "nics_per_node"):
            _require(getattr(self, key) >= 1, f"network.{key}", getattr(self, key), "must be >= 1")
        for key in ("intra_gb_s", "nic_gbit_s"):
            _require(getattr(self, key) > 0, f"network.{key}", getattr(self, key), "must be > 0")
        for key in ("intra_efficiency", "nic_efficiency"):
            _require(
                0 < getattr(self, key) <= 1,
                f"network.{key}",
                getattr(self, key),
                "must be in (0, 1]",
            )
        _require(
            self.gloo_hop_latency_us >= 0,
            "network.gloo_hop_latency_us",
            self.gloo_hop_latency_us,
            "must be >= 0",
        )
        _require(self.jitter_sigma >= 0, "network.jitter_sigma", self.jitter_sigma, "must be >= 0")
        if self.jitter_samples is not None:
            n = len(self.jitter_samples)
            _require(n >= MIN_SAMPLES, "network.jitter_samples", f"{n} values", f"needs at least {MIN_SAMPLES} samples")
            bad = [x for x in self.jitter_samples if not x > 0]
            _require(not bad, "network.jitter_samples", bad[:1], "every multiplier must be > 0")
            _require(
                self.jitter_sigma == 0, "network.jitter_sigma", self.jitter_sigma, "set it or jitter_samples, not both"
            )
        if self.jitter_samples_bytes is not None:
            sizes = self.jitter_samples_bytes
            _require(
                self.jitter_samples is not None and len(sizes) == len(self.jitter_samples),
                "network.jitter_samples_bytes",
                f"a list of {len(sizes)}",
                f"needs one per network.jitter_samples ({len(self.jitter_samples or [])})",
            )
            bad = [x for x in sizes if not x > 0]
            _require(not bad, "network.jitter_samples_bytes", bad[:1], "every size must be > 0 bytes")
        self._check_tiers()  # after gpus_per_node, which the tier sizes are multiples of

    def _check_tiers(self):
        for key in ("gpus_per_rack", "gpus_per_pod", "cluster_pods"):
            _require(getattr(self, key) >= 0, f"network.{key}", getattr(self, key), "must be >= 0")
        g, rack, pod = self.gpus_per_node, self.gpus_per_rack, self.gpus_per_pod
        if rack:
            _require(rack % g == 0, "network.gpus_per_rack", rack, f"must be a multiple of network.gpus_per_node ({g})")
        if pod:
            unit, name = (rack, "gpus_per_rack") if rack else (g, "gpus_per_node")
            _require(pod % unit == 0, "network.gpus_per_pod", pod, f"must be a multiple of network.{name} ({unit})")
        _require(
            not self.cluster_pods or pod, "network.cluster_pods", self.cluster_pods, "needs network.gpus_per_pod > 0"
        )
        _require(
            1 <= self.pod_oversubscription < math.inf,
            "network.pod_oversubscription",
            self.pod_oversubscription,
            "must be >= 1 (1 = full bisection, 7 = 1:7)",
        )
        _require(self.tier_hop_us >= 0, "network.tier_hop_us", self.tier_hop_us, "must be >= 0")
        _one_of("network.placement", self.placement, PLACEMENTS)
        _require(
            self.placement == "packed" or pod, "network.placement", self.placement, "needs network.gpus_per_pod > 0"
        )


NORMAL_SIGMA_MAX = 0.25  # wider, a mean-1 normal multiplier is negative once in ~30,000 draws (z = -4)
# A mean-1 lognormal or gamma multiplier past sigma 3 puts its mean in draws rarer than one in
# a thousand and the rest near 0 (at sigma 10 every draw underflowed to 0: no compute at all);
# measured jitter is 0.01-0.3 (docs/references.md).
SIGMA_MAX = 3.0


@dataclass(kw_only=True)
class NoiseConfig:
    distribution: str = "none"
    """Per-rank per-micro-step compute multiplier, mean 1: none | lognormal | normal | gamma | empirical."""
    sigma: float = 0.0
    """Its standard deviation (lognormal: the sigma of the log); not used by empirical."""
    samples: list[float] | None = None
    """empirical: measured multipliers, resampled (rescaled to mean 1); `ddplab calibrate` writes them."""
    samples_by_rank: list[list[float]] | None = None
    """empirical: per rank, its multipliers step by step, every rank the same steps (a trace's:
    ProfilerStep#k is one step on every rank). With one row per rank each micro-step draws one
    measured step for all ranks together (sim/noise.py), keeping how the ranks' slowdowns went
    together; at another rank count every rank draws from ``samples`` on its own."""
    speed_spread_sd: float = 0.0
    """Persistent per-rank speed factor: lognormal with this sigma, mean 1, drawn once."""

    def __post_init__(self):
        _one_of("noise.distribution", self.distribution, NOISE_DISTRIBUTIONS)
        _require(0 <= self.sigma <= SIGMA_MAX, "noise.sigma", self.sigma, f"must be 0 to {SIGMA_MAX:g}")
        # A normal multiplier goes negative at about 1/sigma standard deviations.
        if self.distribution == "normal":
            _require(self.sigma <= NORMAL_SIGMA_MAX, "noise.sigma", self.sigma, "normal noise needs sigma <= 0.25")
        _require(
            0 <= self.speed_spread_sd <= SIGMA_MAX,
            "noise.speed_spread_sd",
            self.speed_spread_sd,
            f"must be 0 to {SIGMA_MAX:g}",
        )
        if self.distribution == "empirical":
            n = len(self.samples or [])
            why = f"empirical noise needs at least {MIN_SAMPLES} samples"
            _require(n >= MIN_SAMPLES, "noise.samples", f"{n} values", why)
            bad = [x for x in self.samples if not x > 0]
            _require(not bad, "noise.samples", bad[:1], "every multiplier must be > 0")
        if self.samples_by_rank is not None:
            rows = self.samples_by_rank
            _require(self.distribution == "empirical", "noise.samples_by_rank", "given", "needs distribution empirical")
            lengths = sorted({len(r) for r in rows})
            _require(len(lengths) == 1, "noise.samples_by_rank", lengths, "every rank needs the same steps")
            _require(lengths[0] >= MIN_SAMPLES, "noise.samples_by_rank", lengths[0], f"needs {MIN_SAMPLES} steps")
            bad = [x for r in rows for x in r if not x > 0]
            _require(not bad, "noise.samples_by_rank", bad[:1], "every multiplier must be > 0")


@dataclass(kw_only=True)
class EpisodesConfig:
    """Time-varying slowdowns (docs/references.md "Stragglers and failures"): fail-slow episodes
    start as a Poisson process over the whole job, last a long-tailed time, and hit one
    rank (compute) or every collective (the network); plus a slow diurnal swing."""

    comm_per_h: float = 0.0
    """Network fail-slow episodes starting per hour (whole job)."""
    comm_mean_s: float = 1440.0
    """Their mean duration, seconds (Falcon: tens of seconds to ~10 h, mean ~24 min)."""
    comm_bandwidth_factor: float = 0.5
    """Collective bandwidth during one, x this (Falcon: x 0.25-0.5): collective time / factor."""
    compute_per_h: float = 0.0
    """Compute fail-slow (throttling) episodes starting per hour, each on one random rank."""
    compute_mean_s: float = 600.0
    """Their mean duration, seconds."""
    compute_slowdown: float = 1.4
    """The throttled rank's compute time x this during an episode."""
    diurnal_amplitude: float = 0.0
    """Compute time x (1 + A sin(2 pi t / period)) on every rank (Llama 3: ~1-2 % swing from heat)."""
    diurnal_period_h: float = 24.0
    """Period of the diurnal swing, hours."""

    def __post_init__(self):
        for key in ("comm_per_h", "compute_per_h", "diurnal_amplitude"):
            _require(getattr(self, key) >= 0, f"episodes.{key}", getattr(self, key), "must be >= 0")
        for key in ("comm_mean_s", "compute_mean_s", "diurnal_period_h"):
            _require(getattr(self, key) > 0, f"episodes.{key}", getattr(self, key), "must be > 0")
        _require(
            0 < self.comm_bandwidth_factor <= 1,
            "episodes.comm_bandwidth_factor",
            self.comm_bandwidth_factor,
            "must be in (0, 1]",
        )
        _require(self.compute_slowdown >= 1, "episodes.compute_slowdown", self.compute_slowdown, "must be >= 1")
        _require(self.diurnal_amplitude < 1, "episodes.diurnal_amplitude", self.diurnal_amplitude, "must be < 1")

    @property
    def active(self) -> bool:
        return self.comm_per_h > 0 or self.compute_per_h > 0 or self.diurnal_amplitude > 0


@dataclass(kw_only=True)
class PausesConfig:
    """Stop-the-world pauses on a rank (Python GC, OS noise): ByteDance (OSDI'25) measured
    unsynchronised GC costing 12.6 % at 128 ranks; synchronising it (gc.freeze and a
    collect on every rank at the same steps) makes the whole job pause together instead."""

    every_steps: float = 0.0
    """Mean steps between pauses on a rank; 0 = none (gc/os-noise: ~500, docs/references.md
    "Straggler presets worth shipping")."""
    min_s: float = 0.1
    """Shortest pause, seconds (uniform between min_s and max_s)."""
    max_s: float = 0.5
    """Longest pause, seconds."""
    synchronized: bool = False
    """true: every rank pauses at the same steps (every every_steps steps); false: each rank
    independently, with probability 1 / every_steps per step."""

    def __post_init__(self):
        _require(
            self.every_steps == 0 or self.every_steps >= 1, "pauses.every_steps", self.every_steps, "must be 0 or >= 1"
        )
        _require(0 <= self.min_s <= self.max_s, "pauses.min_s", self.min_s, "must be in [0, pauses.max_s]")


def _rank_values(text: str, key: str, valid, expected: str) -> dict[int, float]:
    """``"RANK:VALUE,..."`` -> {rank: value}, each value held to ``valid``; ``""`` -> {}."""
    out: dict[int, float] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        rank_s, sep, value_s = item.partition(":")
        try:
            rank, value = int(rank_s), float(value_s)
        except ValueError:
            rank, value = -1, math.nan
        _require(sep == ":" and rank >= 0 and valid(value), key, item, expected)
        # One value a rank: which of two a user meant is not ours to guess (the last used to win).
        _require(rank not in out, key, item, f"rank {rank} is given twice; give each rank once")
        out[rank] = value
    return out


def parse_stragglers(text: str, key: str = "stragglers") -> dict[int, float]:
    """``"17:1.4,100:2.0"`` -> {17: 1.4, 100: 2.0}; ``""`` -> {}."""
    # nan fails the comparison; inf would make every step inf.
    return _rank_values(text, key, lambda f: 0 < f < math.inf, "expected RANK:SLOWDOWN like 17:1.4")


def parse_host_delays(text: str, key: str = "host_delays_s") -> dict[int, float]:
    """``"2:0.02,5:0.004"`` -> {2: 0.02, 5: 0.004} (seconds); ``""`` -> {}."""
    return _rank_values(text, key, lambda s: 0 <= s < math.inf, "expected RANK:SECONDS like 2:0.02")


@dataclass(kw_only=True)
class Scenario:
    name: str = "custom"
    """Preset name."""
    description: str = ""
    """One line for `ddplab scenarios` and the summary's first line."""
    ranks: int = 8
    """GPUs: data-parallel ranks, x training.tp x training.cp x training.pp when those are set."""
    steps: int = 100
    """Optimizer steps to simulate."""
    seed: int = 0
    """Seed of the one numpy Generator every random draw comes from."""
    stragglers: str = ""
    """Persistent slow ranks, "RANK:SLOWDOWN,...": compute time x SLOWDOWN."""
    loader_stragglers: str = ""
    """Ranks with a slow dataloader, "RANK:SLOWDOWN,...": that rank's compute.dataloader_batch_s x SLOWDOWN."""
    host_delays_s: str = ""
    """Ranks that start each step late, "RANK:SECONDS,...": host work, data or a launch gap before
    the rank's first forward that is neither compute nor the modelled loader (a trace calibration
    sets it from the ranks' time before the gradient sync; docs/traces.md)."""
    rebalance: bool = False
    """Size each rank's samples per step to its persistent speed, in whole samples, the global
    batch unchanged (sim/rebalance.py): the slowest rank's time is then the least an integer
    split allows, which at 8 samples a GPU is within one sample (12.5 %) of even."""
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    episodes: EpisodesConfig = field(default_factory=EpisodesConfig)
    pauses: PausesConfig = field(default_factory=PausesConfig)

    def __post_init__(self):
        _require(self.ranks >= 1, "ranks", self.ranks, "must be >= 1")
        _require(self.steps >= 1, "steps", self.steps, "must be >= 1")
        context = self.model.shape.block_size
        # Said with its fix: a preset's seq_len was chosen for its own model, and a calibration of
        # a small probe model is applied by naming that model (issue 25, D8).
        why = f"exceeds the model's context {context} (set training.seq_len={context} or less)"
        _require(self.seq_len <= context, "training.seq_len", self.seq_len, why)
        g = self.network.gpus_per_node
        _require(
            self.ranks <= g or self.ranks % g == 0,
            "ranks",
            self.ranks,
            f"must be <= or a multiple of network.gpus_per_node ({g})",
        )
        self._check_model_parallel()
        if self.training.recompute == "op":
            t = self.training
            why = op_refusal(self.model.shape, tp=t.tp, cp=t.cp, fused_attention=t.fused_attention)
            _require(why is None, "training.activation_checkpointing", "op", why or "")
        # Until 2026-12-06 every preset without an FP8 peak took the H100's 1,978.9 TFLOP/s: an
        # A100 (no FP8 tensor cores) "ran" FP8 at 6 x its bf16 peak, an MI300X at 0.76 x its own.
        _require(
            self.training.precision != "fp8" or self.compute.peak_fp8_tflop_s > 0,
            "training.precision",
            self.training.precision,
            "needs FP8 matmuls and this device has none (compute.peak_fp8_tflop_s = 0); use bf16-amp",
        )
        # sim/steps3d.py sizes no rank's work: a 3D job with rebalance set ran as if it were not.
        _require(
            not (self.rebalance and self.parallel3d),
            "rebalance",
            self.rebalance,
            "is not modelled for a tensor-, context- or pipeline-parallel or zero1 job (sim/steps3d.py)",
        )
        _require(
            not (self.host_delays_s.strip() and self.parallel3d),
            "host_delays_s",
            self.host_delays_s,
            "is not modelled for a tensor-, context- or pipeline-parallel or zero1 job (sim/steps3d.py)",
        )
        if self.training.mode == "hsdp" and self.parallel3d:
            s, dpcp = self.dp_shard_size, self.dp * self.training.cp
            why = f"must divide the data-parallel group's dp x cp ranks ({dpcp})"
            _require(dpcp % s == 0, "training.hsdp_shard_size", s, why)
        elif self.training.mode == "hsdp":  # the default (a node, or every rank) always passes
            s = self.shard_size
            _require(self.ranks % s == 0, "training.hsdp_shard_size", s, f"must divide ranks ({self.ranks})")
            _require(
                g % s == 0 or s % g == 0,
                "training.hsdp_shard_size",
                s,
                f"must divide or be a multiple of network.gpus_per_node ({g})",
            )
        cluster_gpus = self.network.cluster_pods * self.network.gpus_per_pod
        _require(
            not cluster_gpus or self.ranks <= cluster_gpus,
            "ranks",
            self.ranks,
            f"exceeds the cluster's network.cluster_pods x network.gpus_per_pod ({cluster_gpus})",
        )
        # Said with its fix: fewer ranks than a preset's named straggler (homelab-1gbe at ranks=1).
        for key, named in (("loader_stragglers", parse_stragglers(self.loader_stragglers, "loader_stragglers")),
                           ("stragglers", self.straggler_map),
                           ("host_delays_s", parse_host_delays(self.host_delays_s))):  # fmt: skip
            for rank, value in named.items():
                why = f"rank out of range for {self.ranks} ranks ({key}= drops them)"
                _require(rank < self.ranks, key, f"{rank}:{value:g}", why)

    def _check_model_parallel(self):
        t, g, shape = self.training, self.network.gpus_per_node, self.model.shape
        _require(t.tp <= g and g % t.tp == 0, "training.tp", t.tp, f"must divide network.gpus_per_node ({g})")
        _require(shape.n_head % t.tp == 0, "training.tp", t.tp, f"must divide model.n_head ({shape.n_head})")
        if shape.n_kv_head is not None and t.tp <= shape.n_kv_head:
            why = f"must divide model.n_kv_head ({shape.n_kv_head})"
            _require(shape.n_kv_head % t.tp == 0, "training.tp", t.tp, why)
        # The two end chunks may hold no block: the first only the embedding, the last only the
        # output layer and loss, as Llama 3 405B ran (126 layers in 16 x 8 chunks; docs/references.md).
        chunks = t.pp * t.pp_virtual_stages
        _require(
            shape.n_layer + 2 >= chunks,
            "training.pp",
            t.pp,
            f"x pp_virtual_stages exceeds model.n_layer + 2 ({shape.n_layer + 2})",
        )
        mp = t.tp * t.cp * t.pp
        _require(self.ranks % mp == 0, "ranks", self.ranks, f"must be a multiple of tp x cp x pp ({mp})")
        if t.cp > 1 and t.cp_comm == "a2a":  # Ulysses: cp equal chunks, the heads split over cp
            why = f"must split training.seq_len ({self.seq_len}) into cp equal chunks"
            _require(self.seq_len % t.cp == 0, "training.cp", t.cp, why)
            refusal = ulysses_refusal(shape, t.tp, t.cp)
            _require(refusal is None, "training.cp", t.cp, refusal or "")
        elif t.cp > 1:  # 2 x cp equal chunks of every sequence (the CP docstring)
            why = f"must split training.seq_len ({self.seq_len}) into 2 x cp equal chunks"
            _require(self.seq_len % (2 * t.cp) == 0, "training.cp", t.cp, why)
        if t.pp_layers is not None:
            n = t.pp * (t.pp_virtual_stages if t.pp_schedule == "interleaved" else 1)
            layers = t.pp_layers
            ok = isinstance(layers, list) and all(isinstance(x, int) and x >= 0 for x in layers)
            _require(ok and len(layers) == n, "training.pp_layers", layers, f"must be {n} counts >= 0 (pp x chunks)")
            _require(sum(layers) == shape.n_layer, "training.pp_layers", layers, f"must sum to {shape.n_layer}")

    @property
    def parallel3d(self) -> bool:
        """Simulated by sim/parallel3d.py (tensor, context or pipeline parallel, or the distributed
        optimizer, which only that model has) rather than sim/engine.py's DDP/FSDP step."""
        t = self.training
        return t.tp * t.cp * t.pp > 1 or t.mode == "zero1"

    @property
    def dp(self) -> int:
        """Data-parallel ranks: ranks / (tp x cp x pp)."""
        t = self.training
        return self.ranks // (t.tp * t.cp * t.pp)

    @property
    def straggler_map(self) -> dict[int, float]:
        return parse_stragglers(self.stragglers)

    @property
    def dp_shard_size(self) -> int:
        """With tp, cp or pp: ranks of the data-parallel group (dp x cp) each parameter is sharded
        over: fsdp and zero1 all of them, hsdp a shard group (by default the group's ranks in one
        node, which are tp apart: sim/parallel3d.py), ddp 1."""
        t = self.training
        group = self.dp * t.cp
        if t.mode in ("fsdp", "zero1"):
            return group
        if t.mode == "hsdp":
            return t.hsdp_shard_size or min(group, max(1, self.network.gpus_per_node // t.tp))
        return 1

    @property
    def shard_size(self) -> int:
        """Ranks each parameter is sharded over: ddp 1, fsdp every rank, hsdp the shard group."""
        t = self.training
        if t.mode == "fsdp":
            return self.ranks
        if t.mode == "hsdp":
            return t.hsdp_shard_size or min(self.network.gpus_per_node, self.ranks)
        return 1

    @property
    def seq_len(self) -> int:
        """Tokens per sequence: training.seq_len, or the model's context when that is 0."""
        return self.training.seq_len or self.model.shape.block_size

    @property
    def global_batch_samples(self) -> int:
        """The global batch in sequences: data-parallel ranks x accumulation x micro-batch."""
        t = self.training
        return self.dp * t.grad_accum * t.micro_batch_size

    @property
    def global_batch_tokens(self) -> int:
        """The global batch in tokens."""
        return self.global_batch_samples * self.seq_len


# compute keys that tune the roofline (sim/roofline.py), which a given step time or MFU replaces.
ROOFLINE_KEYS = frozenset(
    {"stack", "matmul_efficiency", "attention_efficiency", "memory_efficiency", "eager_memory_efficiency",
     "kernel_launch_us"}
)  # fmt: skip


# network keys of NCCL's and RCCL's model alone (sim/nccl.py, sim/msccl.py): gloo times its ring
# from the link rates and gloo_hop_latency_us (sim/collectives.py).
NCCL_ONLY_KEYS = frozenset(
    {"tuner", "cpu_vendor", "nvls_gb_s", "latency_ll_us", "latency_simple_us", "nvls_latency_us",
     "gpus_per_process", "ll_us_per_process_gpu", "nvls_channels", "nvls_fixed_us", "nvls_loop_us",
     "msccl_gb_s", "msccl_latency_us"}
)  # fmt: skip


def inert_key(sc: Scenario, key: str) -> str | None:
    """Why ``key`` changes nothing in ``sc``, or None where it applies: a roofline key under a
    fixed compute time, noise.sigma with no distribution drawing it, measured noise samples
    outside the empirical distribution, a link key with the network off, an NCCL key under
    gloo; never a key at its default, which asks for nothing (noise.sigma = 0 beside no noise).
    Only a key the user set is refused for it (sim/scenario_file.py check_inert): a file
    carries such values unused."""
    section, _, name = key.partition(".")
    part = getattr(sc, section, None)
    declared = {f.name: f for f in fields(part)}.get(name) if is_dataclass(part) else None
    if declared is None or getattr(part, name) == declared.default:
        return None  # not a section's key, or at its default (noise.sigma = 0 beside no noise): nothing asked
    c, net, z = sc.compute, sc.network, sc.noise
    if section == "compute" and name in ROOFLINE_KEYS and (c.mfu is not None or c.step_compute_s is not None):
        fixed = "compute.mfu" if c.mfu is not None else "compute.step_compute_s"
        return f"{fixed} fixes the compute time, so the roofline this tunes is not used ({fixed}=none unsets it)"
    if key == "noise.sigma" and z.distribution in ("none", "empirical"):
        return f"noise.distribution = {z.distribution} draws no sigma (set noise.distribution=lognormal too)"
    if name in ("samples", "samples_by_rank") and section == "noise" and z.distribution != "empirical":
        return f"noise.distribution = {z.distribution}: only empirical resamples measured multipliers"
    if section == "network" and name not in ("enabled", "gpus_per_node") and not net.enabled:
        return "network.enabled = false: communication is free, so no link key applies"
    if section == "network" and name in NCCL_ONLY_KEYS and net.backend == "gloo":
        return "network.backend = gloo times its own ring; this NCCL/RCCL key is not used"
    return None
