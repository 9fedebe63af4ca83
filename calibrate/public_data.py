"""Published measurements, transcribed. Collective curves: (size in bytes, out-of-place time in
us, out-of-place busbw in GB/s), every size the source prints. Training tables: the columns each
names, as printed. Conditions and citations: calibrate/public.py ``SOURCES`` and
docs/validation-public.md. Numbers as printed; nothing here is computed."""

# togethercomputer/together-nccl-tests, benchmarks/H100/results/20260305_220043: one node of
# 8 x H100 80GB HBM3, NCCL 2.26.2, one process driving 8 GPUs (-g 8), float, NCCL_ALGO=RING.
T1_RING_ALLREDUCE = (
    (8, 34.98, 0.0),
    (16, 35.08, 0.0),
    (32, 35.1, 0.0),
    (64, 34.86, 0.0),
    (128, 34.79, 0.01),
    (256, 35.62, 0.01),
    (512, 38.27, 0.02),
    (1024, 39.2, 0.05),
    (2048, 36.47, 0.1),
    (4096, 36.81, 0.19),
    (8192, 35.53, 0.4),
    (16384, 35.69, 0.8),
    (32768, 35.15, 1.63),
    (65536, 35.76, 3.21),
    (131072, 37.29, 6.15),
    (262144, 37.95, 12.09),
    (524288, 69.21, 13.26),
    (1048576, 46.52, 39.44),
    (2097152, 42.06, 87.26),
    (4194304, 53.09, 138.26),
    (8388608, 80.49, 182.39),
    (16777216, 126.62, 231.88),
    (33554432, 213.96, 274.45),
    (67108864, 368.67, 318.55),
    (134217728, 702.55, 334.33),
    (268435456, 1351.28, 347.64),
    (536870912, 2641.67, 355.65),
    (1073741824, 5218.59, 360.07),
    (2147483648, 10329.0, 363.84),
    (4294967296, 20495.8, 366.72),
    (8589934592, 40838.9, 368.09),
)
T1_RING_ALLGATHER = (
    (128, 35.05, 0.0),
    (256, 34.28, 0.01),
    (512, 34.88, 0.01),
    (1024, 34.78, 0.03),
    (2048, 35.34, 0.05),
    (4096, 34.61, 0.1),
    (8192, 35.09, 0.2),
    (16384, 40.81, 0.35),
    (32768, 35.33, 0.81),
    (65536, 35.69, 1.61),
    (131072, 36.8, 3.12),
    (262144, 36.74, 6.24),
    (524288, 40.14, 11.43),
    (1048576, 41.67, 22.02),
    (2097152, 41.48, 44.24),
    (4194304, 41.34, 88.77),
    (8388608, 47.01, 156.12),
    (16777216, 70.8, 207.36),
    (33554432, 125.45, 234.03),
    (67108864, 210.89, 278.45),
    (134217728, 393.52, 298.43),
    (268435456, 732.87, 320.49),
    (536870912, 1399.34, 335.7),
    (1073741824, 2726.97, 344.53),
    (2147483648, 5363.19, 350.36),
    (4294967296, 10579.3, 355.23),
    (8589934592, 21001.0, 357.9),
)
T1_RING_REDUCE_SCATTER = (
    (128, 41.94, 0.0),
    (256, 34.76, 0.01),
    (512, 34.74, 0.01),
    (1024, 35.32, 0.03),
    (2048, 34.46, 0.05),
    (4096, 34.51, 0.1),
    (8192, 39.99, 0.18),
    (16384, 36.14, 0.4),
    (32768, 35.59, 0.81),
    (65536, 34.68, 1.65),
    (131072, 36.79, 3.12),
    (262144, 36.6, 6.27),
    (524288, 39.02, 11.76),
    (1048576, 40.6, 22.6),
    (2097152, 41.66, 44.05),
    (4194304, 41.7, 88.02),
    (8388608, 50.44, 145.53),
    (16777216, 71.97, 203.96),
    (33554432, 118.78, 247.18),
    (67108864, 206.45, 284.43),
    (134217728, 381.43, 307.89),
    (268435456, 718.2, 327.04),
    (536870912, 1393.15, 337.19),
    (1073741824, 2711.56, 346.49),
    (2147483648, 5353.24, 351.01),
    (4294967296, 10450.3, 359.62),
    (8589934592, 20695.6, 363.18),
)

