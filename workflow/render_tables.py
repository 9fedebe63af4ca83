"""What the table commands print for people, as lines: `ddplab cost`'s link table, `collective`'s
nccl-tests-style table, `scenarios` (and `--keys`), `models` and `plan`. Each reads the rows its
workflow/ function returned (what `--json` prints)."""

from sim.memory_fit import nccl_reserve_gib
from sim.scenario_file import BASE_HINT
from workflow.layouts import scenario_sets
from workflow.render_sim import network_line, record_lines
from workflow.units import fmt_bytes, fmt_seconds


def cost_lines(
    rows: list[dict],
    *,
    params: float,
    precision: str,
    bytes_per_param,
    ranks: int,
    efficiency: float,
    grad_accum: int,
    compute_s,
) -> list[str]:
    """`ddplab cost`: the ring allreduce's traffic, then a row per link (workflow/tables.py)."""
    out = []
    per_param = rows[0]["bytes_per_param"]
    s = params * per_param
    why = "--bytes-per-param" if bytes_per_param is not None else f"{precision} gradients"
    out.append(
        f"Ring allreduce of {params:.4g} params x {per_param:g} B ({why}) = {s / 1e9:.2f} GB"
        f" over N={ranks}: 2(N-1)/N x S = {rows[0]['traffic_bytes'] / 1e9:.2f} GB per rank per step,"
        f" at {efficiency:.0%} of line rate"
    )
    if grad_accum > 1:
        out.append(f"Gradient accumulation K={grad_accum}: one allreduce per {grad_accum} micro-steps")
    header = f"{'link':<12} {'Gbit/s':>8} {'allreduce/step':>15}"
    if compute_s:
        header += f" {'T_comm/T_compute':>17}"
    out.append(header)
    for r in rows:
        line = f"{r['link']:<12} {r['link_gbit_s']:>8g} {fmt_seconds(r['seconds_per_step']):>15}"
        if "comm_compute_ratio" in r:
            k = r["comm_compute_ratio"]
            verdict = f"communication-bound x {k:.1f}" if k >= 1 else f"compute-bound ({k:.2f})"
            line += f" {k:>17.2f}  {verdict}"
        out.append(line)
    return out


