"""The engine flags `ddplab sweep` and `ddplab plan` share (workflow/sweep_engines.py runs both)."""

# --dashboard alone: Dask's usual port, still on this machine only; 0.0.0.0:8787 serves everyone.
DASHBOARD = "127.0.0.1:8787"


def add_engine_arguments(p, *, local: str, workers_default: int | None, workers_help: str) -> None:
    """--engine, --workers, --scheduler, --dashboard; ``local``: what --engine local means here."""
    p.add_argument(
        "--engine",
        default="local",
        choices=["local", "dask"],
        help=f"local: {local}; dask: a Dask cluster (pip install 'ddplab[dask]')",
    )
    p.add_argument("--workers", type=int, default=workers_default, help=workers_help)
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --engine dask: a running cluster's scheduler (tcp://HOST:8786) instead of a LocalCluster",
    )
    p.add_argument(
        "--dashboard",
        nargs="?",
        const=DASHBOARD,
        metavar="HOST:PORT",
        help=f"with --engine dask and no --scheduler: the LocalCluster's dashboard address (alone: {DASHBOARD};"
        " without it a free port on 127.0.0.1: the dashboard asks no password, so not on every interface)",
    )
