"""Run a function in a forked child and get back the bytes it returns (the fork tests)."""

from __future__ import annotations

import os
import select
import signal
import traceback
from collections.abc import Callable


def in_child(action: Callable[[], bytes], *, timeout: float = 60.0) -> bytes:
    """Run ``action()`` in a forked child and return the bytes it sent (b"" on failure)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: send the bytes, exit without running pytest teardown
        try:
            os.write(write, action())
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], timeout)
    got = os.read(read, 1 << 16) if ready else b""
    os.close(read)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return got