# The same repository, results/20260305_223621, all_reduce_nvls.out: NVLS enabled, NCCL_ALGO unset.
T1_NVLS_ALLREDUCE = (
    (1048576, 41.31, 44.42),
    (2097152, 43.61, 84.16),
    (4194304, 55.85, 131.42),
    (8388608, 84.67, 173.37),
    (16777216, 125.82, 233.35),
    (33554432, 200.19, 293.32),
    (67108864, 326.96, 359.19),
    (134217728, 588.2, 399.32),
    (268435456, 1112.84, 422.13),
    (536870912, 2151.49, 436.69),
    (1073741824, 4027.17, 466.59),
    (2147483648, 7951.33, 472.64),
    (4294967296, 15751.3, 477.18),
    (8589934592, 31357.4, 479.39),
)

# ROCm blog "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X" (2 March
# 2025): one node of 8 x MI300X, RCCL 2.22.3, ROCm 6.3.0, mpirun -np 8 (-g 1), no graphs.
ROCM_BLOG_MI300X = (
    (8, 16.61, 0.0),
    (16, 16.12, 0.0),
    (32, 16.56, 0.0),
    (64, 17.94, 0.01),
    (128, 22.94, 0.01),
    (256, 22.93, 0.02),
    (512, 22.91, 0.04),
    (1024, 13.11, 0.14),
    (2048, 13.09, 0.27),
    (4096, 13.27, 0.54),
    (8192, 13.3, 1.08),
    (16384, 13.54, 2.12),
    (32768, 13.31, 4.31),
    (65536, 13.77, 8.33),
    (131072, 14.14, 16.22),
    (262144, 16.87, 27.2),
    (524288, 24.41, 37.59),
    (1048576, 27.42, 66.93),
    (2097152, 34.81, 105.43),
    (4194304, 51.72, 141.91),
    (8388608, 83.68, 175.43),
    (16777216, 148.8, 197.26),
    (33554432, 244.1, 240.57),
    (67108864, 429.1, 273.66),
    (134217728, 797.4, 294.55),
    (268435456, 1537.1, 305.62),
    (536870912, 3026.2, 310.46),
    (1073741824, 5970.6, 314.72),
    (2147483648, 11891.0, 316.04),
    (4294967296, 23680.0, 317.4),
    (8589934592, 47278.0, 317.96),
    (17179869184, 94254.0, 318.98),
)

# hisohara/ai-scripts training/01_rccl-smoketest/README.md (AMD Accelerator Cloud). AAC8: one
# node of 8 x MI300X, mpirun -np 8 (-g 1); AAC10: 2 nodes x 8 MI300X, 16 ranks, RCCL 2.22.3,
# 8 RoCE NICs per node (speed not printed). Neither forces an algorithm.
AAC8_MI300X = (
    (8, 19.28, 0.0),
    (16, 16.32, 0.0),
    (32, 17.1, 0.0),
    (64, 18.59, 0.01),
    (128, 23.05, 0.01),
    (256, 23.36, 0.02),
    (512, 23.21, 0.04),
    (1024, 13.67, 0.13),
    (2048, 13.67, 0.26),
    (4096, 13.72, 0.52),
    (8192, 13.76, 1.04),
    (16384, 15.47, 1.85),
    (32768, 13.94, 4.11),
    (65536, 14.25, 8.05),
    (131072, 14.6, 15.71),
    (262144, 17.46, 26.28),
    (524288, 27.3, 33.6),
    (1048576, 28.39, 64.64),
    (2097152, 36.68, 100.05),
    (4194304, 52.96, 138.6),
    (8388608, 84.78, 173.16),
    (16777216, 149.9, 195.85),
    (33554432, 246.3, 238.45),
    (67108864, 432.5, 271.51),
    (134217728, 800.3, 293.5),
    (268435456, 1540.4, 304.96),
    (536870912, 3027.1, 310.37),
    (1073741824, 5990.7, 313.66),
    (2147483648, 11940.0, 314.75),
    (4294967296, 23841.0, 315.26),
    (8589934592, 47617.0, 315.69),
)
AAC10_MI300X_2NODE = (
    (8, 256.5, 0.0),
    (16, 218.7, 0.0),
    (32, 218.6, 0.0),
    (64, 218.8, 0.0),
    (128, 219.8, 0.0),
    (256, 219.9, 0.0),
    (512, 220.8, 0.0),
    (1024, 220.8, 0.01),
    (2048, 223.6, 0.02),
    (4096, 226.2, 0.03),
    (8192, 240.5, 0.06),
    (16384, 238.8, 0.13),
    (32768, 239.9, 0.26),
    (65536, 241.1, 0.51),
    (131072, 242.9, 1.01),
    (262144, 248.8, 1.98),
    (524288, 305.6, 3.22),
    (1048576, 414.8, 4.74),
    (2097152, 318.6, 12.34),
    (4194304, 337.9, 23.27),
    (8388608, 402.2, 39.1),
    (16777216, 497.3, 63.26),
    (33554432, 590.3, 106.58),
    (67108864, 821.9, 153.1),
    (134217728, 1448.8, 173.7),
    (268435456, 1713.4, 293.75),
    (536870912, 3096.3, 325.1),
    (1073741824, 5908.3, 340.75),
    (2147483648, 11574.0, 347.9),
    (4294967296, 22788.0, 353.4),
    (8589934592, 45224.0, 356.14),
    (17179869184, 90115.0, 357.46),
)

