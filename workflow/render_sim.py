"""What `ddplab simulate` prints for people, as lines: one scale's summary with its memory,
episodes and calibration, an out-of-memory verdict with what would fit, a sweep's table, a
tensor- or pipeline-parallel step, and the days and dollars to train. `ddplab compare` and
`ddplab collective` share the network line and the alternatives."""

from sim.describe import description_over
from sim.memory import attention_core_bytes
from sim.memory_fit import nccl_reserve_gib
from sim.optimizer import optimizer_basis
from sim.parallel3d import resharded_per_block
from sim.pipeline import W_SHARE
from sim.summary import Summary
from sim.transformer import param_count
from workflow import threed
from workflow.units import fmt_bytes, fmt_count, fmt_seconds


def episodes_lines(e: dict) -> list[str]:
    out = []
    if e["warning"]:
        out.append(f"  {e['warning']}")
    out.append(
        f"  episodes         expected over {e['horizon_h']:g} h: {e['expected_tokens_per_s']:,.0f} tokens/s, a cost of"
        f" {e['cost']:.1%} (+-{1.96 * e['cost_sd']:.1%}, 95 %, over that horizon) against"
        f" {e['clear_tokens_per_s']:,.0f} without; network degraded {e['comm_share']:.0%} of the time, a rank"
        f" throttled {e['compute_share']:.0%} (each state's steady step weighed by its share: docs/episodes.md)"
    )
    return out


# What each compute basis means, beside the compute time (sim/mfu.py compute_basis).
STACK_NOTES = {
    "eager": "stack eager: plain PyTorch, unfused kernels (compute.stack=compiled: a fused step)",
    "compiled": "stack compiled: a fused step (torch.compile, llm.c)",
    "given": "given: compute.step_compute_s",
    "fixed MFU": "fixed MFU: compute.mfu",
    "measured": "measured: the calibration's compute",
}


def compute_note(stack: str, sc) -> str:
    """The compute basis, and for a roofline stack the kernel choices that move its time away
    from realrun's model (sim/roofline.py): unfused attention, dropout, a fused loss."""
    note = STACK_NOTES[stack]
    if stack == "fixed MFU" and sc.compute.mfu is not None:
        # The fixed MFU times the model's FLOPs; a rerun forward is work on top of them, which
        # is why the MFU line below comes out under this figure (sim/workload.py recompute_fraction).
        note = f"{note} {sc.compute.mfu:g}"
        if sc.training.recompute != "none":
            note += f", plus the {sc.training.recompute} recompute's rerun forward"
    if stack not in ("eager", "compiled"):
        return note
    t = sc.training
    extra = [
        "attention unfused (its s x s scores through HBM)" if not t.fused_attention else "",
        f"dropout {t.dropout:g}" if t.dropout > 0 else "",
        "fused cross-entropy" if t.fused_loss else "",
    ]
    return "; ".join([note, *[e for e in extra if e]])


def mfu_line(s: dict) -> str:
    """MFU over the step and over compute, naming the FLOP count and the peak (sim/mfu.py)."""
    line = (
        f"{s.mfu:.1%} of the step, {s.compute_mfu:.1%} of compute ({s.flop_count} ="
        f" {s.flops_per_token / 1e9:.3g} GFLOP/token against {s.peak_tflop_s:g} TFLOP/s peak)"
    )
    if s.slowest_rank_compute_s > 1.05 * s.compute_s:
        # A straggler is modelled as the same GPU running slow (sim/config.py stragglers), so its
        # lost time is lost MFU; where it is another device (the home lab's M2), the fastest
        # rank's figure is the one that shows its kernels' efficiency. Same test as the
        # "slowest rank" line's.
        fastest = s.compute_mfu * s.compute_s / s.fastest_rank_compute_s
        line += (
            f"; a slow rank is taken as this GPU running slow, so it counts as lost MFU: the"
            f" fastest rank alone {fastest:.1%} of its compute"
        )
    return line


