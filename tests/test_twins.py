"""Facts realrun and sim (or calibrate) must agree on but cannot share code for (realrun never imports
sim, docs/architecture.md): each reading is held equal to the other here."""

import argparse

import pytest

from realrun import cli as realrun_cli
from realrun import precision as realrun_precision
from realrun import probe_collectives
from sim import collectives, config, precision, units


def test_vocabularies_match():
    from calibrate import kineto
    from realrun import profiling

    assert kineto.STEP_SPAN == profiling.STEP_SPAN  # calibrate reads what realrun annotates
    assert realrun_cli.OPS == collectives.OPS
    assert probe_collectives.PER_RANK == collectives.PER_RANK_OPS
    assert realrun_cli.COMM_HOOKS == config.COMM_HOOKS
    trained = tuple(p for p in precision.PRECISIONS if p not in precision.SIMULATED_ONLY)
    assert realrun_precision.PRECISIONS == trained
    assert realrun_cli.PRECISIONS == ("auto", *trained)


@pytest.mark.parametrize(
    "text",
    ["1M", "16M,1G", "1K:256M", "8:1G", "1.5K", "64KiB", "2GB", "1T", "1M,,16M", " 4M ", "4m"]
    + ["", "0", "-1M", "1X", "16M:1M", "M", "1M,abc", ":", "1M:", "1024T", "1025T", "0.5", "9" * 400],
)
def test_parse_sizes_reads_alike(text):
    """The same list from both, or an error from both."""
    try:
        expected = units.parse_sizes(text)
    except ValueError:
        with pytest.raises(argparse.ArgumentTypeError):
            realrun_cli.parse_sizes(text)
        return
    assert realrun_cli.parse_sizes(text) == expected
