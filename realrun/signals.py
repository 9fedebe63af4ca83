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