def record_lines(record: dict | None, indent: str = "  ", step_range: bool = True) -> list[str]:
    """How the public record's step times of jobs like this one came out (calibrate/record.py),
    under the step time it qualifies, and where the record carries it (and ``step_range``) the
    step their errors make of this one's; nothing when the compute was given or calibrated."""
    if record is None:
        return []
    head = f"{indent}public record    {record['regime']}:"
    pad = " " * len(f"{indent}public record    ")
    if not record["rows"]:
        return [
            f"{head} no published run of such a job is in the record; this step rests on the"
            " preset's efficiencies alone (docs/validation-public.md)"
        ]
    n = record["rows"]
    lo, hi, med = record["step_error_min"], record["step_error_max"], record["step_error_median"]
    spread = f"{lo:+.1%}" if n == 1 else f"{lo:+.1%} to {hi:+.1%} (median {med:+.1%})"
    return [
        f"{head} {n} published run{'s: their steps' if n > 1 else ': its step'} predicted {spread},"
        f" {record['within']} of {n} within the {record['bound'] * 100:.0f} % tier",
        f"{pad}(minus: the prediction is faster than the run; {', '.join(record['sources'])}:"
        " docs/validation-public.md)",
    ] + (
        [
            f"{pad}at their errors this step would take {fmt_seconds(at['fastest'])} to"
            f" {fmt_seconds(at['slowest'])} (median {fmt_seconds(at['median'])})"
        ]
        if step_range and (at := record.get("step_s_at_errors"))
        else []
    )


def parameters_lines(cal: dict, parameters: list[dict]) -> list[str]:
    """The calibration applied and where each parameter came from (calibrate/apply.py)."""
    out = []
    out.append(f"  parameters       calibration {cal['file']} applied in mode {cal['mode']!r} ({cal['why']}):")
    for p in parameters:
        value = p["value"]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value or '""')
        out.append(f"    {p['key']:<28} {shown:>12}  {p['source']}")
    if cal.get("withheld"):
        out.append("  not carried      measured, left at the scenario's value, and why:")
    for w in cal.get("withheld", []):
        value = w["value"]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        out.append(f"    {w['key']:<28} {shown:>12}  {w['reason']}")
    return out


def network_line(sc) -> str:
    net = sc.network
    if not net.enabled:
        return "network off (free communication)"
    if net.backend == "gloo":
        return f"gloo ring over {net.nic_gbit_s:.4g} Gbit/s x {net.nic_efficiency:.0%}"
    library = "RCCL" if net.tuner.startswith("rccl") else "NCCL"
    line = (
        f"{library} {net.algorithm}; {net.gpus_per_node}/node on {net.intra_gb_s:g} GB/s {net.intra_link},"
        f" {net.nics_per_node} x {net.nic_gbit_s:g} Gbit/s NICs"
    )
    tiers = [f"racks of {net.gpus_per_rack}"] if net.gpus_per_rack else []
    if net.gpus_per_pod:  # sim/topology.py
        tiers.append(f"pods of {net.gpus_per_pod} at 1:{net.pod_oversubscription:g} above, {net.placement}")
    return f"{line}, {', '.join(tiers)}" if tiers else line


