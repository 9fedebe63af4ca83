"""ddplab held to the public record: collectives and training steps measured on hardware this
project never touched, beside what the presets predict (``ddplab validate --public``,
docs/validation-public.md, tests/test_validation_public.py).

Bounds are tiers, written down before any row was added (issue 23) and never widened after a
miss: a miss stays a miss and is counted as one.

- 30 %: collective times below 1 KiB (latency);
- 20 %: collective times from 1 KiB to below 1 MiB, bus bandwidth from 1 MiB across nodes
  where the NICs do not bind (below 64 MiB), and training step times;
- 10 %: bus bandwidth from 1 MiB on one node, and from 64 MiB across nodes.

Below 1 MiB a row compares time (us), from 1 MiB bus bandwidth (GB/s), as nccl-tests prints.
Every row names its source (``SOURCES``: hardware, ranks, op, algorithm, which column) and
either is held out or names the constant fitted on it. The headline counts held-out rows only.
One constant set per platform, the presets' own; a row may force an algorithm as its run did,
or describe the measured job (model, batch, precision, NVLS disabled), nothing else.
"""

import statistics
from typing import NamedTuple

from calibrate import public_data as data
from sim.collectives import algbw_busbw_gb_s, collective_cost
from sim.optimizer import adamw_step_s
from sim.patches import Patch, flag_patches
from sim.precision import precision_dtypes
from sim.scenario_file import load_scenario, resolve
from sim.transformer import flops_per_token, model_shape, param_count
from sim.units import fmt_bytes
from sim.workload import fabric_for

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
TIERS = {"latency": 0.30, "small": 0.20, "multi-node": 0.20, "step": 0.20, "one-node": 0.10, "nic-bound": 0.10}

