"""How the front door reads sizes and counts and writes bytes, seconds and counts for people:
sim/units.py's parsers and formatters, the one home of each, offered here so that ddplab/
(which imports no sim/ module) and a notebook print numbers the same way; and the FLOP count
per token that every MFU printed rests on (sim/mfu.py)."""

from sim.mfu import FLOP_COUNT
from sim.units import fmt_bytes, fmt_count, fmt_seconds, parse_count, parse_int_list, parse_size, parse_sizes

__all__ = [
    "FLOP_COUNT",
    "fmt_bytes",
    "fmt_count",
    "fmt_seconds",
    "parse_count",
    "parse_int_list",
    "parse_size",
    "parse_sizes",
]