def summary_lines(sc, s: Summary) -> list[str]:
    """One simulated scale as `ddplab simulate` prints it."""
    out = []
    st = s.step_time_s
    out.append(f"{sc.name}: {sc.description}")
    out.append(
        f"  {s.model} ({fmt_count(s.params)} params){mode_note(sc)}, {s.ranks} ranks on {s.nodes}"
        f" node{'s' * (s.nodes != 1)},"
        f" {network_line(sc)};"
        f" {s.steps} steps, seed {s.seed}"
    )
    out.append(
        f"  step time        {fmt_seconds(st.mean)} mean  (p50 {fmt_seconds(st.p50)},"
        f" p95 {fmt_seconds(st.p95)}, p99 {fmt_seconds(st.p99)})"
    )
    out += record_lines(s.record)
    out.append("  where it goes    per rank, mean of a step:")
    parts = [
        ("compute (fwd+bwd)", s.compute_s),
        ("exposed comm", s.exposed_comm_s),
        ("straggler wait", s.straggler_wait_s),
        ("optimizer", s.optimizer_s),
        ("dataloader", s.dataloader_s),
        ("host delay", s.host_delay_s),
    ]
    notes = {
        "compute (fwd+bwd)": compute_note(s.stack, sc),
        "optimizer": optimizer_basis(sc),
        "dataloader": "waiting for batches the DataLoader's workers have not built (docs/loader.md)",
        "host delay": f"ranks late before their forward (host_delays_s = {sc.host_delays_s})",
    }
    for name, value in parts:
        if value > 0 or name.startswith(("compute", "exposed", "straggler")):
            out.append(
                f"    {name:<18} {fmt_seconds(value):>10}  {value / st.mean:6.1%}  {notes.get(name, '')}".rstrip()
            )
    out += memory_lines(sc, s.memory_gib)
    if s.slowest_rank_compute_s > 1.05 * s.compute_s:
        out.append(
            f"  slowest rank     rank {s.slowest_rank}: compute {fmt_seconds(s.slowest_rank_compute_s)}"
            f" ({s.slowest_rank_compute_s / s.compute_s:.2f} x the mean); every step waits for it"
        )
    ratio = s.comm_compute_ratio
    verdict = f"communication-bound x {ratio:.1f}" if ratio >= 1 else "comm fits inside compute"
    out.append(f"  T_comm/T_compute {ratio:.3f}  ({verdict}; {fmt_seconds(s.comm_s)} of collectives per step)")
    out.append(
        f"  efficiency       {s.scaling_efficiency:.1%} of each rank's time is its own work (compute, optimizer, its"
        " data); the rest, communication and waiting for other ranks"
    )
    out.append(f"  throughput       {s.tokens_per_s:,.0f} tokens/s ({s.tokens_per_s / s.ranks:,.0f} per GPU)")
    out.append(f"  MFU              {mfu_line(s)}")
    out.append(
        f"  buckets          {s.buckets} ({fmt_bytes(s.traffic_bytes_per_step)} on each rank's bus"
        f" per step; {', '.join(s.algorithms)})"
    )
    out.append(f"  simulated in     {s.wall_s:.2f} s")
    return out


# The memory terms as printed: (label, key); zero terms are left out.
_MEMORY_TERMS = (
    ("params", "parameters_gib"),
    ("grads", "gradients_gib"),
    ("optimizer", "optimizer_state_gib"),
    ("weight copies", "weight_copies_gib"),
    ("activations", "activations_gib"),
    ("logits", "logits_gib"),
    ("DDP buckets", "ddp_buckets_gib"),
    ("FSDP gathered", "fsdp_unsharded_gib"),
    ("CUDA context", "cuda_context_gib"),
)


# What a job over its device's memory is told: that --ignore-memory ran it, or how to.
SIMULATED_ANYWAY = "simulated anyway (--ignore-memory); a real device runs out of memory"
IGNORE_HINT = "  --ignore-memory simulates it anyway"


def memory_lines(sc, m: dict, *, simulated: bool = True) -> list[str]:
    out = []
    verdict = ""
    if "fits" in m:
        verdict = f"; {'fits' if m['fits'] else 'does NOT fit'} {m['device_gib']:g} GiB"
        if not m["fits"] and simulated:
            verdict += f": {SIMULATED_ANYWAY}"
        if m.get("tight"):
            verdict += "; " + tight_note(m["device_gib"] - m["total_gib"], m["nccl_communicators"])
    terms = ", ".join(f"{label} {m[key]:.2f}" for label, key in _MEMORY_TERMS if m[key] > 0)
    estimate = f"at the {m['peak_phase']} peak ({sc.training.mode}, {sc.training.precision}: {terms})"
    if "measured_peak_allocated_gib" in m:
        out.append(
            f"  memory/GPU       {m['total_gib']:.2f} GiB: {m['measured_peak_allocated_gib']:.2f} measured"
            f" + CUDA context {m['cuda_context_gib']:.2f}{verdict}"
        )
        out.append(f"    estimate       {m['peak_allocated_gib']:.2f} GiB allocated {estimate}")
        return out
    out.append(f"  memory/GPU       {m['total_gib']:.2f} GiB {estimate}{verdict}")
    return out + selective_note(sc)


