"""Every field calibrate reads from a record, checked once where the records are read (issue 25, D8).

Corrupt probe records (a time of 0, a string, NaN, a list where a record goes) used to reach
numpy and SciPy, which answered with a traceback, "SVD did not converge in Linear Least
Squares" or a ZeroDivisionError. realrun/SCHEMA.md says what each field holds; a record
that says otherwise is one line naming the file, the line, the field and the value.
"""

import math

DAY_S = 86400.0

# What a number must be: (test, what it says when the test fails).
_POSITIVE = (lambda x: x > 0, "a number > 0")
# A probe times one step, collective or optimizer call: never a day (1e308 overflowed the fits).
_SECONDS = (lambda x: 0 < x <= DAY_S, "seconds > 0 and <= 86400")
_SECONDS_OR_0 = (lambda x: 0 <= x <= DAY_S, "seconds >= 0 and <= 86400")
_FINITE = (lambda x: True, "a number")
_FRACTION = (lambda x: 0 <= x <= 1, "a fraction 0 to 1")
_COUNT = (lambda x: x >= 1, "an integer >= 1")
_INDEX = (lambda x: x >= 0, "an integer >= 0")

# {record type: {field: (integer?, check)}}: the fields calibrate/ reads. Train records
# (validate, stragglers) are read by their own code, which tolerates their zeros.
FIELDS = {
    "meta": {"rank": (True, _INDEX), "world_size": (True, _COUNT)},
    "collective": {"size_bytes": (True, _COUNT), "ranks": (True, _COUNT), "time_max_s": (False, _SECONDS)},
    "compute": {
        "micro_batch": (True, _COUNT),
        "seq_len": (True, _COUNT),
        "tokens": (True, _COUNT),
        "forward_s": (False, _SECONDS),
        "backward_s": (False, _SECONDS),
    },
    "optimizer": {"optimizer_s": (False, _SECONDS_OR_0)},
    "link": {"gbit_s": (False, _POSITIVE)},
    "rtt": {"p50_us": (False, _POSITIVE)},
    "grad_ready": {"ready_fraction": (False, _FRACTION)},
    "bucket_ready": {"bucket": (True, _INDEX), "bytes": (True, _COUNT), "ready_fraction": (False, _FRACTION)},
    "overlap": {"gamma": (False, _FINITE), "iters_with_comm": (True, _INDEX)},
    "tp_block": {
        "tp": (True, _COUNT),
        "blocks": (True, _COUNT),
        "micro_batch": (True, _COUNT),
        "seq_len": (True, _COUNT),
        "tokens": (True, _COUNT),
        "model_forward_s": (False, _SECONDS),
        "model_backward_s": (False, _SECONDS),
        "tp_model_forward_s": (False, _SECONDS),
        "tp_model_backward_s": (False, _SECONDS),
    },
    "p2p": {"micro_batch": (True, _COUNT), "size_bytes": (True, _COUNT), "time_s": (False, _SECONDS)},
    "pp_schedule": {
        "pp": (True, _COUNT),
        "stage": (True, _INDEX),
        "micro_batches": (True, _COUNT),
        "micro_batch": (True, _COUNT),
        "tokens": (True, _COUNT),
        "pipeline_s": (False, _SECONDS),
        "forward_s": (False, _SECONDS),
        "backward_s": (False, _SECONDS),
    },
    "compute_memory": {"tokens": (True, _COUNT), "peak_allocated_bytes": (False, _POSITIVE)},
    "ddp_memory": {"tokens": (True, _COUNT), "peak_allocated_bytes": (False, _POSITIVE)},
}
# Fields a record may leave out or set to null (realrun/SCHEMA.md: measured only when they can be).
OPTIONAL = {("overlap", "gamma"), ("overlap", "iters_with_comm")}
OPTIONAL |= {(k, "peak_allocated_bytes") for k in ("compute_memory", "ddp_memory")}


def check_record(record, where: str) -> None:
    """Raise ValueError ``"{where}: <field>: expected ..., got ..."`` for a record calibrate
    could not use; ``where`` is ``file:line``."""
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        raise ValueError(f'{where}: not a record (a JSON object with a "type"), got {str(record)[:60]}')
    for name, (integer, (test, what)) in FIELDS.get(record["type"], {}).items():
        if name not in record or record[name] is None:
            if (record["type"], name) in OPTIONAL:
                continue
            raise ValueError(f"{where}: {record['type']} record without {name}")
        value = record[name]
        kind = int if integer else (int, float)
        ok = isinstance(value, kind) and not isinstance(value, bool)
        ok = ok and (integer or math.isfinite(value)) and test(value)
        if not ok:
            raise ValueError(f"{where}: {record['type']}.{name}: expected {what}, got {value!r:.40}")
