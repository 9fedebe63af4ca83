"""`ddplab probe` on each rank: collectives, link, compute and overlap, or the seed's
64 MB health check (--quick). Every rank writes its records; rank 0 prints.

The seed's step 4, grown into nccl-tests' method: measure before trusting a
cluster, and compare the collective's bus bandwidth with the raw link rate.
"""

import gc
import os
import statistics
import sys
from pathlib import Path

import torch.distributed as dist

from realrun.dist import DistEnv, init
from realrun.lifeline import let_go_reason
from realrun.model import preset_config
from realrun.parallel import layout_problem
from realrun.probe_collectives import quick, sweep
from realrun.probe_compute import bucket_profile, compute, model_for, overlap
from realrun.probe_link import LINK_REPEATS, PING_BYTES, RTT_PINGS, probe_links
from realrun.probe_pp import PP_MICRO_BATCHES, pp_schedules
from realrun.probe_tp import tp_block
from realrun.recipe import Recipe
from realrun.records import RecordWriter, one_line, rank_file
from realrun.sched import realtime
from scenarios import load_models

# What one rank cannot measure: each of these needs a peer at the other end.
NEEDS_A_PEER = {
    "collectives": "a collective on one rank moves no data",
    "link": "the link probe times TCP between pairs of ranks",
    "overlap": "gamma needs a collective in flight with a peer",
}