def collective_lines(op: str, found) -> list[str]:
    """`ddplab collective`: nccl-tests' table of a predicted collective, and why each algorithm."""
    out, sc, rows = [], found.scenario, found.rows
    redop = "sum" if op in ("allreduce", "reduce_scatter") else "none"
    out.append(f"# ddplab collective: predicted {op} on {sc.name} ({network_line(sc)})")
    if op == "alltoall":  # no algorithm to choose: point-to-point sends to every peer
        how = "point-to-point sends to every peer at once, no tuner pick (sim/collectives.py alltoall_s)"
        if sc.network.backend != "nccl":
            how = "gloo's pairwise exchanges, one peer after another (sim/collectives.py alltoall_s)"
    elif sc.network.backend == "nccl":
        how = f"{sc.network.tuner}'s choice replayed from its own estimate, then timed (sim/nccl.py)"
    else:
        how = "gloo's ring"
    out.append(f"# nranks {found.ranks}, nodes {found.nodes}; {how}")
    out.append("#")
    head = ("size", "count", "type", "redop", "algorithm", "time", "algbw", "busbw")
    units = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)")
    widths = (12, 12, 6, 6, 15, 10, 8, 8)
    cited = {p["source"]: p for r in rows for p in r.get("published", ())}
    sources = list(cited)
    if sources:  # a published run of this very command: its figure and our error beside ours
        head, units = (*head, "  published [source], ours vs it"), (*units, "")
        widths = (*widths, 0)
    out.append("# " + " ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    out.append("# " + " ".join(f"{u:>{w}}" for u, w in zip(units, widths, strict=True)).rstrip())
    for r in rows:
        line = (
            f"  {r['size_bytes']:>12} {r['count']:>12} {r['type']:>6} {redop:>6} {r['algorithm']:>15}"
            f" {r['time_us']:>10.1f} {r['algbw_gb_s']:>8.2f} {r['busbw_gb_s']:>8.2f}"
        )
        for p in r.get("published", ()):
            mark = ("" if p["within"] else " MISS") + ("" if p["held_out"] else " fitted")
            line += f"   {p['measured']:g} {p['unit']} [{sources.index(p['source']) + 1}] {p['error']:+.1%}{mark}"
        out.append(line)
    avg = sum(r["busbw_gb_s"] for r in rows) / len(rows)
    out.append(f"# Avg bus bandwidth    : {avg:.3f}")
    if sources:
        out.append("#")
        out.append("# published: the same command's run as its source printed it (time below 1 MiB, busbw from")
        out.append("#   1 MiB); ours vs it = ours / its - 1; MISS: outside the tier set before it was compared;")
        out.append("#   fitted: a preset constant was fitted on that figure, so agreeing with it proves little")
        out.append("#   (ddplab validate --public, docs/validation-public.md)")
        for i, name in enumerate(sources, 1):
            out.append(f"#   [{i}] {name}: {cited[name]['citation']}; {cited[name]['conditions']}")
    elif sc.network.backend == "nccl":  # say so: these sizes were not held to any published run
        out.append("#")
        out.append("# published: no run of this command (preset, --ranks, --op, --set) is in the public record;")
        out.append("#   the runs it has: ddplab validate --public (docs/validation-public.md)")
    if rows and "why" in rows[0]:
        out.append("#")
        out.append(f"# why: {sc.network.tuner}'s estimate (us), its pick first; then our time = latency + bytes")
        for r in rows:
            w = r["why"]
            others = " < ".join(f"{n['algorithm']} {n['library_estimate_us']:.1f}" for n in w["next"])
            net = f", {w['network_steps']} network steps" if w["network_steps"] else ""
            # NVLS on one node runs NCCL's loop (sim/nccl_time.py): its fixed part is the pipeline's fill.
            fixed = "fill (NCCL's NVLS loop)" if r["algorithm"].startswith("nvls/") else "latency"
            out.append(
                f"#   {r['size_bytes']:>12}: {r['algorithm']} {w['library_estimate_us']:.1f}"
                f"{' < ' + others if others else ''}; {r['time_us']:.1f} = {w['latency_us']:.1f} {fixed}{net}"
                f" + {w['bytes_us']:.1f} bytes"
            )
    return out


def scenario_lines(rows: list[dict]) -> list[str]:
    return [f"{row['name']:<16} {row['ranks']:>5} ranks  {row['description']}" for row in rows]


def _toml_value(value) -> str:
    """A default as a TOML file would spell it; None (no TOML value) as "unset"."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return f'"{value}"' if isinstance(value, str) else repr(value)


def scenario_key_lines(rows: list[dict]) -> list[str]:
    """`ddplab scenarios --keys`: every key a scenario file may set (sim/config.py)."""
    out = []
    width = max(len(r["key"]) for r in rows) + 2
    out.append(f"# every scenario key (sim/config.py); * = a file without base must set it, or use {BASE_HINT}")
    out.append(f"{'key':<{width}} {'unit':<8} {'default':<12} meaning")
    for r in rows:
        key = r["key"] + (" *" if r["must_set_without_base"] else "")
        out.append(f"{key:<{width}} {r['unit'] or '-':<8} {_toml_value(r['default']):<12} {r['meaning']}")
    return out


def model_lines(rows: list[dict]) -> list[str]:
    """`ddplab models`: each preset's shape, parameters and gradient bytes."""
    out = []
    cols = (
        ("model", 11, lambda r: r["model"]),
        ("layers", 6, lambda r: r["n_layer"]),
        ("d_model", 7, lambda r: r["n_embd"]),
        ("heads", 5, lambda r: r["n_head"]),
        ("context", 7, lambda r: r["block_size"]),
        ("params", 13, lambda r: f"{r['params']:,}"),
        ("grads fp32", 11, lambda r: fmt_bytes(r["grad_bytes_fp32"])),
        ("grads bf16", 11, lambda r: fmt_bytes(r["grad_bytes_bf16"])),
    )
    out.append(" ".join(f"{h:>{w}}" for h, w, _ in cols))
    for r in rows:
        out.append(" ".join(f"{f(r):>{w}}" for _, w, f in cols))
    return out


CP_LABELS = {"all_gather": "ag", "p2p": "ring", "a2a": "a2a"}  # plan's CP column, by training.cp_comm


def plan_lines(model: str, cluster: str, sets, finalists: int, found: dict) -> list[str]:
    """`ddplab plan`: the layouts that fit, fastest first (workflow/layouts.py), and the best as a command
    (its sequence length the one planned, not 0 for "the model's context": the command says what it runs)."""
    out = []
    rows, gpus, batch = found["layouts"], found["gpus"], found["global_batch"]
    fit, replayed = found["fitting"], min(found["fitting"], finalists)
    out.append(f"{model} on {gpus} GPUs of {cluster}, global batch {batch} x {found['seq_len']} tokens: "
          f"{fit} of {found['considered']} layouts fit; {replayed} replayed ({found['seconds']:.1f} s)")  # fmt: skip
    with_cp = any(r["cp"] > 1 for r in rows)  # a CP column only where a layout has one
    # The schedule column fits "interleaved v=4".
    head = ["tp", *(["cp     "] if with_cp else []), " pp", "  dp", "mb", "accum", f"{'schedule':<15}"]
    head += [f"{'recompute':<9}", f"{'mode':<6}", f"{'step':>9}", f"{'MFU':>6}", f"{'memory':>10}", "bubble"]
    out.append("  " + " ".join([*head, f"{'TP+CP' if with_cp else 'TP comm':>9}", f"{'DP exp.':>9}"]))
    for r in rows:
        sched = r["schedule"] + (f" v={r['virtual']}" if r["virtual"] > 1 else "")
        mode = r["mode"] + (f"/{r['shard']}" if r["mode"] == "hsdp" else "")  # its shard group's ranks
        cp = str(r["cp"]) + ("" if r["cp"] == 1 else f" {CP_LABELS[r['cp_comm']]}")
        cells = [f"{r['tp']:>2}", *([f"{cp:<7}"] if with_cp else []), f"{r['pp']:>3}", f"{r['dp']:>4}"]
        cells += [f"{r['micro_batch']:>2}", f"{r['grad_accum']:>5}", f"{sched:<15}", f"{r['recompute']:<9}"]
        cells += [f"{mode:<6}", f"{fmt_seconds(r['step_time_s']):>9}", f"{_pct(r['mfu']):>6}"]
        memory = f"{r['memory_gib']:>5.1f} GiB" + ("!" if r["tight"] else " ")
        cells += [memory, f"{_pct(r['bubble_fraction']):>6}", f"{_s(r['tp_comm_s']):>9}"]
        cells.append(f"{_s(r['dp_exposed_s']):>9}" + ("" if r["replayed"] else "  (estimate)"))
        out.append("  " + " ".join(cells))

    def simulate(row) -> str:  # the command that gives this layout
        unset = set(row.get("unset", ()))  # the user's keys this layout's mode refuses
        keys = [x for x in scenario_sets(model, sets, found["seq_len"]) if x.partition("=")[0] not in unset]
        keys += row["sets"]
        return f"ddplab simulate {cluster} --ranks {gpus} " + " ".join(f"--set {x}" for x in keys)

    out.append(f"  best: {simulate(rows[0])}")
    zb = "; ZB-H1's W half of each backward" if any(r["schedule"] == "zb-h1" for r in rows) else ""
    if any(r["cp"] > 1 for r in rows):
        zb += "; cp N ag: K and V all-gathered per block (Llama 3's), N ring: ring attention, N a2a: Ulysses"
        zb += " (sim/tp.py)"
        zb += "; MFU counts 6N + 12 L d s FLOPs a token (PaLM's, as Llama 3's paper: causal attention counted whole)"
    if found["tied_embeddings"] and any(r["pp"] > 1 for r in rows):
        zb += "; DP exp. with pp > 1: the tied embedding's allreduce between the first and last stages too (Megatron's)"
    if any(found["n_layer"] % (r["pp"] * r["virtual"]) for r in rows):  # sim/planner.py splits
        zb += "; where pp x v does not divide the layers, the embedding and loss count as layers in the split"
        zb += " (Megatron-Core's account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split)"
    if any(r["mode"] == "hsdp" for r in rows):
        zb += "; hsdp/S: shard groups of S data-parallel ranks in a node"
    if any(r["tp_overlap"] == "full" for r in rows):
        zb += "; tp > 1: TP's collectives under their matmuls, the transfers taking no SMs from them (sim/tp.py)"
    if any(r["tp_overlap"] == "wgrad" for r in rows):
        zb += "; tp > 1: input-gradient reductions under the weight-gradient matmuls (sim/tp.py)"
    out.append(f"  assumed: {found['assumed']}; sequence parallelism on whenever tp > 1; {_gpus(found)}{zb}")
    out += record_lines(found.get("record"))
    if any(r["tight"] for r in rows):
        counts = sorted({r["nccl_communicators"] for r in rows if r["tight"]})
        runs = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        out.append(f"  memory!: tight: less spare than NCCL's own buffers take, about {nccl_reserve_gib(1):.1f} GiB for"
                   f" each communicator (NVIDIA/nccl#864; these layouts run {runs}); neither they nor the allocator's"
                   " fragmentation are in the estimate, so such a layout may not run")  # fmt: skip
        roomy = next((r for r in rows if not r["tight"]), None)
        if rows[0]["tight"] and roomy is not None:
            out.append(f"  best with that room: {simulate(roomy)}")
    return out


def _gpus(found: dict) -> str:
    """What plan took the GPUs to be: identical, but for the cluster's named stragglers where the
    job has their ranks (sim/planner.py)."""
    named = found["stragglers"]["named"]
    dropped = found["stragglers"]["dropped"]
    unmodelled = f"; its {' and '.join(dropped)} left out (modelled by neither pass), unset in the commands"
    unmodelled = unmodelled if dropped else ""
    if not named:
        return f"identical GPUs{unmodelled}"
    if found["stragglers"]["applied"]:
        return (
            f"identical GPUs but the cluster's stragglers ({named}: rank:compute-time factor), where simulate puts"
            f" them{unmodelled}"
        )
    past = f"name ranks past {found['gpus']}, so neither this plan nor its commands have them"
    return f"identical GPUs: the cluster's stragglers ({named}) {past}{unmodelled}"


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _s(x) -> str:
    return "-" if x is None else fmt_seconds(x)
