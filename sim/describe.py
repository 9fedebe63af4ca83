"""A scenario's description at the ranks it is run with: a preset says "1024 x H100 SXM (128 x 8)",
and a run of it at `--ranks 64` is 64 x H100 on 8 nodes, which is what its header must say."""

import re

# "1024 x", "16,384 x": the GPU count a description opens its cluster with.
_COUNT = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+) x ")
# What may follow it: "(128 x 8)", "(2,048 x 8)", "(one node)".
_NODES = re.compile(r"\((?:\d{1,3}(?:,\d{3})+|\d+) x \d+\)|\(one node\)")


def _number(n: int, like: str) -> str:
    return f"{n:,}" if "," in like else str(n)


def _nodes(ranks: int, gpus_per_node: int) -> int:
    return -(-ranks // gpus_per_node)


def _layout(ranks: int, gpus_per_node: int) -> str:
    nodes = _nodes(ranks, gpus_per_node)
    if nodes == 1:
        return "one node"
    return f"{nodes:,} x {gpus_per_node}" if ranks % gpus_per_node == 0 else f"{nodes:,} nodes"


def _rewrite(description: str, file_ranks: int, count, layout: str, suffix: str) -> str:
    """The count of ``file_ranks`` GPUs replaced by ``count(as written)`` and its "(nodes x per
    node)" by ``layout``; a description that names no count gets ``suffix``."""
    for m in _COUNT.finditer(description):
        if int(m.group(1).replace(",", "")) != file_ranks:
            continue
        head, tail = description[: m.start()], description[m.end() :]
        after = _NODES.search(tail)
        if after is not None and after.start() <= 40:  # its own "(nodes x per node)", not a later one
            tail = f"{tail[: after.start()]}({layout}){tail[after.end() :]}"
        return f"{head}{count(m.group(1))} x {tail}"
    return f"{description}; {suffix}"


def description_at(description: str, file_ranks: int, ranks: int, gpus_per_node: int) -> str:
    """``description`` rewritten for ``ranks`` where it names ``file_ranks`` GPUs: the count, and the
    nodes x GPUs-per-node after it. A description that does not name its count gets the run's
    ranks and nodes appended, so no header describes a cluster other than the one simulated."""
    if ranks == file_ranks or not description:
        return description
    layout = _layout(ranks, gpus_per_node)
    return _rewrite(
        description, file_ranks, lambda like: _number(ranks, like), layout, f"run at {ranks:,} ranks ({layout})"
    )


def description_over(description: str, file_ranks: int, counts: list[int], gpus_per_node: int) -> str:
    """A sweep's header: ``description`` (as written for ``file_ranks``) over every rank count."""
    lo, hi = min(counts), max(counts)
    if lo == hi:
        return description_at(description, file_ranks, lo, gpus_per_node)
    nodes = f"{_nodes(lo, gpus_per_node):,}-{_nodes(hi, gpus_per_node):,} nodes"
    return _rewrite(
        description,
        file_ranks,
        lambda like: f"{_number(lo, like)}-{_number(hi, like)}",
        nodes,
        f"run at {lo:,}-{hi:,} ranks ({nodes})",
    )