def selective_note(sc) -> list[str]:
    """What training.activation_checkpointing=selective is here, where a user of torchtitan
    means another thing by the word: Megatron's selective recompute reruns the attention core
    alone (Korthikanti et al. 2022), and fused attention keeps only the core's log-sum-exp, so
    it saves next to nothing; torchtitan's per-op selective AC (its default "op" option: every
    other matmul's output kept, the rest rerun) saves far more: training.activation_checkpointing
    = op, where the block is Llama's and the job has no tp or cp."""
    t = sc.training
    if t.recompute != "selective" or not t.fused_attention:
        return []
    saved = sc.model.shape.n_layer * attention_core_bytes(
        sc.model.shape, sc.seq_len, t.micro_batch_size, t.dtypes, True, t.dropout > 0
    )  # fmt: skip
    return [
        f"    selective    Megatron's: the attention core alone rerun, and fused attention keeps only"
        f" its log-sum-exp, so it saves {fmt_bytes(saved)} a GPU here; torchtitan's per-op selective AC"
        f" is training.activation_checkpointing=op"
    ]


def tight_note(spare_gib: float, communicators: int) -> str:
    """What a fit with little spare leaves out (sim/memory_fit.py NCCL_BYTES_PER_COMMUNICATOR)."""
    need = nccl_reserve_gib(communicators)
    groups = f"{communicators} communicator{'s' if communicators != 1 else ''}"
    return (f"tight: {spare_gib:.2f} GiB spare, where NCCL's own buffers (not in this estimate) take about"
            f" {need:.1f} GiB for its {groups} (NVIDIA/nccl#864), and the allocator's fragmentation more")  # fmt: skip


def out_of_memory_lines(sc, v: dict) -> list[str]:
    """Where the step time would be: that there is none, and what would fit."""
    out = []
    out.append(f"{sc.name}: {sc.description}")
    out.append(
        f"  {v['model']}{mode_note(sc)}, {v['ranks']} ranks on {v['nodes']} node{'s' * (v['nodes'] != 1)},"
        f" {network_line(sc)};"
        f" {v['steps']} steps, seed {v['seed']}"
    )
    out.append(
        f"  step time        none: out of memory, {v['peak_gib']:.2f} GiB per GPU against the device's"
        f" {v['device_memory_gib']:g} GiB (compute.device_memory_gib); not simulated"
    )
    out += memory_lines(sc, v["memory_gib"], simulated=False)
    out += alternatives_lines(v["alternatives"])
    out.append(IGNORE_HINT)
    return out


def alternatives_lines(alternatives: list[dict], indent: str = "  ", model: str = "sim/memory.py") -> list[str]:
    """What would fit (sim/memory_fit.py), each with its peak by ``model``, the memory model that
    estimated it (a tensor- or pipeline-parallel job's: sim/parallel3d.py)."""
    if not alternatives:
        return [
            f"{indent}what would fit   nothing tried fits: FSDP/HSDP, activation checkpointing, a smaller micro-batch"
        ]
    out = []
    out.append(f"{indent}what would fit   each with its peak per GPU ({model}), as --set:")
    width = max(len(a["set"]) for a in alternatives)
    for a in alternatives:
        out.append(f"{indent}  {a['set']:<{width}}  {a['peak_gib']:6.2f} GiB")
    return out


def _sweep_row(s: Summary | dict) -> str:
    if not isinstance(s, Summary):  # not simulated: out of memory
        cells = [f"{s['ranks']:>6}", f"{s['nodes']:>5}"]
        return (
            " ".join(cells) + f"  OOM: {s['peak_gib']:.2f} GiB per GPU > {s['device_memory_gib']:g} GiB, not simulated"
        )
    return " ".join(f"{f(s):>{w}}" for _, w, f in _SWEEP_COLUMNS)


# Sweep table columns: header (units in the name), width, value.
_SWEEP_COLUMNS = (
    ("ranks", 6, lambda s: f"{s.ranks}"),
    ("nodes", 5, lambda s: f"{s.nodes}"),
    ("step_p50(s)", 11, lambda s: f"{s.step_time_s.p50:.4f}"),
    ("step_p95(s)", 11, lambda s: f"{s.step_time_s.p95:.4f}"),
    ("compute(s)", 10, lambda s: f"{s.compute_s:.4f}"),
    ("exp_comm(s)", 11, lambda s: f"{s.exposed_comm_s:.4f}"),
    ("wait(s)", 9, lambda s: f"{s.straggler_wait_s:.4f}"),
    ("comm/comp", 9, lambda s: f"{s.comm_compute_ratio:.3f}"),
    ("eff(%)", 7, lambda s: f"{s.scaling_efficiency * 100:.1f}"),
    ("tokens/s", 13, lambda s: f"{s.tokens_per_s:,.0f}"),
    ("MFU(%)", 6, lambda s: f"{s.mfu * 100:.1f}"),
    ("algorithms", 24, lambda s: "+".join(s.algorithms)),
)


