"""Writes calibrate/public_record.json: the public table's step rows as the current model predicts
them, each with its regime (calibrate/record.py), for `simulate` to print beside a step time.
`make record` runs it after a change to the model; tests/test_validation_public.py fails until
it has.

    .venv/bin/python -m workflow.public_record
"""

from calibrate.public import public_table
from calibrate.record import RECORD_PATH, record_rows
from output.jsonfile import write_json_atomic

NOTE = (
    "Written by `make record` (workflow/public_record.py) from `ddplab validate --public`: the step"
    " rows, step_error = predicted step / measured step - 1. Do not edit; tests/test_validation_public.py"
    " checks it against a fresh evaluation."
)


def main() -> None:
    rows = record_rows(public_table())
    write_json_atomic(RECORD_PATH, {"schema": "ddplab-public-record", "note": NOTE, "rows": rows})
    print(f"{RECORD_PATH.relative_to(RECORD_PATH.parents[1])}: {len(rows)} step rows")


if __name__ == "__main__":
    main()