# The same README, AAC11: MI325X, 8 per node, 8 x Broadcom Thor2 400G NICs, NCCL_ALGO=Ring, only
# the 4, 8 and 16 GiB rows published: {nodes: ((size, time us, busbw), ...)}.
AAC11_MI325X_RING = {
    1: ((4294967296, 23719.0, 316.88), (8589934592, 47217.0, 318.37), (17179869184, 94222.0, 319.08)),
    2: ((4294967296, 23192.0, 347.23), (8589934592, 46123.0, 349.20), (17179869184, 91973.0, 350.24)),
    4: ((4294967296, 23904.0, 348.12), (8589934592, 47563.0, 349.92), (17179869184, 94942.0, 350.59)),
    8: ((4294967296, 24572.0, 344.13), (8589934592, 48321.0, 349.98), (17179869184, 96405.0, 350.84)),
}

# mosaicml/llm-foundry scripts/train/benchmarking/README.md (last changed in commit 4952183,
# 2024-04-22): MPT pre-training throughput on the MosaicML platform, Composer FSDP, flash
# attention, no torch.compile, 12 steps per configuration. The rule, fixed before any row was
# predicted: every row at seq 2048 with FULL_SHARD and bf16 or amp_bf16 precision (82 rows);
# SHARD_GRAD_OP (ZeRO-2) and amp_fp8 rows are left out because ddplab models neither. Columns
# as printed: (section: h100 | a100-80gb | a100-40gb, model, # GPUs, micro-batch, grad accum,
# global batch in tokens, throughput in tokens/s, precision, activation checkpointing).
LLM_FOUNDRY = (
    ("h100", "70b", 512, 8, 1, 8388608, 515636, "amp_bf16", True),
    ("h100", "70b", 256, 8, 1, 4194304, 265149, "amp_bf16", True),
    ("h100", "70b", 128, 8, 1, 2097152, 135490, "amp_bf16", True),
    ("h100", "30b", 512, 8, 1, 8388608, 1083366, "amp_bf16", True),
    ("h100", "30b", 256, 8, 1, 4194304, 550022, "amp_bf16", True),
    ("h100", "30b", 128, 8, 1, 2097152, 281491, "amp_bf16", True),
    ("h100", "13b", 512, 16, 1, 16777216, 2535811, "amp_bf16", True),
    ("h100", "13b", 256, 16, 1, 8388608, 1277214, "amp_bf16", True),
    ("h100", "13b", 128, 16, 1, 4194304, 650264, "amp_bf16", True),
    ("h100", "7b", 512, 6, 1, 6291456, 4951479, "amp_bf16", False),
    ("h100", "7b", 256, 6, 1, 3145728, 2590548, "amp_bf16", False),
    ("h100", "7b", 128, 6, 1, 1572864, 1340830, "amp_bf16", False),
    ("h100", "70b", 64, 8, 4, 4194304, 66523, "amp_bf16", True),
    ("h100", "70b", 32, 2, 16, 2097152, 28242, "amp_bf16", True),
    ("h100", "30b", 32, 14, 3, 2752512, 73860, "amp_bf16", True),
    ("h100", "30b", 16, 10, 3, 983040, 36209, "amp_bf16", True),
    ("h100", "30b", 8, 3, 21, 1032192, 16022, "amp_bf16", True),
    ("h100", "13b", 64, 2, 1, 262144, 307209, "amp_bf16", False),
    ("h100", "13b", 32, 2, 1, 131072, 153960, "amp_bf16", False),
    ("h100", "13b", 16, 2, 1, 65536, 76280, "amp_bf16", False),
    ("h100", "13b", 8, 2, 1, 32768, 38336, "amp_bf16", False),
    ("h100", "7b", 8, 6, 1, 98304, 85144, "amp_bf16", False),
    ("h100", "3b", 64, 6, 3, 2359296, 1441663, "amp_bf16", False),
    ("h100", "3b", 32, 6, 3, 1179648, 736701, "amp_bf16", False),
    ("h100", "3b", 16, 10, 3, 983040, 386285, "amp_bf16", False),
    ("h100", "1b", 64, 20, 1, 2621440, 2841754, "amp_bf16", False),
    ("h100", "1b", 32, 20, 1, 1310720, 1444183, "amp_bf16", False),
    ("h100", "1b", 16, 20, 1, 655360, 736596, "amp_bf16", False),
    ("h100", "1b", 8, 14, 1, 229376, 363645, "amp_bf16", False),
    ("h100", "760m", 32, 24, 1, 1572864, 2175091, "amp_bf16", False),
    ("h100", "760m", 16, 24, 1, 786432, 1096819, "amp_bf16", False),
    ("h100", "760m", 8, 24, 2, 786432, 505177, "amp_bf16", False),
    ("a100-80gb", "70b", 64, 8, 4, 4194304, 26274, "bf16", True),
    ("a100-80gb", "70b", 32, 2, 16, 2097152, 11962, "bf16", True),
    ("a100-80gb", "30b", 8, 3, 21, 1032192, 7330, "amp_bf16", True),
    ("a100-80gb", "13b", 8, 2, 3, 98304, 18097, "amp_bf16", False),
    ("a100-80gb", "7b", 8, 6, 2, 196608, 37130, "amp_bf16", False),
    ("a100-80gb", "3b", 8, 10, 2, 327680, 86491, "amp_bf16", False),
    ("a100-80gb", "1b", 8, 14, 4, 917504, 164109, "amp_bf16", False),
    ("a100-80gb", "760m", 8, 24, 2, 786432, 259472, "amp_bf16", False),
    ("a100-80gb", "350m", 8, 32, 2, 1048576, 470263, "amp_bf16", False),
    ("a100-80gb", "125m", 8, 40, 2, 1310720, 1142641, "amp_bf16", False),
    ("a100-80gb", "125m", 8, 32, 2, 1048576, 1133901, "amp_bf16", False),
    ("a100-40gb", "70b", 128, 4, 1, 1048576, 48194, "bf16", True),
    ("a100-40gb", "70b", 64, 2, 1, 262144, 17672, "bf16", True),
    ("a100-40gb", "30b", 128, 6, 1, 1572864, 110803, "bf16", True),
    ("a100-40gb", "30b", 32, 4, 1, 262144, 27431, "bf16", True),
    ("a100-40gb", "13b", 128, 16, 1, 4194304, 252444, "bf16", True),
    ("a100-40gb", "13b", 64, 16, 1, 2097152, 126479, "bf16", True),
    ("a100-40gb", "13b", 32, 14, 1, 917504, 63946, "bf16", True),
    ("a100-40gb", "13b", 16, 10, 1, 327680, 31900, "bf16", True),
    ("a100-40gb", "13b", 8, 4, 16, 1048576, 13347, "bf16", True),
    ("a100-40gb", "7b", 128, 18, 1, 4718592, 463749, "bf16", True),
    ("a100-40gb", "7b", 64, 18, 1, 2359296, 234614, "bf16", True),
    ("a100-40gb", "7b", 32, 18, 1, 1179648, 119202, "bf16", True),
    ("a100-40gb", "7b", 16, 16, 1, 524288, 58322, "bf16", True),
    ("a100-40gb", "7b", 8, 12, 4, 786432, 29436, "bf16", True),
    ("a100-40gb", "3b", 128, 6, 1, 1572864, 1220885, "bf16", False),
    ("a100-40gb", "3b", 64, 6, 1, 786432, 623167, "bf16", False),
    ("a100-40gb", "3b", 32, 6, 1, 393216, 317261, "bf16", False),
    ("a100-40gb", "3b", 16, 5, 1, 163840, 156013, "bf16", False),
    ("a100-40gb", "3b", 8, 5, 8, 655360, 80520, "bf16", False),
    ("a100-40gb", "1b", 128, 10, 1, 2621440, 2386897, "bf16", False),
    ("a100-40gb", "1b", 64, 10, 1, 1310720, 1216104, "bf16", False),
    ("a100-40gb", "1b", 32, 10, 1, 655360, 497782, "bf16", False),
    ("a100-40gb", "1b", 16, 8, 1, 262144, 305372, "bf16", False),
    ("a100-40gb", "1b", 8, 8, 8, 1048576, 154171, "bf16", False),
    ("a100-40gb", "760m", 128, 12, 1, 3145728, 3704382, "bf16", False),
    ("a100-40gb", "760m", 64, 12, 1, 1572864, 1878030, "bf16", False),
    ("a100-40gb", "760m", 32, 12, 1, 786432, 948745, "bf16", False),
    ("a100-40gb", "760m", 16, 12, 1, 393216, 473723, "bf16", False),
    ("a100-40gb", "760m", 8, 12, 4, 786432, 241389, "bf16", False),
    ("a100-40gb", "350m", 128, 18, 1, 4718592, 6647647, "bf16", False),
    ("a100-40gb", "350m", 64, 18, 1, 2359296, 3372118, "bf16", False),
    ("a100-40gb", "350m", 32, 18, 1, 1179648, 1721978, "bf16", False),
    ("a100-40gb", "350m", 16, 18, 1, 589824, 886622, "bf16", False),
    ("a100-40gb", "350m", 8, 16, 4, 1048576, 447963, "bf16", False),
    ("a100-40gb", "125m", 128, 26, 1, 6815744, 15863837, "bf16", False),
    ("a100-40gb", "125m", 64, 26, 1, 3407872, 8015010, "bf16", False),
    ("a100-40gb", "125m", 32, 26, 1, 1703936, 4067922, "bf16", False),
    ("a100-40gb", "125m", 16, 26, 1, 851968, 2088560, "bf16", False),
    ("a100-40gb", "125m", 8, 26, 3, 1277952, 1090678, "bf16", False),
)