def mode_note(sc) -> str:
    t = sc.training
    fp8 = ", FP8 all-gather" if t.fp8_all_gather else ""
    if t.mode == "hsdp":
        shards = f"shards of {sc.shard_size} x {sc.ranks // sc.shard_size} replicas"
        return f" (HSDP, {shards}, prefetch {t.fsdp_prefetch}{fp8})"
    return f" (FSDP, prefetch {t.fsdp_prefetch}{fp8})" if t.mode == "fsdp" else ""


def sweep_lines(sc, summaries: list[Summary | dict]) -> list[str]:
    out = []
    # sc is the first scale's, its description already written for sc.ranks (sim/describe.py).
    counts = [s.ranks if isinstance(s, Summary) else s["ranks"] for s in summaries]
    out.append(f"{sc.name}: {description_over(sc.description, sc.ranks, counts, sc.network.gpus_per_node)}")
    params = fmt_count(param_count(sc.model.shape))
    out.append(
        f"  {sc.model.shape.name} ({params} params){mode_note(sc)}, {network_line(sc)};"
        f" {sc.steps} steps, seed {sc.seed}"
    )
    out.append(" ".join(f"{h:>{w}}" for h, w, _ in _SWEEP_COLUMNS))
    for s in summaries:
        out.append(_sweep_row(s))
    ran = next((s for s in summaries if isinstance(s, Summary)), None)
    if ran is not None:
        out.append(f"  compute: {STACK_NOTES[ran.stack]}; MFU: {ran.flop_count} FLOPs per token"
              f" x tokens/s per GPU / {ran.peak_tflop_s:g} TFLOP/s peak")  # fmt: skip
        # Every scale is the same class of job; the step its errors make differs by scale, so
        # the sweep leaves that line out (each scale's summary JSON carries its own).
        out += record_lines(ran.record, step_range=False)
    oom = next((s for s in summaries if not isinstance(s, Summary)), None)
    if oom is not None:
        out.append(f"  at {oom['ranks']} ranks:")
        out += alternatives_lines(oom["alternatives"])
        out.append(IGNORE_HINT)
    return out


def simulate_lines(
    scenarios, summaries: list[Summary | dict], *, sweep: bool, provenance, out_dir, records: bool
) -> list[str]:
    """What `ddplab simulate` prints after its scales ran (workflow/simulation.py simulate_scales)."""
    out = []
    simulated = [s for s in summaries if isinstance(s, Summary)]
    if sweep:
        out += sweep_lines(scenarios[0], summaries)
        for s in simulated:
            out += train_cost_lines(s, indent=f"  {s.ranks} ranks: ")
    elif not simulated:
        return out_of_memory_lines(scenarios[0], summaries[0])
    else:
        out += summary_lines(scenarios[0], summaries[0])
        if summaries[0].episodes:
            out += episodes_lines(summaries[0].episodes)
        out += train_cost_lines(summaries[0])
    if provenance:
        out += parameters_lines(summaries[0].calibration, summaries[0].parameters)
    if out_dir and simulated:
        plots = ", scaling.png and scaling.csv" if sweep else " and breakdown.png"
        tables = "records, per-step and per-rank tables" if records else "per-step and per-rank tables"
        out.append(f"{tables}, Chrome trace{plots} in {out_dir}/")
    return out


def _tokens(n: float) -> str:
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= size:
            return f"{n / size:.4g}{suffix}"
    return f"{n:,.0f}"