# id: (citation, conditions as the source states them). The out-of-place column is used throughout.
SOURCES = {
    "together-h100": (
        "togethercomputer/together-nccl-tests, benchmarks/H100/results/20260305_220043 and _223621",
        "1 node x 8 H100 80GB HBM3 (NVSwitch), NCCL 2.26.2, one process driving 8 GPUs (-g 8), float sum;"
        " *_ring.out: NCCL_ALGO=RING, NVLS off; all_reduce_nvls.out: NVLS enabled, NCCL_ALGO unset (NCCL chose)",
    ),
    "dgxc-h100": (
        "NVIDIA/dgxc-benchmarking nccl/README.md, sample AllReduce output (commits 46e42015, 8e77d607)",
        "1 DGX H100 host x 8 H100 80GB HBM3, 8 processes (nGpus 1 each), float sum, 8 B-16 GiB, algorithm not"
        " forced (recipe: NCCL_DEBUG=WARN, NCCL_NET=IB), NCCL version not printed (nemo:25.09.00 container)",
    ),
    "rocm-blog-mi300x": (
        'ROCm blog "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X", 2 March 2025',
        "1 node x 8 MI300X (xGMI mesh), RCCL 2.22.3, ROCm 6.3.0, mpirun -np 8 -g 1, no graphs, float sum,"
        " algorithm and protocol not forced",
    ),
    "aac8-mi300x": (
        "hisohara/ai-scripts training/01_rccl-smoketest/README.md (commit 9acb273b), AAC8 run",
        "1 node x 8 MI300X, mpirun -np 8 -g 1, float sum, algorithm not forced",
    ),
    "aac10-mi300x": (
        "hisohara/ai-scripts training/01_rccl-smoketest/README.md (commit 9acb273b), AAC10 run",
        "2 nodes x 8 MI300X = 16 ranks, RCCL 2.22.3, 8 RoCE NICs per node (speed not printed; the preset"
        " assumes 400G), float sum, algorithm not forced",
    ),
    "aac11-mi325x": (
        "hisohara/ai-scripts training/01_rccl-smoketest/README.md (commit 9acb273b), AAC11 run",
        "1, 2, 4, 8 nodes x 8 MI325X, 8 x Broadcom Thor2 400G NICs per node, NCCL_ALGO=Ring, float sum;"
        " only 4, 8, 16 GiB published",
    ),
    "nccl-1221": (
        "NVIDIA/nccl issue #1221 (2024-03-13)",
        "8 x H100 per node, 8 x 400Gb RoCE, NCCL 2.19.3, all_reduce_perf -b 4G -e 8G -g 1; the text: 'if I run"
        " all_reduce on single nodes or 2 nodes. when I set NCCL_NVLS_ENABLE=0 /1 . the bus BW will upgraded from"
        " 330GB to 430GB. but run it on nodes which is more than 2 ... same busbw 320GB'",
    ),
    "nccl-tests-283": (
        "NVIDIA/nccl-tests issue #283 (2025-01-18)",
        "248 nodes x 8 H200 = 1984 ranks, 8 HCAs per node (speed not stated), default NCCL_ALGO, -b 512M -e 512M;"
        " 'typically measuring around 350G, but occasionally dropping below 300G'",
    ),
    "nccl-2169": (
        "NVIDIA/nccl issue #2169 (2026-05-11), the second run in its thread",
        "one node, 4 x H100 80GB HBM3 (-np 4, -g 1), NCCL 2.30.4 (nccl-headers=23004), nccl-tests 2.17.8"
        " alltoall_perf -b 500M -e 524M, float; out-of-place 524288000 B: 1174.14 us, algbw 446.53, busbw"
        " 334.90 GB/s (NCCL_ALGO=Ring and NCCL_PROTO=Simple were set; an all-to-all is point-to-point sends,"
        " which neither chooses)",
    ),
    "llm.c": (
        "karpathy/llm.c scripts/run_gpt2_{124M,350M,774M,1558M}.sh header comments",
        "GPT-2 at seq 1024, ZeRO-1 (-z 1), bf16, llm.c's own CUDA kernels; '8X A100 80GB SXM ... ~300ms/iter'"
        " (124M), '~820ms/iter' (350M), '~1.7s/iter' (774M); '8X H100 80GB SXM ... 2.80s/iter' (1558M)",
    ),
    "nanogpt": (
        "karpathy/nanoGPT README and config/train_gpt2.py",
        "GPT-2 124M, 8 x A100 40GB, DDP, torch.compile, bf16 autocast, 12 x 1024 tokens x 5 accumulation per GPU"
        " (491,520 per step); 'about 4 days' for 600,000 steps",
    ),
    "llm-foundry": (
        "mosaicml/llm-foundry scripts/train/benchmarking/README.md (commit 4952183, 2024-04-22)",
        "MPT 125M-70B on the MosaicML platform, Composer FSDP FULL_SHARD, flash attention, no torch.compile,"
        " MPT's default loss (flash-attn's fused cross-entropy: llmfoundry/models/mpt/modeling_mpt.py at that"
        " commit; the mpt-*.yaml set no loss_fn), 12 steps per configuration, seq 2048; sections"
        " 'H100 80GB BF16' (interconnect not stated: the"
        " preset's 8 x 400G IB assumed) and 'A100 80GB|40GB with 1600 Gbps node-node interconnect (RoCE)';"
        " step time = 'GlobalBatchSize (T)' / 'Throughput (T/s)'",
    ),
    "torchtitan": (
        "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Tables 1, 3; torchtitan 9dec370) and"
        " docs/performance.md at 4d88a8a ('Llama 3 performance numbers')",
        "Llama 3.1 8B, FSDP2 alone, on 8 and 128 'H100 ... 96GB HBM2e with 2.4 TB/sec ... 500W power limit',"
        " 400 Gb/s RDMA per GPU, local batch 2, selective AC, eager and torch.compile, TPS/GPU read at step 90;"
        " Llama 3 8B (selective op AC) and 70B (full AC) on 64 A100 80GB, local batch 1; seq 8192 from the"
        " train_configs at those commits; step time = local batch x 8192 / TPS per GPU. Its Table 2 (added"
        " 2026-12-06): FSDP + CP + torch.compile + Float8, Llama 3.1 8B on 8 GPUs, local batch 1, full AC,"
        " sequence 32768-262144 as printed, CP by torch's context_parallel with torchtitan's default K/V"
        " rotation ('allgather': all K/V shards all-gathered after the first sub-SDPA); step time = FSDP degree"
        " x sequence / (8 x TPS per GPU). Its Table 4 (70B on 256 GPUs, FSDP 32 x TP 8, Float8, local batch 16,"
        " full AC: 2D, and 2D + AsyncTP) and the June 2025 page benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md"
        " (torch 38410cf9; the same H100s): 70B on 256 (FSDP 32 x TP 8, full AC, local batch 16) and 8B on 64"
        " (FSDP 8 x TP 8, per-op SAC, local batch 12), compiled, vanilla TP and Async TP (torch's"
        " micro-pipelined TP, as training.tp_comm_overlap), bf16 and float8 tensorwise; step time = local batch"
        " x 8192 / TP / TPS per GPU",
    ),
    "trainy-h200": (
        "pytorch/torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md (Trainy, June 2025; torch"
        " 2.8.0a0+5228986c39, torchao 0afa4c1, torchtitan e7c0cae)",
        "Llama 3.1 8B on 4 and 8 hosts of '8 NVIDIA H200 GPUs connected via NVLink', '400Gb/s (Mellanox CX-7)"
        " per GPU'; torchtitan/train.py with llama3_8b.toml (seq 8192, selective op AC), local batch 2,"
        " --training.compile, --model.converters=float8, --float8.enable_fsdp_float8_all_gather,"
        " precompute_float8_dynamic_scale_for_fsdp, force_recompute_fp8_weight_in_bwd; TPS/GPU 'sampled at the"
        " 100th iteration'; step time = 2 x 8192 / TPS per GPU",
    ),
    "megatron-table1": (
        "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM'"
        " (SC21, arXiv 2104.04473), Table 1; micro-batch, virtual stages and DDP from NVIDIA/Megatron-LM"
        " examples/sc21/run_table_1.sh",
        "GPT, seq 2048, vocabulary 51,200, on Selene: DGX A100 80GB nodes, NVLink3 through NVSwitch, 8 x 200 Gb/s"
        " HDR InfiniBand per node (the a100-8 preset's fabric); fp16 mixed precision, full activation"
        " recomputation, unfused attention (2021), dropout 0.1 (Megatron's argument defaults: the sc21"
        " CONFIG.sh sets none), Megatron's fused kernels; achieved teraFLOP/s per GPU = 96 B s l h^2 (1 + s/6h +"
        " V/16lh) / (step time x GPUs), the paper's count",
    ),
    "llama3-table4": (
        "Grattafiori et al. 2024, 'The Llama 3 Herd of Models' (arXiv 2407.21783), Table 4 (shape: Table 3);"
        " the same figures on Meta's SC'24 slide (P. Balaji, 'Herding Llamas')",
        "Llama 3 405B pre-training at seq 8192 on 8,192 and 16,384 H100 SXM 80GB (700 W), and at seq 131,072 with"
        " CP 16 on 16,384, 8 x 400 Gb/s RoCE per server, 3,072-GPU pods at 1:7 above (the h100-16k preset); TP 8,"
        " PP 16, FSDP over DP, BF16 MFU as printed (the paper cites PaLM for MFU: 6N + 12 L d s a token). Sec."
        " 3.3.2: CP over 2 x CP chunks per sequence, K and V all-gathered (exposed), order [TP, CP, PP, DP];"
        " interleaved"
        " schedule, first/last stage one layer fewer (the end chunks hold only the embedding / output and loss:"
        " one layer per chunk, V = 8), 'without activation checkpointing' at 8K, FSDP not resharding weights"
        " after forward, gradients reduce-scattered in FP32",
    ),
    "aac11-mi325x-train": (
        "hisohara/ai-scripts training/03_primus/run-llama2-{70B-2N,7B-8N}.log (commit 4fb66ab) and"
        " training/04_megatron-pyxis/megatron-pyxis-12384.out (commit 97db03f), AAC11 runs",
        "2 and 8 nodes x 8 MI325X (256 GB HBM3E), 8 x Broadcom Thor2 400G RoCE per node, ROCm Megatron-LM in"
        " rocm/primus and rocm/megatron-lm v25.9_gfx942; Llama 2 70B on 16 GPUs (torch FSDP2, MBS 10, GBS 640,"
        " seq 4096, full recompute of 80 layers), Llama 2 7B on 64 (distributed optimizer, MBS 4, GBS 2048,"
        " seq 4096, no recompute), Llama 3.1 70B on 64 (FSDP2, MBS 4, GBS 256, seq 8192, full recompute); fp8"
        " hybrid (Transformer Engine), TP 1, PP 1, flash attention; step = the mean logged 'elapsed time per"
        " iteration' of iterations 3 to the last",
    ),
    "nemo-2407": (
        "NVIDIA/NeMo docs/source/performance/performance_summary.md at 8e3d65dc ('24.07 perf numbers'),"
        " pre-training table; shapes: NeMo-Megatron-Launcher conf/training/gpt3, Touvron et al. 2023; bucket caps"
        " and userbuffers' TP overlap from NeMo-Framework-Launcher at tag 24.07"
        " (launcher_scripts/conf/training/gpt3/{5b,20b,175b}.yaml, llama/llama2_{7b,13b,70b}.yaml)",
        "DGX-H100 (8 x H100 SXM 80GB, NVLink4, 8 x 400 Gb/s per node), Container NeMo24.07, 'FP8 precision';"
        " GBS, MBS, sequence length, TP, PP, VP as printed, CP 1 rows of GPT3 and LLAMA2 only; step time ="
        " GBS x sequence length / (tokens/s/GPU x GPUs)",
    ),
}