# MPT shapes, scripts/train/yamls/pretrain/mpt-<model>.yaml at llm-foundry 8c8dd48: (n_layers,
# d_model, n_heads); every one has expansion_ratio 4, vocab_size 50368 and max_seq_len 2048.
MPT_SHAPES = {
    "125m": (12, 768, 12),
    "350m": (24, 1024, 16),
    "760m": (24, 1536, 12),
    "1b": (24, 2048, 16),
    "3b": (32, 2560, 20),
    "7b": (32, 4096, 32),
    "13b": (40, 5120, 40),
    "30b": (48, 7168, 56),
    "70b": (80, 8192, 64),
}

# The same README's "H100 80GB FP8" section: its one row at seq 2048 (FULL_SHARD, amp_fp8: Transformer
# Engine linears, submit_benchmarks.py setting fc_type "te"); the LLM_FOUNDRY columns.
LLM_FOUNDRY_FP8 = (("h100", "3b", 8, 10, 6, 983040, 244692, "amp_fp8", False),)

# pytorch/torchtitan: Llama 3 / 3.1 with FSDP2 alone, tokens/s per GPU as printed, local batch,
# seq 8192 (the train_configs' seq_len at the commits that ran them; the tables do not print it),
# activation checkpointing as printed: (table, model, GPUs, local batch, compiled, AC, TPS/GPU).
# benchmarks/llama3_h100_202412_torchtitan.md Tables 1 and 3 (torchtitan 9dec370); the Float8 rows
# are left out (ddplab models no FP8). docs/performance.md at 4d88a8a, "Llama 3 performance
# numbers" (64 x A100 80GB); its "selective layer" row is left out beside the "selective op" one,
# which the same page says its loss curves ran.
TORCHTITAN = (
    ("h100-2412", "llama3-8b", 8, 2, False, "selective", 5762),
    ("h100-2412", "llama3-8b", 8, 2, True, "selective", 6667),
    ("h100-2412", "llama3-8b", 128, 2, False, "selective", 5605),
    ("h100-2412", "llama3-8b", 128, 2, True, "selective", 6514),
    ("a100-2412", "llama3-8b", 64, 1, False, "selective op", 2973),
    ("a100-2412", "llama3-70b", 64, 1, False, "full", 331),
)
# The same H100 page's Float8 rows without AsyncTP or context parallelism (docs/validation-public.md
# has the rule): (table, model, GPUs, TP, local batch, AC, TPS/GPU); every one compiled.
TORCHTITAN_FLOAT8 = (
    ("Table 1", "llama3-8b", 8, 1, 2, "selective", 8532),
    ("Table 3", "llama3-8b", 128, 1, 2, "selective", 8380),
    ("Table 4", "llama3-70b", 256, 8, 16, "full", 829),
)
# The same H100 page's Table 2, "FSDP + CP + torch.compile + Float8. Llama 3.1 8B model. 8 GPUs.
# Local batch size 1. Full activation checkpointing.": (FSDP, CP, sequence length, TPS/GPU).
TORCHTITAN_CP = (
    (8, 1, 32768, 3890),
    (4, 2, 65536, 2540),
    (2, 4, 131072, 1071),
    (1, 8, 262144, 548),
)
# benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, the "Vanilla TP tokens/sec" column (per
# GPU): (model, GPUs, TP, local batch, AC, bf16 TPS/GPU, float8 tensorwise TPS/GPU); compiled.
TORCHTITAN_VANILLA_TP = (
    ("llama3-70b", 256, 8, 16, "full", 597.3, 809.8),
    ("llama3-8b", 64, 8, 12, "per-op selective", 4378.0, 5078.1),
)
# The AsyncTP rows (docs/validation-public.md, the TP-overlap rule of 2026-12-06): the Dec 2024
# page's Table 4 "2D + AsyncTP" (Float8) and the async-TP page's "Async TP tokens/sec" column,
# bfloat16 and float8 tensorwise, described as their vanilla rows plus training.tp_comm_overlap:
# (table, model, GPUs, TP, local batch, AC, fp8, TPS/GPU); every one compiled.
TORCHTITAN_ASYNC_TP = (
    ("Table 4", "llama3-70b", 256, 8, 16, "full", True, 876),
    ("async-TP page", "llama3-70b", 256, 8, 16, "full", False, 652.4),
    ("async-TP page", "llama3-70b", 256, 8, 16, "full", True, 942.4),
    ("async-TP page", "llama3-8b", 64, 8, 12, "per-op selective", False, 4809.4),
    ("async-TP page", "llama3-8b", 64, 8, 12, "per-op selective", True, 5570.1),
)
# benchmarks/llama3_8b_h200_2025-06_torchtitan.md (Trainy, June 2025; torchtitan e7c0cae): Llama 3.1
# 8B on NUM_NODES x 8 H200, FSDP, local batch 2, compiled, Float8 with the FSDP Float8 all-gather,
# TPS/GPU "sampled at the 100th iteration": (GPUs, TPS/GPU).
TORCHTITAN_H200 = (
    (32, 10938),
    (64, 10753),
)

# Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM" (SC21, arXiv 2104.04473), Table 1: weak scaling of GPT models on Selene (DGX A100
# 80GB nodes) at seq 2048, vocabulary 51,200, full activation recomputation. Columns as printed:
# (model, attention heads, hidden size, layers, tensor-parallel size, pipeline-parallel size, GPUs,
# batch size, achieved teraFLOP/s per GPU). Beside them, from the paper's own run script
# (NVIDIA/Megatron-LM examples/sc21/run_table_1.sh): micro-batch size, layers per virtual stage
# (0 = no interleaving) and the data-parallel implementation ("torch" DDP, or Megatron's "local").
# The printed columns equal, in every row, an independent transcription of the table
# (SotaroKaneda/MLCarbon data/megatron_table.csv, commit 69070b2).
MEGATRON_TABLE1 = (
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, 16, 0, "torch"),
    ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, 16, 0, "torch"),
    ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, 16, 0, "torch"),
    ("18B", 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 0, "torch"),
    ("39B", 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 0, "local"),
    ("76B", 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 5, "local"),
    ("145B", 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 5, "local"),
    ("310B", 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 3, "local"),
    ("530B", 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 1, "local"),
    ("1T", 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 0, "local"),
)

# Grattafiori et al. 2024 ("The Llama 3 Herd of Models", arXiv 2407.21783), Table 4: Llama 3
# 405B pre-training on H100s. Columns as printed: (GPUs, TP, CP, PP, DP, sequence length, batch
# size per DP, tokens per batch, TFLOP/s per GPU, BF16 MFU). Model shape from its Table 3: the
# llama3-405b preset (scenarios/models.toml).
LLAMA3_TABLE4 = (
    (8192, 8, 1, 16, 64, 8192, 32, "16M", 430, 0.43),
    (16384, 8, 1, 16, 128, 8192, 16, "16M", 400, 0.41),
    (16384, 8, 16, 16, 8, 131072, 16, "16M", 380, 0.38),  # context parallelism: in since 2026-12-03
)