def train_cost_lines(summary: Summary | dict, indent: str = "  ") -> list[str]:
    """What `simulate` prints under its throughput: the time and money, then what they rest on."""
    c = summary.to_train if isinstance(summary, Summary) else summary.get("to_train")  # a 3D run's dict
    if c is None:
        return []
    money = f", ${c['usd']:,.0f} at ${c['usd_per_gpu_hour']:.2f}/GPU-hour" if c["usd"] is not None else ""
    return [
        f"{indent}to train {_tokens(c['tokens']):<7} {c['days']:,.2f} days wall clock including failures"
        f" ({c['gpu_hours']:,.0f} GPU-hours{money}); {c['failure_free_days']:,.2f} days without failures",
        f"{indent}  goodput        {c['goodput']:.1%}: MTBF {c['mtbf_h']:.3g} h ({c['mtbf_from']}),"
        f" restart {c['restart_min']:g} min, checkpoint {c['checkpoint_min']:g} min every"
        f" {c['interval_min']:.0f} min (Daly's interval)",
        f"{indent}  batch          {_batch(c['batch'])}",
    ]


def _batch(b: dict) -> str:
    """The global batch the days rest on, against the published ones (sim/batch_reference.py)."""
    said = (f"{_tokens(b['tokens_per_step'])} tokens a step, {b['ratio']:.3g}x the {b['reference_tokens'] / 1e6:g}M"
            f" of {b['reference_run']}")  # fmt: skip
    if not b["far"]:
        return said
    return (f"{said}: far past it, and past the critical batch size the same loss takes more tokens"
            " (McCandlish et al. 2018), so these days are a floor (docs/references.md)")  # fmt: skip


def run3d_lines(sc, run, s: dict) -> list[str]:
    """One tensor- or pipeline-parallel scale (workflow/threed.py) over its steps: the step, the
    parts per GPU, memory per stage and what a straggler costs; where it does not fit (``run``
    None: not simulated), that there is no step, the memory by stage and what would fit."""
    out = [_head3d(sc, s["layout"])]
    by_stage = s["memory_gib_by_stage"]
    mem = ", ".join(f"{g:.1f}" for g in by_stage[:8]) + (" ..." if len(by_stage) > 8 else "")
    if run is None:
        return out + [
            f"  step time      none: out of memory, {s['peak_gib']:.1f} GiB per GPU on the fullest stage against"
            f" the device's {s['device_memory_gib']:g} GiB (compute.device_memory_gib); not simulated",
            f"  memory per GPU {s['peak_gib']:.1f} GiB at most (by stage: {mem})",
            *alternatives_lines(s["alternatives"], model="sim/parallel3d.py"),
            IGNORE_HINT,
        ]
    lay, first = run.layout, run.first
    pct = s["step_time_percentiles_s"]
    out.append(f"  step time      {fmt_seconds(s['step_time_s'])} mean over {sc.steps} steps"
               f" (p50 {fmt_seconds(pct['p50'])}, p99 {fmt_seconds(pct['p99'])};"
               f" {s['tokens_per_s']:,.0f} tokens/s, MFU {s['mfu']:.1%})")  # fmt: skip
    out += record_lines(s.get("record"))
    idle = s["stage_idle_fraction"]
    out.append(f"  pipeline       {fmt_seconds(s['pipeline_s'])}  bubble (closed form) {first.bubble_fraction:.1%}, "
               f"stage idle {min(idle):.1%}-{max(idle):.1%}")  # fmt: skip
    if lay.schedule == "zb-h1":
        out.append(f"                 ZB-H1: each backward split into B and W, W taken as {W_SHARE:.0%} of it"
                   " (Qi et al.'s T_B = T_W; attention's weightless backward makes it less)")  # fmt: skip
    what = "TP+CP comm    " if lay.cp > 1 else "TP comm       "
    out.append(f"  {what} {fmt_seconds(first.tp_comm_s)} exposed per step on the busiest stage; "
               f"p2p send {fmt_seconds(first.p2p_s)}")  # fmt: skip
    if sc.training.tp_comm_overlap == "wgrad":
        out.append(
            "                 TP overlap: each column-split layer's input-gradient reduce-scatter (all-reduce)"
            " under its weight-gradient matmul (Transformer Engine's default); the rest exposed (sim/tp.py)"
        )
    if sc.training.tp_comm_overlap == "full":
        out.append("                 TP overlap: each all-gather and reduce-scatter in tp chunks under the matmul it"
                   " feeds or follows, exposed only past (tp - 1)/tp of it; assumed: the transfers take no"
                   " SMs from the matmul (sim/tp.py)")  # fmt: skip
    if lay.cp > 1 and sc.training.cp_comm == "p2p":
        out.append("                 CP: ring attention, each K/V step under that step's attention (A / cp), a step"
                   " timed as one of the ring all-gather's cp - 1")  # fmt: skip
    elif lay.cp > 1 and sc.training.cp_comm == "a2a":
        out.append("                 CP: Ulysses, four all-to-alls a block each way (Q, K, V, context), exposed;"
                   " assumed: all-to-all latency without a per-peer term (sim/collectives.py)")  # fmt: skip
    elif lay.cp > 1:
        out.append("                 CP: K and V all-gathered per block, exposed (Llama 3's)")
    # Megatron's tied embedding: its gradient allreduced between the first and last stages, which
    # is there with dp = 1 too (sim/parallel3d.py).
    tie = ""
    if first.costs.tie_s > 0:
        between = f"between the first and last stages ({fmt_seconds(first.costs.tie_s)})"
        tie = f", with the tied embedding's allreduce {between}"
    out.append(f"  DP reduction   {fmt_seconds(s['dp_exposed_s'])} exposed after the pipeline{tie}; optimizer "
               f"{fmt_seconds(first.optimizer_s)}")  # fmt: skip
    if resharded_per_block(sc, lay):
        out.append(
            "                 FSDP without a pipeline: each block gathered for its forward and again for its"
            " backward every micro-batch (torchtitan's resharding); what outlasts the compute is above"
        )
    parts = s["parts_s"]
    out.append(f"  per GPU        compute {fmt_seconds(parts['compute_s'])}, bubble {fmt_seconds(parts['bubble_s'])},"
               f" exposed comm {fmt_seconds(parts['exposed_comm_s'])}, straggler wait"
               f" {fmt_seconds(parts['straggler_wait_s'])} (means over GPUs and steps)")  # fmt: skip
    over = f"; does NOT fit {s['device_memory_gib']:g} GiB: {SIMULATED_ANYWAY}" if s.get("fits") is False else ""
    out.append(f"  memory per GPU {s['peak_memory_gib']:.1f} GiB at most (by stage: {mem}){over}")
    if "memory_tight" in s:
        t = s["memory_tight"]
        out.append(f"                 {tight_note(t['spare_gib'], t['nccl_communicators'])}")
    if "straggler" in s:
        g = s["straggler"]
        c = g["charged_to"]
        out.append(f"  straggler      ranks {g['ranks']} in stage(s) {g['stages']}:"
                   f" +{fmt_seconds(g['cost_s'])} per step "
                   f"({g['cost_fraction']:+.1%}) over {fmt_seconds(g['step_time_without_s'])} without; "
                   f"charged to stage {c['stage']} (pipeline {c['replica']}: its compute grew most)")  # fmt: skip
    out += train_cost_lines(s)
    out.append(f"  assumed: {threed.ASSUMED}")
    if "calibration" in s:
        out += parameters_lines(s["calibration"], s["parameters"])
    return out