def _text(value) -> str:
    """A --set value as typed: true/false, a number as short as it reads back exactly, a string bare."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and float(f"{value:g}") == value:
        return f"{value:g}"
    return str(value)


def sets(**keys) -> tuple[Patch, ...]:
    """``sets(training__tp=8)``: --set patches, a double underscore for the section's dot."""
    return tuple(Patch(k.replace("__", "."), v, "--set") for k, v in keys.items())


class Job(NamedTuple):
    """The ddplab command that predicts a row, as values (``command`` prints it)."""

    kind: str  # "collective" or "simulate"
    preset: str
    ranks: int
    sets: tuple[Patch, ...] = ()
    steps: int = 0  # simulate's
    op: str = ""  # collective's
    size: int = 0  # collective's, bytes
    ignore_memory: bool = False  # simulate's: a job that ran where ddplab's memory model says it would not

    @property
    def command(self) -> str:
        if self.kind == "collective":
            head = f"ddplab collective {self.preset} --ranks {self.ranks} --op {self.op} --sizes {self.size}"
        else:
            head = f"ddplab simulate {self.preset} --ranks {self.ranks} --steps {self.steps}"
            head += " --ignore-memory" * self.ignore_memory
        return head + "".join(f" --set {p.key}={_text(p.value)}" for p in self.sets)


class Row(NamedTuple):
    what: str
    source: str  # a key of SOURCES
    unit: str  # "GB/s" (busbw), "us" or "s"
    measured: float
    job: Job  # what predicts it
    tier: str  # a key of TIERS
    fitted: str = ""  # "" = held out; else the constant fitted on this row (and on what)

    @property
    def command(self) -> str:
        """The ddplab command that predicts it."""
        return self.job.command

    @property
    def bound(self) -> float:
        return TIERS[self.tier]

    @property
    def held_out(self) -> bool:
        return not self.fitted


def _collective(preset: str, ranks: int, size: int, op: str, patches: tuple[Patch, ...]) -> Job:
    return Job("collective", preset, ranks, patches, op=op, size=size)


def _tier(size: int, nodes: int) -> str:
    if size < KIB:
        return "latency"
    if size < MIB:
        return "small"
    if nodes == 1:
        return "one-node"
    return "nic-bound" if size >= 64 * MIB else "multi-node"


