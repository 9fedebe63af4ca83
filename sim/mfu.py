"""Model FLOPs utilisation of a simulated step, and what its compute time rests on.

MFU = model FLOPs per token x tokens per second per GPU / the GPU's peak (PaLM, Chowdhery et
al. 2022, appendix B), with the FLOPs per token of sim/transformer.py ``flops_per_token``:
6N + 12 L d T (nanoGPT's ``estimate_mfu``; torchtitan's ``get_nparams_and_flops`` counts the
same), and the dense peak the precision's matmuls run at (``compute.peak_for``: bf16 for
autocast and bf16, tf32, fp32). It is computed over the whole step (compute, optimizer,
exposed communication, waits) as torchtitan and nanoGPT report it, and over compute alone.
"""

from sim.config import Scenario
from sim.transformer import flops_per_token

FLOP_COUNT = "6N + 12 L d T"


def compute_basis(sc: Scenario) -> str:
    """What decides the compute time: the roofline of a stack (eager | compiled), a time given
    in the scenario (given: compute.step_compute_s), or a fixed MFU (compute.mfu). A calibration
    that sets either of the last two says "measured" instead (workflow/simulation.py)."""
    c = sc.compute
    if c.step_compute_s is not None:
        return "given"
    if c.mfu is not None:
        return "fixed MFU"
    return c.stack


def mfu_fields(sc: Scenario, *, tokens_per_s: float, compute_s: float) -> dict:
    """The summary's MFU keys: ``mfu`` over the step, ``compute_mfu`` over forward + backward,
    with the FLOP count and the peak they rest on, and ``stack``."""
    fpt = flops_per_token(sc.model.shape, sc.seq_len)
    peak = sc.compute.peak_for(sc.training.dtypes)
    t = sc.training
    tokens_per_rank_step = t.grad_accum * t.micro_batch_size * sc.seq_len
    return {
        "stack": compute_basis(sc),
        "flops_per_token": fpt,
        "flop_count": FLOP_COUNT,
        "peak_tflop_s": peak,
        "mfu": fpt * tokens_per_s / sc.ranks / (peak * 1e12),
        "compute_mfu": fpt * tokens_per_rank_step / compute_s / (peak * 1e12),
    }
