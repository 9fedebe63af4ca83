"""A scenario's description at the ranks it is run with: a preset says "1024 x H100 SXM (128 x 8)",
and a run of it at `--ranks 64` is 64 x H100 on 8 nodes, which is what its header must say."""

import re

# "1024 x", "16,384 x": the GPU count a description opens its cluster with.
_COUNT = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+) x ")
# What may follow it: "(128 x 8)", "(2,048 x 8)", "(one node)".
_NODES = re.compile(r"\((?:\d{1,3}(?:,\d{3})+|\d+) x \d+\)|\(one node\)")


def _number(n: int, like: str) -> str:
    return f"{n:,}" if "," in like else str(n)


def description_at(description: str, file_ranks: int, ranks: int, gpus_per_node: int) -> str:
    """``description`` rewritten for ``ranks`` where it names ``file_ranks`` GPUs: the count, and the
    nodes x GPUs-per-node after it. A description that does not name its count gets the run's
    ranks and nodes appended, so no header describes a cluster other than the one simulated."""
    if ranks == file_ranks or not description:
        return description
    nodes = -(-ranks // gpus_per_node)
    if nodes == 1:
        layout = "one node"
    else:
        layout = f"{nodes:,} x {gpus_per_node}" if ranks % gpus_per_node == 0 else f"{nodes:,} nodes"
    for m in _COUNT.finditer(description):
        if int(m.group(1).replace(",", "")) != file_ranks:
            continue
        head, tail = description[: m.start()], description[m.end() :]
        after = _NODES.search(tail)
        if after is not None and after.start() <= 40:  # its own "(nodes x per node)", not a later one
            tail = f"{tail[: after.start()]}({layout}){tail[after.end() :]}"
        return f"{head}{_number(ranks, m.group(1))} x {tail}"
    return f"{description}; run at {ranks:,} ranks ({layout})"