def _curve(label, source, preset, ranks, op, curve, patches=(), fitted=lambda size: ""):
    nodes = max(1, ranks // 8)
    rows = []
    for size, time_us, busbw in curve:
        unit, measured = ("us", time_us) if size < MIB else ("GB/s", busbw)
        rows.append(
            Row(f"{label}, {fmt_bytes(size)}", source, unit, measured, _collective(preset, ranks, size, op, patches),
                _tier(size, nodes), fitted(size))
        )  # fmt: skip
    return rows


def _h100_ring_fit(size: int) -> str:
    # 512 KiB and 1 MiB are in no fit's range (LL's is 8 B-256 KiB, LL128's 2-4 MiB): held out.
    # Until 2026-12-07 (twenty-second session) they were labelled in-sample with the LL rows.
    if size <= 256 * KIB:
        return "network.ll_us_per_process_gpu (h100-1024: this -g 8 run's 8 B-256 KiB)"
    if size <= MIB:
        return ""
    if size <= 4 * MIB:
        return "network.latency_ll128_us (h100-1024: this run's 2-4 MiB)"
    return f"network.latency_simple_us (h100-1024: this run's 8 MiB-8 GiB); {H100_RING_RATE}"


# A constant set from a source's statement of a quantity makes every row that measures that
# quantity in-sample (docs/validation-public.md, "The rules"): the algorithm the statement names
# (NVIDIA's "ring busbw", any op: nccl-tests' busbw is the per-link figure for each) on one node
# of the same GPU, at the sizes where the prediction is latency plus bytes at that constant's
# bandwidth (a ring from 8 MiB on H100 and 16 MiB on MI300X, NVLS from 64 MiB: the sizes the
# statements' own runs were counted from).
# Until 2026-12-07 (twenty-second session) only the statements' own runs' rows were counted so.
H100_RING_RATE = "network.intra_efficiency (h100-1024: nccl-tests #212's 370 GB/s, the same quantity)"
H100_NVLS_RATE = "network.nvls_gb_s (h100-1024: nccl-tests #290's 476 GB/s, the same quantity)"
MI300X_RING_RATE = "network.intra_efficiency (mi300x-1024: the ROCm blog's 48 of 64 GB/s a link, the same quantity)"


def _h100_ring_rate(size: int) -> str:
    """together-h100's allgather and reduce-scatter rings: from 8 MiB, as its allreduce's."""
    return H100_RING_RATE if size >= 8 * MIB else ""


def _dgxc_fit(size: int) -> str:
    if size <= 256 * KIB:
        return "network.latency_ll_us (h100-1024: this run's 8 B-256 KiB)"
    return H100_NVLS_RATE if size >= 64 * MIB else ""


def _aac8_fit(size: int) -> str:
    return MI300X_RING_RATE if size >= 16 * MIB else ""


def _mi300x_blog_fit(size: int) -> str:
    if KIB <= size <= 128 * KIB:
        return "network.latency_ll_us (mi300x-1024: this run's 1-128 KiB)"
    if size >= 16 * MIB:
        return f"network.latency_simple_us (mi300x-1024: this run's 16 MiB-16 GiB); {MI300X_RING_RATE}"
    if 512 * KIB <= size <= 8 * MIB:
        return "network.msccl_gb_s, msccl_latency_us (mi300x-1024: this run's 512 KiB-8 MiB)"
    return ""


def table_rows() -> list[Row]:
    ring = sets(network__algorithm="ring")
    g8 = sets(network__gpus_per_process=8)  # together's runs: one process drives the 8 GPUs (-g 8)
    rows = _curve("8 x H100, allreduce, ring", "together-h100", "h100-1024", 8, "allreduce",
                  data.T1_RING_ALLREDUCE, ring + g8, _h100_ring_fit)  # fmt: skip
    rows += _curve("8 x H100, allgather, ring", "together-h100", "h100-1024", 8, "allgather",
                   data.T1_RING_ALLGATHER, ring + g8, _h100_ring_rate)  # fmt: skip
    rows += _curve("8 x H100, reduce_scatter, ring", "together-h100", "h100-1024", 8, "reduce_scatter",
                   data.T1_RING_REDUCE_SCATTER, ring + g8, _h100_ring_rate)  # fmt: skip
    nvls_fit = "network.nvls_fixed_us, nvls_loop_us (h100-1024: this run's 2 MiB-8 GiB)"
    nvls_fit_large = nvls_fit + "; nvls_latency_us (this run's 64 MiB-8 GiB); nvls_gb_s (nccl-tests #290's 476 GB/s)"
    rows += _curve("8 x H100, allreduce, NVLS on, NCCL's pick", "together-h100", "h100-1024", 8, "allreduce",
                   data.T1_NVLS_ALLREDUCE, g8,
                   fitted=lambda s: nvls_fit_large if s >= 64 * MIB else nvls_fit if s >= 2 * MIB else "")  # fmt: skip
    # Entered 2026-12-06 (tenth session) by the rule above, every size printed, once the NVLS loop was
    # fitted on together-h100's NVLS run: held out. Not in (docs/validation-public.md, Sources): AWS's p5
    # table, whose run set NCCL_BUFFSIZE and the AWS OFI tuner plugin; Azure's NDv5 H100 and H200 curves,
    # in-place busbw only at rounded sizes on virtual machines, by the rule that kept Azure's MI300X out.
    rows += _curve("8 x H100 (DGXC), allreduce, NCCL's pick", "dgxc-h100", "h100-1024", 8, "allreduce",
                   data.DGXC_H100, fitted=_dgxc_fit)  # fmt: skip
    rows += _curve("8 x MI300X, allreduce (blog)", "rocm-blog-mi300x", "mi300x-1024", 8, "allreduce",
                   data.ROCM_BLOG_MI300X, fitted=_mi300x_blog_fit)  # fmt: skip
    rows += _curve("8 x MI300X, allreduce (AAC8)", "aac8-mi300x", "mi300x-1024", 8, "allreduce", data.AAC8_MI300X,
                   fitted=_aac8_fit)  # fmt: skip
    rows += _curve("2 x 8 MI300X, allreduce (AAC10)", "aac10-mi300x", "mi300x-1024", 16, "allreduce",
                   data.AAC10_MI300X_2NODE)  # fmt: skip
    for nodes, curve in data.AAC11_MI325X_RING.items():
        rows += _curve(f"{nodes} x 8 MI325X, allreduce, ring", "aac11-mi325x", "mi300x-1024", 8 * nodes,
                       "allreduce", curve, ring)  # fmt: skip
    # NVIDIA/nccl#1221: "about" figures at 4-8 GB, read at 8 GiB (the largest size of the run).
    for nodes, nvls, busbw in ((1, False, 330.0), (1, True, 430.0), (2, False, 330.0), (2, True, 430.0),
                               (4, False, 320.0), (4, True, 320.0)):  # fmt: skip
        off = () if nvls else sets(network__nvls_gb_s=0)
        same = (H100_NVLS_RATE if nvls else H100_RING_RATE) if nodes == 1 else ""  # one node: the statements' quantity
        rows.append(
            Row(f"{nodes} x 8 H100 RoCE, 8 GiB, NVLS {'on' if nvls else 'off'}", "nccl-1221", "GB/s", busbw,
                _collective("h100-1024", 8 * nodes, 8 * GIB, "allreduce", off),
                "one-node" if nodes == 1 else "nic-bound", same)
        )  # fmt: skip
    rows.append(
        Row("4 x H100, alltoall, 500 MiB", "nccl-2169", "GB/s", 334.90,
            _collective("h100-1024", 4, 524288000, "alltoall", ()), "one-node")
    )  # fmt: skip
    rows.append(
        Row("248 x 8 H200, 512 MiB", "nccl-tests-283", "GB/s", 350.0,
            _collective("h100-1024", 1984, 512 * MIB, "allreduce", ()), "nic-bound")
    )  # fmt: skip
    for preset, model, mb, accum, step_s in LLMC_ROWS:
        gpu = preset.split("-")[0].upper()
        rows.append(
            Row(f"llm.c {model} on 8 x {gpu}, step", "llm.c", "s", step_s,
                Job("simulate", preset, 8, llmc_sets(preset, model, mb, accum), STEPS), "step")
        )  # fmt: skip
    rows.append(
        Row("nanoGPT gpt2-124m on 8 x A100, step", "nanogpt", "s", 4 * 86400 / 600_000,
            Job("simulate", "a100-8", 8, NANOGPT_SETS, STEPS), "step")
    )  # fmt: skip
    rows += [_foundry_row(*r) for r in data.LLM_FOUNDRY]
    rows += [_foundry_row(*r) for r in data.LLM_FOUNDRY_FP8]
    rows += [_torchtitan_row(*r) for r in data.TORCHTITAN]
    rows += [_torchtitan_tp_row(*r, fp8=True) for r in data.TORCHTITAN_FLOAT8]
    rows += [_torchtitan_cp_row(*r) for r in data.TORCHTITAN_CP]
    for model, gpus, tp, batch, ac, bf16_tps, fp8_tps in data.TORCHTITAN_VANILLA_TP:
        rows.append(_torchtitan_tp_row("async-TP page", model, gpus, tp, batch, ac, bf16_tps, fp8=False))
        rows.append(_torchtitan_tp_row("async-TP page", model, gpus, tp, batch, ac, fp8_tps, fp8=True))
    for table, model, gpus, tp, batch, ac, fp8, tps in data.TORCHTITAN_ASYNC_TP:
        rows.append(_torchtitan_tp_row(table, model, gpus, tp, batch, ac, tps, fp8=fp8, async_tp=True))
    rows += [_trainy_h200_row(*r) for r in data.TORCHTITAN_H200]
    rows += [_megatron_row(*r) for r in data.MEGATRON_TABLE1]
    rows += [_llama3_row(*r) for r in data.LLAMA3_TABLE4]
    rows += [_nemo_row(*r) for r in data.NEMO_2407_H100_FP8]
    rows += [_mi325x_train_row(*r) for r in data.AAC11_MI325X_TRAIN]
    return rows


def _llama3_row(gpus, tp, cp, pp, dp, seq, batch_per_dp, tokens, tflop_s, mfu) -> Row:
    """One Llama 3 405B row (the rule, docs/validation-public.md): every Table 4 row (the CP = 16
    one since ddplab models context parallelism); it describes the job as the paper prints it:
    the shape, the sequence, TP, CP, PP, DP, one
    sequence per micro-batch and the batch per DP as micro-batches, bf16 under FSDP over the DP
    group, on h100-16k; and as its Sec. 3.3.2 describes it: the interleaved schedule, "without
    activation checkpointing", one Transformer layer fewer on the first and last stages so that
    "the first model chunk on the first stage has only the embedding, and the last model chunk
    on the last stage has only output projection and loss calculation": a chunk is one layer,
    so V = (126 + 2) / 16 = 8 chunks per stage (ddplab's split puts the two empty chunks at the
    ends). FSDP as the paper runs it: weights gathered once and not resharded after forward,
    gradients reduce-scattered in FP32, asynchronously (overlapped). The preset's eager stack.
    Compared: BF16 MFU, in the step tier. ddplab's memory model puts this job above 80 GB
    (the paper fits it with deallocations ddplab does not model); the row is run as described."""
    chunks = (model_shape("llama3-405b").n_layer + 2) // pp
    job = (
        *sets(model__preset="llama3-405b", model__block_size=seq, training__seq_len=seq, training__micro_batch_size=1,
              training__grad_accum=batch_per_dp, training__tp=tp, training__cp=cp, training__pp=pp,
              training__sequence_parallel=True,
              training__mode="fsdp", training__precision="bf16-amp", training__pp_schedule="interleaved",
              training__pp_virtual_stages=chunks, training__activation_checkpointing="none", training__overlap=True),
    )  # fmt: skip
    cps = f", cp {cp}, seq {seq:,}" if cp > 1 else ""
    what = f"Llama 3 405B on {gpus} x H100 (tp {tp}{cps}, pp {pp}, dp {dp}, v {chunks}), no recompute, BF16 MFU"
    return Row(what, "llama3-table4", "MFU", mfu, Job("simulate", "h100-16k", gpus, job, 1, ignore_memory=True), "step")


def _nemo_row(model, gpus, gbs, mbs, seq, tp, pp, vp, tokens_s_gpu, tflop_s) -> Row:
    """One row of NeMo 24.07's H100 FP8 pre-training table (the rule, docs/validation-public.md,
    fixed before predicting): the model and job as printed, FP8, on h100-1024; sequence
    parallelism where TP > 1, fused attention and kernels, and the least recomputation whose
    memory fits 80 GB. Compared as the step time the printed tokens/s per GPU imply. Since
    2026-12-02, after the rows missed as DDP: the data parallelism the launcher's yamls
    configure (NeMo-Framework-Launcher conf/training/gpt3/*.yaml, llama/llama2_*.yaml: ``optim:
    name: distributed_fused_adam``, ``overlap_grad_sync`` and ``overlap_param_sync`` on),
    Megatron's distributed optimizer (training.mode zero1). Since 2026-12-06 (the TP-overlap
    rule), what the launcher's yamls at its tag 24.07 set beyond the table's columns: the bucket
    cap and userbuffers' TP overlap (data.NEMO_2407_LAUNCHER); without userbuffers, Transformer
    Engine's default backward overlap (training.tp_comm_overlap "wgrad") where TP > 1."""
    from sim.parallel3d import layout, memory_by_stage, step_costs

    dp = gpus // (tp * pp)
    bucket_mb, ub_overlap = data.NEMO_2407_LAUNCHER[model]
    # Userbuffers where the yaml turns them on; without, Transformer Engine's default backward
    # overlap wherever there is TP (the rule of 2026-12-06, docs/validation-public.md).
    tp_overlap = "full" if ub_overlap else ("wgrad" if tp > 1 else "none")
    shape = sets(**{f"model__{k}": v for k, v in data.NEMO_SHAPES[model].items()})
    job = (
        *sets(model__name=model.lower()), *shape,
        *sets(model__block_size=seq, training__seq_len=seq, training__micro_batch_size=mbs,
              training__grad_accum=gbs // (mbs * dp), training__tp=tp, training__pp=pp,
              training__sequence_parallel=tp > 1, training__mode="zero1", training__precision="fp8",
              training__fused_attention=True, training__overlap=True, compute__stack="compiled",
              training__bucket_cap_mb=bucket_mb),
    )  # fmt: skip
    if tp_overlap != "none":
        job += sets(training__tp_comm_overlap=tp_overlap)
    if vp > 1:
        job += sets(training__pp_schedule="interleaved", training__pp_virtual_stages=vp)
    for recompute in ("none", "selective", "full"):
        tried = (*job, *sets(training__activation_checkpointing=recompute))
        sc = resolve("h100-1024", tried, flag_patches(ranks=gpus)).scenario
        lay = layout(sc)
        if max(m.total_gib for m in memory_by_stage(sc, lay, step_costs(sc, lay))) <= sc.compute.device_memory_gib:
            break
    what = f"NeMo 24.07 {model} on {gpus} x H100 (tp {tp}, pp {pp}, vp {vp}, dp {dp}), FP8, {recompute} recompute, step"
    return _simulate_row(what, "nemo-2407", gbs * seq / (tokens_s_gpu * gpus), "h100-1024", gpus, tried)


# MI325X beside the mi300x-1024 preset's MI300X: the same CDNA 3 compute and peaks (AMD's
# datasheets: 1,307.4 bf16, 2,614.9 FP8 dense TFLOP/s), 6 TB/s of HBM3E, and the 255.98 GB of
# device memory the AAC11 logs print ("hip mem usage/free/total").
MI325X_SETS = sets(compute__hbm_tb_s=6.0, compute__device_memory_gib=255.98)


def _mi325x_train_row(_log, model, gpus, mbs, gbs, seq, mode, recompute, step_s) -> Row:
    """One AAC11 MI325X training run (the rule, docs/validation-public.md, fixed before
    predicting): the model as its log's arguments give it (Llama 2 from NEMO_SHAPES, Llama 3.1
    70B as the llama3-70b preset), on mi300x-1024 with the MI325X's HBM and memory; FP8
    (Transformer Engine's recipe), Megatron's fused kernels (stack compiled) and flash
    attention; torch FSDP2 as training.mode fsdp, the distributed optimizer as zero1; full
    recompute as full activation checkpointing; the log's micro-batch and the accumulation
    global batch / (micro-batch x GPUs). ddplab's default bucket and prefetch sizes. The log's
    path (the data's first column) names the row's evidence; the row's source cites it."""
    if model in data.NEMO_SHAPES:  # Llama 2: the shapes the NeMo rows use
        shape = sets(model__name=model.lower(), model__block_size=seq)
        shape += sets(**{f"model__{k}": v for k, v in data.NEMO_SHAPES[model].items()})
    else:
        shape = sets(model__preset=model)
    accum = gbs // (mbs * gpus)
    job = (
        *shape,
        *sets(training__seq_len=seq, training__micro_batch_size=mbs, training__grad_accum=accum,
              training__mode=mode, training__precision="fp8", training__activation_checkpointing=recompute,
              training__fused_attention=True, training__overlap=True, compute__stack="compiled"),
        *MI325X_SETS,
    )  # fmt: skip
    name = {"LLAMA2-70B": "Llama 2 70B", "LLAMA2-7B": "Llama 2 7B", "llama3-70b": "Llama 3.1 70B"}[model]
    layout = {"fsdp": "FSDP2", "zero1": "distributed optimizer"}[mode]
    what = f"Megatron-LM {name} on {gpus} x MI325X (AAC11), {layout}, mb {mbs} x {accum}, seq {seq}"
    what += f", FP8, {'full' if recompute == 'full' else 'no'} recompute, step"
    return _simulate_row(what, "aac11-mi325x-train", step_s, "mi300x-1024", gpus, job)


def _megatron_row(name, heads, hidden, layers, tp, pp, gpus, batch, tflop_s, micro_batch, per_virtual, ddp) -> Row:
    """One row of Megatron-LM's Table 1 as the a100-8 preset sees it. Every row enters (the rule,
    fixed before predicting); the acceptance bar of issue 28 is the rows from 18B up. Describes
    the job only: its shape, TP/PP/DP, micro-batch and accumulation (batch / (micro-batch x DP)),
    interleaving where the script sets it, fp16 mixed precision, full recomputation, unfused
    attention (2021: no FlashAttention), dropout 0.1 (the script's CONFIG.sh sets none, so
    Megatron's argument defaults, --attention-dropout and --hidden-dropout 0.1, apply),
    Megatron's fused kernels (stack compiled), and its DDP: torch's overlaps buckets with
    backward, Megatron's "local" reduces after the pipeline."""
    dp = gpus // (tp * pp)
    v = layers // pp // per_virtual if per_virtual else 1
    job = sets(
        model__name=f"gpt-{name.lower()}", model__layout="gpt2", model__n_layer=layers, model__n_embd=hidden,
        model__n_head=heads, model__block_size=2048, model__vocab_size=51200, training__seq_len=2048,
        training__micro_batch_size=micro_batch, training__grad_accum=batch // (micro_batch * dp),
        training__tp=tp, training__pp=pp, training__precision="fp16-amp",
        training__activation_checkpointing="full", training__fused_attention=False, training__dropout=0.1,
        training__overlap=ddp == "torch", compute__stack="compiled",
    )  # fmt: skip
    if v > 1:
        job += sets(training__pp_schedule="interleaved", training__pp_virtual_stages=v)
    what = f"Megatron-LM GPT {name} on {gpus} x A100 80GB (tp {tp}, pp {pp}, dp {dp}), TFLOP/s per GPU"
    return Row(what, "megatron-table1", "TFLOP/s", float(tflop_s), Job("simulate", "a100-8", gpus, job, FSDP_STEPS),
               "step")  # fmt: skip


def _simulate_row(what: str, source: str, step_s: float, preset: str, ranks: int, patches) -> Row:
    return Row(what, source, "s", step_s, Job("simulate", preset, ranks, tuple(patches), FSDP_STEPS), "step")


# A100 40GB beside the a100-8 preset's 80GB part: the same SMs and peak, 1,555 GB/s of HBM2
# (NVIDIA A100 datasheet) and 40 GiB.
A100_40GB_SETS = sets(compute__hbm_tb_s=1.555, compute__device_memory_gib=40)


def _foundry_row(section, model, gpus, micro_batch, accum, global_tokens, tokens_s, precision, act_ckpt) -> Row:
    """One llm-foundry row as the preset sees it: the MPT shape in the GPT-2 layout (which gives
    exactly the parameter counts the README prints), FSDP, the row's batch, precision and
    checkpointing; Composer runs eager."""
    n_layer, n_embd, n_head = data.MPT_SHAPES[model]
    job = sets(
        model__name=f"mpt-{model}",
        model__n_layer=n_layer,
        model__n_embd=n_embd,
        model__n_head=n_head,
        model__block_size=2048,
        model__vocab_size=50368,
        training__seq_len=2048,
        training__mode="fsdp",
        training__micro_batch_size=micro_batch,
        training__grad_accum=accum,
        training__precision={"amp_bf16": "bf16-amp", "amp_fp8": "fp8", "bf16": "bf16"}[precision],
        training__activation_checkpointing=act_ckpt,
        training__fused_loss=True,
        compute__stack="eager",
    )
    preset = "h100-1024" if section == "h100" else "a100-8"
    if section == "a100-40gb":
        job += A100_40GB_SETS
    gpu = {"h100": "H100 80GB", "a100-80gb": "A100 80GB", "a100-40gb": "A100 40GB"}[section]
    what = f"llm-foundry mpt-{model} on {gpus} x {gpu}, mb {micro_batch} x {accum}"
    what += ", amp_fp8, step" if precision == "amp_fp8" else ", step"
    return _simulate_row(what, "llm-foundry", global_tokens / tokens_s, preset, gpus, job)


def _torchtitan_sets(
    model: str, local_batch: int, precision: str, act_ckpt: str, compiled: bool, tp: int = 1
) -> tuple[Patch, ...]:
    """What every torchtitan row sets: the model at seq 8192 under FSDP, its local batch as one
    micro-batch, the precision, checkpointing and the stack. Its selective AC is the per-op policy
    (llama3_8b.toml's selective_ac_option "op"): ``op`` (sim/roofline.py op_kept_share), which
    ddplab models without TP; a TP row's is modelled as full."""
    recompute = "none" if act_ckpt == "none" else "op" if "selective" in act_ckpt and tp == 1 else "full"
    return sets(
        model__preset=model,
        training__seq_len=8192,
        training__mode="fsdp",
        training__micro_batch_size=local_batch,
        training__precision=precision,
        training__activation_checkpointing=recompute,
        compute__stack="compiled" if compiled else "eager",
    )


# torchtitan's H100s as its pages name them: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth".
# The memory changes no prediction; it lets each row's printed command run as `validate` runs it
# (at the preset's 79.65 GiB the 32k-token row of Table 2 is refused as out of memory).
TORCHTITAN_H100_SETS = sets(compute__hbm_tb_s=2.4, compute__device_memory_gib=96)


def _torchtitan_row(table, model, gpus, local_batch, compiled, act_ckpt, tokens_s_gpu) -> Row:
    """One torchtitan row, its checkpointing as _torchtitan_sets describes it (selective: the
    per-op policy, op; until 2026-12-07 full, which reran every block and hid how fast the
    compute model is here: docs/validation-public.md). The H100 rows' HBM2e (96 GB at 2.4 TB/s)
    is set as stated; their 500 W power limit is not modelled."""
    job = _torchtitan_sets(model, local_batch, "bf16-amp", act_ckpt, compiled)
    preset = "a100-8" if table.startswith("a100") else "h100-1024"
    if table.startswith("h100"):
        job += TORCHTITAN_H100_SETS
    gpu = "A100 80GB" if table.startswith("a100") else "H100 96GB"
    stack = "compiled" if compiled else "eager"
    what = f"torchtitan {model} on {gpus} x {gpu}, FSDP, {act_ckpt} AC, {stack}, step"
    return _simulate_row(what, "torchtitan", local_batch * 8192 / tokens_s_gpu, preset, gpus, job)


def _torchtitan_tp_row(
    table, model, gpus, tp, local_batch, act_ckpt, tokens_s_gpu, fp8: bool, async_tp: bool = False
) -> Row:
    """One of torchtitan's compiled H100 rows with FP8 or TP: as _torchtitan_row, compiled, with
    FP8 matmuls where the row has them, and TP over each node's GPUs with sequence parallelism
    (torchtitan's TP plan) where it has TP; ``async_tp``: AsyncTP, as training.tp_comm_overlap.
    A TP group shares its local batch, so a GPU's tokens per step are local batch x 8192 / TP."""
    job = (*_torchtitan_sets(model, local_batch, "fp8" if fp8 else "bf16-amp", act_ckpt, True, tp),
           *TORCHTITAN_H100_SETS)  # fmt: skip
    layout = "FSDP"
    if tp > 1:
        job += sets(training__tp=tp, training__sequence_parallel=True)
        layout = f"FSDP {gpus // tp} x TP {tp}"
    if async_tp:
        job += sets(training__tp_comm_overlap="full")
        layout += " + AsyncTP"
    what = f"torchtitan {model} on {gpus} x H100 96GB ({table}), {layout}, {'Float8' if fp8 else 'bf16'}"
    what += f", {act_ckpt} AC, compiled, step"
    step_s = local_batch * 8192 / tp / tokens_s_gpu
    return _simulate_row(what, "torchtitan", step_s, "h100-1024", gpus, job)


# NVIDIA's H200 SXM datasheet: 141 GB at 4.8 TB/s; its tensor peaks are the H100 SXM's (the preset's).
H200_SETS = sets(compute__hbm_tb_s=4.8, compute__device_memory_gib=141)


def _trainy_h200_row(gpus: int, tokens_s_gpu: float) -> Row:
    """One row of Trainy's H200 page (docs/validation-public.md, its rule): Llama 3.1 8B, FSDP over
    every rank, compiled, Float8 with the FSDP Float8 all-gather, local batch 2, seq 8192,
    selective op AC as op (_torchtitan_sets); the H200's datasheet memory."""
    job = (*_torchtitan_sets("llama3-8b", 2, "fp8", "selective op", True), *sets(training__fp8_all_gather=True),
           *H200_SETS)  # fmt: skip
    what = f"torchtitan llama3-8b on {gpus} x H200 (Trainy), FSDP, Float8 + FP8 all-gather, selective op AC"
    return _simulate_row(what + ", compiled, step", "trainy-h200", 2 * 8192 / tokens_s_gpu, "h100-1024", gpus, job)


def _torchtitan_cp_row(fsdp: int, cp: int, seq_len: int, tokens_s_gpu: float) -> Row:
    """One row of torchtitan's Table 2 (docs/validation-public.md, its rule): Llama 3.1 8B on
    8 H100 96GB, FSDP over the dp x cp ranks, CP as torch's context_parallel with torchtitan's
    default K/V rotation ("allgather"), ddplab's all-gather CP; compiled, Float8, full AC, one
    sequence a data-parallel rank. Step time = FSDP degree x sequence / (8 x TPS/GPU)."""
    job = (*_torchtitan_sets("llama3-8b", 1, "fp8", "full", True), *TORCHTITAN_H100_SETS)
    job += sets(training__seq_len=seq_len, model__block_size=seq_len, training__cp=cp, training__cp_comm="all_gather")
    what = f"torchtitan llama3-8b on 8 x H100 96GB (Table 2), FSDP {fsdp} x CP {cp}, seq {seq_len}, Float8, full AC"
    what += ", compiled, step"
    return _simulate_row(what, "torchtitan", fsdp * seq_len / (8 * tokens_s_gpu), "h100-1024", 8, job)


STEPS = 50
# FSDP steps are slower to simulate, and these rows compare means: 20 steps of 2 % jitter leave
# the mean within ~0.5 % of the long-run mean.
FSDP_STEPS = 20
# (preset, model, micro-batch, accumulation, measured step s): llm.c at seq 1024, its scripts' flags.
LLMC_ROWS = (
    ("a100-8", "gpt2-124m", 64, 1, 0.300),
    ("a100-8", "gpt2-350m", 64, 1, 0.820),
    ("a100-8", "gpt2-large", 32, 2, 1.7),
    ("h100-1024", "gpt2-xl", 16, 8, 2.80),
)
# The README's 8 x A100 40GB, at its datasheet figures as the page's rule has it (the row left
# them out until 2026-12-06).
NANOGPT_SETS = (
    sets(
        model__preset="gpt2-124m",
        training__seq_len=1024,
        training__micro_batch_size=12,
        training__grad_accum=5,
        training__precision="bf16-amp",
        compute__stack="compiled",
    )
    + A100_40GB_SETS
)


def llmc_sets(preset: str, model: str, micro_batch: int, accum: int) -> tuple[Patch, ...]:
    """llm.c's set-up in the preset: a fused stack (its own CUDA kernels: compute.stack
    compiled), bf16 weights and gradients (its reduce-scatter is bf16), seq 1024, and its ZeRO-1
    optimizer, which updates 1/8 of the parameters on each of 8 GPUs. Its AdamW reads the bf16
    gradient, the fp32 master weight and both fp32 moments, writes them and the bf16 weight: 28 B
    per parameter, bf16-amp's count (sim/optimizer.py), at the preset's HBM."""
    sc = load_scenario(preset)
    opt = adamw_step_s(param_count(model_shape(model)), precision_dtypes("bf16-amp"), sc.compute.hbm_tb_s) / 8
    return sets(
        model__preset=model,
        training__seq_len=1024,
        training__micro_batch_size=micro_batch,
        training__grad_accum=accum,
        training__precision="bf16",
        compute__stack="compiled",
        compute__optimizer_s=float(f"{opt:.6g}"),  # as the row's command prints it
    )


class Result(NamedTuple):
    row: Row
    predicted: float
    error: float  # predicted / measured - 1
    ok: bool  # |error| within the row's tier


def predict(row: Row) -> float:
    job = row.job
    if job.kind == "collective":
        sc = resolve(job.preset, job.sets, flag_patches(ranks=job.ranks)).scenario
        c = collective_cost(job.op, job.size, fabric_for(sc))
        if row.unit == "us":
            return c.time_s * 1e6
        return algbw_busbw_gb_s(job.op, job.size, c.time_s, job.ranks)[1]
    from sim.engine import simulate

    sc = resolve(job.preset, job.sets, flag_patches(ranks=job.ranks, steps=job.steps)).scenario
    if sc.parallel3d:  # as `ddplab simulate` does: sim/parallel3d.py
        import numpy as np

        from sim.parallel3d import simulate_3d

        step_s = simulate_3d(sc, np.random.default_rng(sc.seed)).step_s
    else:
        step_s = simulate(sc, trace_steps=0).summary().step_time_s.mean
    if row.unit == "TFLOP/s":
        return _megatron_tflop_s(sc, step_s)
    if row.unit == "MFU":  # model FLOPs (6N + 12 L d T per token) over the step and the bf16 peak
        t = sc.training
        tokens = sc.dp * t.grad_accum * t.micro_batch_size * sc.seq_len
        flops = flops_per_token(sc.model.shape, sc.seq_len) * tokens
        return flops / step_s / sc.ranks / (sc.compute.peak_for(t.dtypes) * 1e12)
    return step_s


def _megatron_tflop_s(sc, step_s: float) -> float:
    """Achieved TFLOP/s per GPU as Narayanan et al. 2021 count it (sim/parallel3d.py)."""
    from sim.parallel3d import megatron_flops_per_step

    shape, t = sc.model.shape, sc.training
    batch = sc.dp * t.grad_accum * t.micro_batch_size
    flops = megatron_flops_per_step(shape.n_layer, shape.n_embd, shape.vocab_size, sc.seq_len, batch)
    return flops / step_s / sc.ranks / 1e12


def evaluate(row: Row) -> Result:
    p = predict(row)
    err = p / row.measured - 1.0
    return Result(row, p, err, abs(err) <= row.bound)


def public_table() -> list[Result]:
    return [evaluate(r) for r in table_rows()]


def headline(results: list[Result]) -> dict:
    """Held-out rows: how many within their tier, the median and worst |error|; in-sample apart."""

    def part(rs):
        errs = [abs(r.error) for r in rs]
        worst = max(rs, key=lambda r: abs(r.error)) if rs else None
        return {
            "rows": len(rs),
            "within": sum(r.ok for r in rs),
            "median_abs_error": statistics.median(errs) if errs else float("nan"),
            "worst": {"what": worst.row.what, "error": worst.error} if worst else None,
        }

    held = [r for r in results if r.row.held_out]
    by_source: dict[str, dict] = {}
    for r in held:
        b = by_source.setdefault(r.row.source, {"rows": 0, "within": 0})
        b["rows"] += 1
        b["within"] += r.ok
    return {
        "held_out": part(held),
        # One source may hold many rows (llm-foundry's 82 step times): its share shows here.
        "held_out_by_source": by_source,
        "in_sample": part([r for r in results if not r.row.held_out]),
        "sources": len({r.row.source for r in results}),
    }