# NVIDIA NeMo, docs/source/performance/performance_summary.md at 8e3d65dc ("24.07 perf
# numbers"): "pre-training performance ... at FP8 precision", "Container: NeMo24.07", "System:
# DGX-H100". The rows with CP = 1 whose model ddplab has a layout for (the rule in
# docs/validation-public.md). Columns as printed: (model, GPUs, GBS, MBS, sequence length, TP,
# PP, VP, tokens/s per GPU, model TFLOP/s per GPU).
NEMO_2407_H100_FP8 = (
    ("GPT3-5B", 64, 2048, 4, 2048, 1, 1, 1, 23406, 765),
    ("GPT3-20B", 64, 256, 2, 2048, 2, 1, 1, 5851, 750),
    ("GPT3-175B", 128, 256, 1, 2048, 4, 8, 6, 716, 771),
    ("GPT3-175B", 512, 2048, 2, 2048, 4, 8, 6, 825, 888),
    ("LLAMA2-7B", 8, 128, 1, 4096, 1, 1, 1, 16934, 780),
    ("LLAMA2-13B", 16, 128, 1, 4096, 1, 4, 10, 8715, 760),
    ("LLAMA2-70B", 64, 128, 1, 4096, 4, 4, 20, 1728, 768),
)
# What NeMo-Framework-Launcher's yamls at its tag 24.07 (the table's release) configure for each
# model, beyond the table's columns (the TP-overlap rule of 2026-12-06, docs/validation-public.md):
# (optim.bucket_cap_mb, ub_tp_comm_overlap), from launcher_scripts/conf/training/gpt3/5b.yaml,
# 20b.yaml, 175b.yaml and llama/llama2_7b.yaml, llama2_13b.yaml, llama2_70b.yaml.
NEMO_2407_LAUNCHER = {
    "GPT3-5B": (400, False),
    "GPT3-20B": (220, True),
    "GPT3-175B": (220, False),
    "LLAMA2-7B": (125, False),
    "LLAMA2-13B": (125, False),
    "LLAMA2-70B": (125, True),
}
# Shapes: GPT-3 5B and 20B from NVIDIA/NeMo-Megatron-Launcher launcher_scripts/conf/training/gpt3
# (5b.yaml: 24 layers, hidden 4096, 32 heads; 20b.yaml: 44, 6144, 48; ffn 4 x hidden; GPT-2 BPE
# padded to a multiple of 128: 50,304), 175B from Brown et al. 2020 Table 2.1 (96, 12288, 96);
# Llama 2 from Touvron et al. 2023 (7B: 32 layers, 4096, 32 heads, ffn 11,008; 13B: 40, 5120,
# 40, 13,824; 70B: 80, 8192, 64 heads, 8 key/value heads, 28,672; vocabulary 32,000).
NEMO_SHAPES = {
    "GPT3-5B": {"layout": "gpt2", "n_layer": 24, "n_embd": 4096, "n_head": 32, "vocab_size": 50304},
    "GPT3-20B": {"layout": "gpt2", "n_layer": 44, "n_embd": 6144, "n_head": 48, "vocab_size": 50304},
    "GPT3-175B": {"layout": "gpt2", "n_layer": 96, "n_embd": 12288, "n_head": 96, "vocab_size": 50304},
    "LLAMA2-7B": {"layout": "llama", "n_layer": 32, "n_embd": 4096, "n_head": 32, "n_kv_head": 32,
                  "ffn_hidden": 11008, "vocab_size": 32000, "tied_embeddings": False},
    "LLAMA2-13B": {"layout": "llama", "n_layer": 40, "n_embd": 5120, "n_head": 40, "n_kv_head": 40,
                   "ffn_hidden": 13824, "vocab_size": 32000, "tied_embeddings": False},
    "LLAMA2-70B": {"layout": "llama", "n_layer": 80, "n_embd": 8192, "n_head": 64, "n_kv_head": 8,
                   "ffn_hidden": 28672, "vocab_size": 32000, "tied_embeddings": False},
}  # fmt: skip

