"""The worker process of :class:`gaussdp.sampling.background.NoiseStream`.

Run as ``python -m gaussdp.sampling._worker FD DIM SIGMA2 [fused] [torch]``: ``FD`` is
an inherited file of ``2 * DIM`` int64 slots, mapped shared with the caller; with
``fused`` the sampler draws its blocks with the compiled kernel where numba is installed
(:func:`gaussdp.sampling.vectorized._use_fused_kernels`), and otherwise, with ``torch``,
computes its float brackets with torch's vectorised log and exp
(:func:`gaussdp.sampling.vectorized._use_torch_kernels`); the same law, less CPU. Each request on
standard input is one slot byte followed by a 32-byte ChaCha20 key; the worker
writes ``discrete_gaussian(SIGMA2, DIM, rng=ChaCha20Random(key))`` into that slot
and answers one byte, 0x01, on standard output. End of input ends the worker.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
from fractions import Fraction

import numpy as np

from gaussdp.random import ChaCha20Random
from gaussdp.sampling.background import REQUEST_BYTES
from gaussdp.sampling.vectorized import (
    _discrete_gaussian_into,
    _use_fused_kernels,
    _use_torch_kernels,
)


def main(argv: list[str]) -> int:
    fd, dim, sigma2 = int(argv[0]), int(argv[1]), Fraction(argv[2])
    # Ctrl-C in the caller's terminal reaches this process too; the caller decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    options = argv[3:]
    # Without numba or torch: numpy's kernels, the same law. With the compiled kernel,
    # torch's log and exp would not be used: torch is not imported (≈ 3 s of CPU).
    if not ("fused" in options and _use_fused_kernels()) and "torch" in options:
        _use_torch_kernels()
    shared = mmap.mmap(fd, 2 * dim * 8)
    slots = np.frombuffer(shared, dtype=np.int64).reshape(2, dim)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while True:
        request = requests.read(REQUEST_BYTES)
        if len(request) < REQUEST_BYTES:
            return 0
        slot, key = request[0], request[1:]
        # written in place: the same values as discrete_gaussian(SIGMA2, DIM, rng=...)
        _discrete_gaussian_into(sigma2, slots[slot], ChaCha20Random(key))
        try:
            replies.write(b"\x01")
            replies.flush()
        except BrokenPipeError:
            # The caller closed the stream while this (prefetched) vector was drawn: a
            # normal end. Standard output goes to /dev/null so the flush at exit is quiet.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
