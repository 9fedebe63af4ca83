"""DDP vs FSDP (ZeRO-3): simulated step time and efficiency, and per-GPU memory.

    .venv/bin/python bench/fsdp_vs_ddp.py

a) h100-1024 (GPT-2 760M, 16k tokens per GPU per step) at 2..1024 ranks, 50 steps, seed 0:
   DDP (sim.engine.simulate) against FSDP (sim.fsdp.simulate_fsdp) with prefetch 1 and 0;
b) the home lab's pair (homelab-10gbe, homelab-1gbe: RTX 4070 + M2, gloo) the same way, FSDP
   with activation checkpointing;
c) per-GPU memory of gpt2-760m on a 12 GB RTX 4070, micro-batch 4, seq 1024: DDP on one GPU
   and on two machines vs FSDP on two machines, with and without activation checkpointing.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.engine import simulate  # noqa: E402
from sim.fsdp import simulate_fsdp  # noqa: E402
from sim.memory import estimate_memory, fits  # noqa: E402
from sim.scenario_file import load_scenario  # noqa: E402

RANKS = (2, 8, 64, 256, 1024)
STEPS = 50
# The home lab's RTX 4070, as its preset gives it (compute.device_memory_gib and its source).
RTX_4070_GIB = load_scenario("homelab-10gbe").compute.device_memory_gib


def _row(s: dict) -> tuple[float, float, float]:
    return s["step_time_s"]["mean"], s["scaling_efficiency"], s["exposed_comm_s"] + s["straggler_wait_s"]


def step_table(preset: str, ranks_list, fsdp_extra: list[str] = ()) -> None:
    print(
        f"{'ranks':>5} | {'DDP step ms':>11} {'eff':>6} {'idle ms':>8} {'GB/step':>7} | "
        f"{'FSDP p=1 ms':>11} {'eff':>6} {'idle ms':>8} {'GB/step':>7} | {'FSDP/DDP':>8} | "
        f"{'FSDP p=0 ms':>11} {'eff':>6}"
    )
    for n in ranks_list:
        ddp = simulate(load_scenario(preset, ranks=n, steps=STEPS)).summary()
        fsdp = ["training.mode=fsdp", *fsdp_extra]
        f1 = simulate_fsdp(load_scenario(preset, fsdp, ranks=n, steps=STEPS)).summary()
        f0 = simulate_fsdp(load_scenario(preset, [*fsdp, "training.fsdp_prefetch=0"], ranks=n, steps=STEPS)).summary()
        (d_t, d_e, d_i), (f_t, f_e, f_i), (z_t, z_e, _) = _row(ddp), _row(f1), _row(f0)
        print(
            f"{n:>5} | {d_t * 1e3:>11.1f} {d_e:>6.1%} {d_i * 1e3:>8.1f} {ddp['traffic_bytes_per_step'] / 1e9:>7.2f} | "
            f"{f_t * 1e3:>11.1f} {f_e:>6.1%} {f_i * 1e3:>8.1f} {f1['traffic_bytes_per_step'] / 1e9:>7.2f} | "
            f"{f_t / d_t:>8.3f} | {z_t * 1e3:>11.1f} {z_e:>6.1%}"
        )


def memory_table() -> None:
    rows = [
        ("DDP, 1 GPU", "ddp", 1),
        ("DDP, 2 machines", "ddp", 2),
        ("FSDP, 2 machines", "fsdp", 2),
    ]
    cols = ("params", "grads", "optim", "activ", "logits", "buckets", "gathered", "CUDA", "total", "fits")
    print(f"{'':<34}" + "".join(f"{c:>9}" for c in cols) + f"{'unfused attn':>14}")
    for label, mode, n in rows:
        for ckpt in (False, True):
            sets = [f"training.mode={mode}", f"training.activation_checkpointing={str(ckpt).lower()}"]
            sets.append("stragglers=''")  # memory is per GPU: the 4070's, not the M2's
            sc = load_scenario("homelab-10gbe", sets, ranks=n)
            e = estimate_memory(sc)
            unfused = estimate_memory(
                load_scenario("homelab-10gbe", [*sets, "training.fused_attention=false"], ranks=n)
            )
            parts = (
                e.parameters_gib,
                e.gradients_gib,
                e.optimizer_state_gib,
                e.activations_gib,
                e.logits_gib,
                e.ddp_buckets_gib,
                e.fsdp_unsharded_gib,
                e.cuda_context_gib,
                e.total_gib,
            )
            name = f"{label}{', act. ckpt' if ckpt else ''}"
            ok = "yes" if fits(e, RTX_4070_GIB) else "no"
            ok_unfused = "yes" if fits(unfused, RTX_4070_GIB) else "no"
            print(
                f"{name:<34}"
                + "".join(f"{p:>9.2f}" for p in parts)
                + f"{ok:>9}"
                + f"{unfused.total_gib:>9.2f} {ok_unfused:>4}"
            )


def main() -> None:
    print(f"a) h100-1024, gpt2-760m, {STEPS} steps, seed 0 (idle = exposed comm + straggler wait per rank)")
    step_table("h100-1024", RANKS)
    print()
    print(
        "b) the home lab pair (rank 1 is the M2, 8.06x slower); FSDP with activation checkpointing, "
        "which pays for its memory (c) with one more block forward per backward"
    )
    for preset in ("homelab-10gbe", "homelab-1gbe"):
        print(preset)
        step_table(preset, (2,), ["training.activation_checkpointing=true"])
    print()
    print(
        f"c) per-GPU memory, GiB: gpt2-760m on an RTX 4070 ({RTX_4070_GIB:g} GiB), micro-batch 4, seq 1024, "
        "the preset's precision (pure bf16: 2 B params and grads, 4 B Adam); fused attention (SDPA), and its"
        " total without it"
    )
    memory_table()


if __name__ == "__main__":
    main()
