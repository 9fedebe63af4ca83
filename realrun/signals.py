"""SIGTERM handled as Ctrl-C for the duration of a command or a launch, so that what it started
or is writing is cleaned up (torchrun's ranks stopped, a lab taken down, pool workers killed, a
temporary removed) and it ends in the one line printed for KeyboardInterrupt, where SIGTERM's
default (a CI timeout, `kill`) would end it mid-way."""

import signal
import threading
from contextlib import contextmanager


def _raise(signum, frame):
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_ctrl_c():
    """The previous handler comes back afterwards (a command run inside another program, the
    tests, leaves it as it was). Off the main thread Python cannot set handlers (and only the
    main thread receives signals): unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def unwinding_an_interrupt(e: BaseException) -> bool:
    """Whether ``e`` was raised while a Ctrl-C (or SIGTERM, above) unwound: a SIGTERM landing
    after zipfile.open(..., "w") marked its handle open but before numpy.savez's ``with`` entered
    it leaves the handle unclosed, and ZipFile's close then raises ValueError("... open writing
    handle"), which is the interrupt's doing, not an error in the input (exit 130, not 2; once in
    tests/test_reliability_procs.py's d17 test under a loaded make test)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__context__
    return False