def run(args) -> int:
    rank = os.environ.get("RANK", "?")
    try:
        cfg = preset_config(args.model)
        args.seq_len = args.seq_len or cfg.block_size
        if args.seq_len > cfg.block_size:
            raise ValueError(f"--seq-len {args.seq_len} exceeds {args.model}'s context {cfg.block_size}")
        env = init(args.backend, args.timeout_s, args.device)
    except ValueError as e:
        _say(f"realrun probe: error: {e}", sys.stderr)
        return 2
    except (RuntimeError, OSError) as e:  # e.g. gloo: "Unable to find address for: eth9"
        where = ", ".join(
            f"{k}={os.environ.get(k)}" for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MASTER_ADDR")
        )
        _say(f"realrun probe: rank {rank}: joining the process group failed ({where}): {one_line(e)}", sys.stderr)
        return 1
    recipe = Recipe.for_run(args, env.device)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    writer = RecordWriter(
        rank_file(args.out, "probe", env.rank),
        verb="probe",
        config=config,
        dist_info=env.info(),
        run_info=recipe.meta(),
    )
    stage = ["start"]  # what was running, for the error line
    try:
        summary = _quick(env, writer, stage) if args.quick else _full(env, args, writer, stage, recipe)
    except (RuntimeError, OSError, ValueError) as e:  # torch's DistBackendError is a RuntimeError
        reason = f"{stage[0]}: {one_line(e)}"
        stopped = let_go_reason()  # a peer that answered the launcher's stop is the effect, not the cause
        reason = f"{stopped} (then {reason})" if stopped else reason
        writer.abandon(reason)
        _say(f"realrun probe: rank {env.rank}: {reason}", sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    writer.close(**summary)
    # The bucket profile's DDP copy sits in a reference cycle (its hooks close over it);
    # collected at interpreter exit, after the group is gone, its reducer aborted the
    # process ("terminate called without an active exception", seen over netlab).
    gc.collect()
    dist.barrier()  # leave together: no rank tears down its sockets under a peer still using them
    dist.destroy_process_group()
    return 0


def _quick(env: DistEnv, writer, stage) -> dict:
    stage[0] = "64 MB allreduce health check"
    q = quick(env, writer)
    _say(
        f"rank {env.rank}: allreduce 64MB took {q['allreduce_64mb_s'] * 1e3:.1f} ms -> effective bandwidth"
        f" {q['algbw_gb_s']:.3f} GB/s (busbw {q['busbw_gb_s']:.3f} GB/s)"
    )
    return q


def _say(line: str, stream=None) -> None:
    """One line in one write: every rank shares torchrun's stdout and stderr, and
    print()'s separate write of the newline lets another rank's line land in between."""
    stream = stream or sys.stdout
    try:
        stream.write(line + "\n")
        stream.flush()
    except OSError:  # the launcher that read it was killed (a broken pipe): the records matter, not this
        pass


def _full(env: DistEnv, args, writer, stage, recipe: Recipe) -> dict:
    summary, lead = {"parts": args.parts}, env.rank == 0
    skipped = summary["skipped"] = {}
    if env.world_size == 1:
        for part in (p for p in NEEDS_A_PEER if p in args.parts):
            skipped[part] = "world size 1"
            if lead:
                print(f"# {part}: skipped: world size 1 ({NEEDS_A_PEER[part]}; run with --nproc 2 or more)", flush=True)
    busbw = {}
    if "collectives" in args.parts and "collectives" not in skipped:
        with realtime(args.sched == "fifo") as sched:
            if lead:
                print(f"# scheduling of the collective sweep: {sched}", flush=True)
            for op in args.ops:
                stage[0] = f"{op} sweep"
                rows = sweep(op, args.sizes, env, iters=args.iters, warmup=args.warmup, writer=writer)
                if rows:
                    busbw[op] = (rows[-1].size_bytes, rows[-1].busbw_gb_s)
        summary["busbw_gb_s_at_max_size"] = {op: bw for op, (_, bw) in busbw.items()}
        summary["collective_sched"] = sched
    if "link" in args.parts and "link" not in skipped:
        stage[0] = "link probe (TCP between rank pairs)"
        links = probe_links(env, args.link_bytes[0], args.timeout_s, writer)
        if lead and links:
            summary.update(_print_links(links, args.link_bytes[0], busbw.get("allreduce")))
    mb = max(args.micro_batches)
    if "compute" in args.parts:
        stage[0] = f"compute probe ({args.model})"
        means = compute(env, args, writer, recipe)
        stage[0] = f"bucket-ready profile (DDP {args.model})"
        buckets = bucket_profile(env, args, mb, writer, recipe)
        summary["buckets"] = len(buckets)
        if lead:
            _print_compute(args, means, recipe)
            _print_buckets(buckets)
    if "tp" in args.parts and env.world_size > 1:
        tp_refused = layout_problem(env.world_size, 1, None, load_models()[args.model])
        if tp_refused is None:
            stage[0] = f"tensor-parallel block probe ({args.model}, tp {env.world_size})"
            tp_rows = tp_block(env, args, writer, model_for(args.model, env, args.seed, recipe))
            if lead:
                _print_tp(env.world_size, tp_rows, args.seq_len)
        elif lead:
            print(f"# tensor-parallel block: skipped: {tp_refused}", flush=True)
    if "pp" in args.parts and env.world_size > 1:
        pp_refused = layout_problem(1, env.world_size, None, load_models()[args.model])
        if pp_refused is None:
            stage[0] = f"pipeline schedules ({args.model}, pp {env.world_size})"
            pp_steps = pp_schedules(env, args, writer)
            if lead:
                _print_pp(env.world_size, pp_steps, args.micro_batches)
        elif lead:
            print(f"# pipeline schedules: skipped: {pp_refused}", flush=True)
    if "overlap" in args.parts and "overlap" not in skipped:
        stage[0] = "overlap probe (compute under a concurrent allreduce)"
        row = overlap(env, args, mb, writer, recipe)
        gammas = [None] * env.world_size
        dist.all_gather_object(gammas, row["gamma"])
        summary["gamma"] = row["gamma"]
        if lead:
            _print_overlap(row, gammas)
    return summary


def _print_links(links, nbytes: int, allreduce) -> dict:
    print(
        f"# link: raw TCP from rank 0 at {links[0].address}, {nbytes} B each way (median of"
        f" {LINK_REPEATS}), RTT = median of {RTT_PINGS} pings of {PING_BYTES} B"
    )
    for r in links:
        print(
            f"#   0 -> {r.peer}: {r.to_peer_gbit_s:8.3f} Gbit/s   {r.peer} -> 0:"
            f" {r.from_peer_gbit_s:8.3f} Gbit/s   RTT p50 {r.rtt_p50_us:8.1f} us"
        )
    rate = min(min(r.to_peer_gbit_s, r.from_peer_gbit_s) for r in links)  # a ring runs at its slowest link
    out = {"link_gbit_s": rate, "rtt_p50_us": max(r.rtt_p50_us for r in links)}
    if allreduce:
        size, bw = allreduce
        # busbw is GB/s (1e9 B/s) on each rank's link; the link is Gbit/s: x 8 to compare.
        out["stack_efficiency"] = bw * 8 / rate
        print(
            f"# collective stack efficiency: allreduce busbw {bw:.3f} GB/s at {size} B = {bw * 8:.3f} Gbit/s"
            f" = {out['stack_efficiency']:.2f} x the slowest link's {rate:.3f} Gbit/s"
        )
    if links[0].address.startswith("127."):
        print("#   (loopback: no wire; both ends are CPU copies, so the ratio says little here)")
    print("#", flush=True)
    return out


def _print_compute(args, means, recipe: Recipe) -> None:
    compiled = "compiled (nn.Module.compile)" if recipe.compile else "eager"
    print(f"# compute: {args.model}, seq_len {args.seq_len}, precision {recipe.precision.name}, {compiled},")
    steps = f"mean of {args.iters} steps per size after {args.warmup} warm-up, sizes in turn"
    print(f"#   training's path (DDP over this rank alone), rank 0, {steps};")
    print("#   peak = most bytes held by tensors in those steps, optimizer state included ('-': CPU)")
    print(
        f"# {'micro_batch':>11} {'tokens':>8} {'forward(ms)':>11} {'backward(ms)':>12} {'tokens/s':>10}"
        f" {'peak(GiB)':>9}"
    )
    for b in args.micro_batches:
        fwd, bwd = means["forward_s"][b], means["backward_s"][b]
        tokens, peak = b * args.seq_len, means["peak_allocated_bytes"][b]
        shown = "-" if peak is None else f"{peak / 2**30:.2f}"
        print(f"  {b:>11} {tokens:>8} {fwd * 1e3:>11.2f} {bwd * 1e3:>12.2f} {tokens / (fwd + bwd):>10.0f} {shown:>9}")
    kind = "fused" if recipe.fused else "for-loop"
    print(
        f"# optimizer: AdamW ({kind}) over {means['params']:,} parameters, with the rest of the step outside"
        f" forward and backward: {means['optimizer_s'] * 1e3:.2f} ms"
    )
    casts = ", ".join(f"{hook} {s * 1e3:.2f} ms" for hook, s in means["hook_cast_s"].items())
    print(f"# comm hook casts over all gradients, beyond the plain hook's divide (a step's worth): {casts}")
    print("#", flush=True)


def _print_tp(tp: int, rows: dict, seq_len: int) -> None:
    print(f"# tensor-parallel model (realrun/probe_tp.py), tp {tp}, rank 0, medians; send: in-step, half a round trip")
    print("# micro_batch   tokens fwd(ms) bwd(ms) tp_fwd(ms) tp_bwd(ms) send(us)")
    for b, r in rows.items():
        send = f"{r['p2p_s'] * 1e6:8.0f}" if r["p2p_s"] is not None else "       -"
        print(
            f"{b:13d} {b * seq_len:8d} {r['mf'] * 1e3:7.2f} {r['mb'] * 1e3:7.2f} {r['sf'] * 1e3:10.2f}"
            f" {r['sb'] * 1e3:10.2f} {send}"
        )
    print("#", flush=True)


def _print_pp(pp: int, steps: dict, micro_batches) -> None:
    print(
        f"# pipeline schedules (realrun/probe_pp.py), pp {pp}, {PP_MICRO_BATCHES} micro-batches a step, rank 0's median"
    )
    print("# micro_batch " + " ".join(f"{k + '(ms)':>15}" for k in steps))
    for b in micro_batches:
        print(f"{b:13d} " + " ".join(f"{v[b] * 1e3:15.2f}" for v in steps.values()))
    print("#", flush=True)


def _print_buckets(buckets) -> None:
    b0 = buckets[0]
    print(
        f"# buckets: DDP step {b0['step'] + 1} (rebuilt in ready order), micro-batch {b0['micro_batch']},"
        f" rank 0: backward compute {b0['backward_compute_s'] * 1e3:.2f} ms"
        f" ({b0['backward_s'] * 1e3:.2f} ms with DDP's wait for its collectives)"
    )
    print(f"# {'bucket':>6} {'bytes':>12} {'params':>6} {'ready(ms)':>9} {'ready(frac)':>11} {'launch(ms)':>10}")
    for b in buckets:
        print(
            f"  {b['bucket']:>6} {b['bytes']:>12} {len(b['params']):>6} {b['ready_s'] * 1e3:>9.2f}"
            f" {b['ready_fraction']:>11.3f} {b['launch_s'] * 1e3:>10.2f}"
        )
    print("#", flush=True)


def _print_overlap(row, gammas) -> None:
    with_comm = row["compute_with_comm_s"]
    if with_comm is None:
        print("# overlap: the allreduces ended within one compute iteration; no gamma (raise --iters)")
        return
    per_rank = ", ".join("-" if g is None else f"{g:.2f}" for g in gammas)
    known = [g for g in gammas if g is not None]
    print(
        f"# overlap: forward+backward at micro-batch {row['micro_batch']}"
        f" alone {row['compute_alone_s'] * 1e3:.2f} ms, under {row['comm_bytes'] >> 20} MiB allreduces"
        f" {with_comm * 1e3:.2f} ms ({row['iters_with_comm']} iterations)"
    )
    print(
        f"#   gamma (compute slowdown under communication) {row['gamma']:.3f} on rank 0;"
        f" per rank: {per_rank}; mean {statistics.fmean(known):.3f}",
        flush=True,
    )