# hisohara/ai-scripts (commits 4fb66ab, 97db03f), AMD Accelerator Cloud's AAC11 cluster: 8 x MI325X
# a node, 8 x Broadcom Thor2 400G RoCE NICs a node, ROCm Megatron-LM in the rocm/primus and
# rocm/megatron-lm v25.9_gfx942 images (identical digests, training/04_megatron-pyxis/README.md).
# Every dense run of those directories enters (the rule in docs/validation-public.md, fixed
# before predicting); the Mixtral 8x7B run does not: ddplab has no mixture-of-experts model.
# Columns from each log's argument dump: (log, model, GPUs, micro-batch, global batch, sequence
# length, data parallelism as launched, recompute, step s). Step = the mean of the logged
# "elapsed time per iteration (ms)" over iterations 3 to the last (iteration 1, start-up, takes 5
# to 48 x a later one; iteration 2 is 1-2 % above the rest). All three: fp8 hybrid (Transformer
# Engine), bf16, TP 1, PP 1, CP 1, flash attention, overlap_grad_reduce.
AAC11_MI325X_TRAIN = (
    ("training/03_primus/run-llama2-70B-2N.log", "LLAMA2-70B", 16, 10, 640, 4096, "fsdp", "full", 92.6319),
    ("training/03_primus/run-llama2-7B-8N.log", "LLAMA2-7B", 64, 4, 2048, 4096, "zero1", "none", 6.4027),
    ("training/04_megatron-pyxis/megatron-pyxis-12384.out", "llama3-70b", 64, 4, 256, 8192, "fsdp", "full", 19.1117),
)  # fmt: skip