def _head3d(sc, lay: dict) -> str:
    """A 3D scale's first line: the model, the layout (simulate's JSON "layout") and the schedule."""
    v, m = lay["virtual_stages"], lay["micro_batches"]
    sched = lay["schedule"] + (f", v={v}" if v > 1 else "")
    mb = f"{m} micro-batch{'es' * (m != 1)} of {sc.training.micro_batch_size} x {sc.seq_len}"
    cp = f" x cp {lay['cp']}" if lay["cp"] > 1 else ""
    mode = sc.training.mode
    if mode == "hsdp":  # over the data-parallel group (sim/parallel3d.py)
        groups = lay["dp"] * lay["cp"] // sc.dp_shard_size
        mode += f", shard groups of {sc.dp_shard_size} x {groups} replicas"
    return (f"{sc.name}: {sc.model.shape.name}, {sc.ranks} GPUs = tp {lay['tp']}{cp} x pp {lay['pp']} x dp"
            f" {lay['dp']} ({mode}), {mb}, {sched}")  # fmt: skip


def tables3d_line(out_dir, records: bool) -> str:
    """Where `ddplab simulate --out` of a tp/pp scenario put its files."""
    tables = "records, per-step and per-rank tables" if records else "per-step and per-rank tables"
    return f"{tables} in {out_dir}/"