# NVIDIA/dgxc-benchmarking nccl/README.md ("View sample output (AllReduce excerpt)"; the same table at
# commits 46e42015 and 8e77d607): one DGX H100 host, 8 x H100 80GB HBM3, 8 ranks (nGpus 1 each), float
# sum, 8 B-16 GiB, algorithm not forced (the recipe sets NCCL_DEBUG and NCCL_NET only); out-of-place
# (size B, time us, busbw GB/s). NCCL version not printed (container nemo:25.09.00).
DGXC_H100 = (
    (8, 13.67, 0.00),
    (16, 13.00, 0.00),
    (32, 68.14, 0.00),
    (64, 14.92, 0.01),
    (128, 15.87, 0.01),
    (256, 16.10, 0.03),
    (512, 16.70, 0.05),
    (1024, 16.94, 0.11),
    (2048, 17.14, 0.21),
    (4096, 23.59, 0.30),
    (8192, 17.40, 0.82),
    (16384, 17.93, 1.60),
    (32768, 19.33, 2.97),
    (65536, 19.54, 5.87),
    (131072, 19.89, 11.53),
    (262144, 20.43, 22.45),
    (524288, 20.66, 44.41),
    (1048576, 27.37, 67.04),
    (2097152, 42.21, 86.94),
    (4194304, 54.19, 135.44),
    (8388608, 83.04, 176.77),
    (16777216, 123.8, 237.21),
    (33554432, 199.3, 294.69),
    (67108864, 324.7, 361.67),
    (134217728, 586.4, 400.53),
    (268435456, 1112.5, 422.25),
    (536870912, 2151.0, 436.79),
    (1073741824, 4029.4, 466.33),
    (2147483648, 7939.1, 473.37),
    (4294967296, 15749, 477.24),
    (8589934592, 31307, 480.16),
    (17179869184, 62648, 479.90),
)
