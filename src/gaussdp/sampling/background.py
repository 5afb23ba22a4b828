r"""A stream of discrete Gaussian noise vectors, drawn one release ahead in a worker process.

DP-SGD and federated aggregation add a fresh N_Z(0, σ²)^d vector to every release,
and for a model of 10⁵ parameters the exact sampler needs a few milliseconds per
vector — as long as the gradient step itself. The noise does not depend on the
data, so it can be drawn while the caller computes the next gradients. A thread
does this badly: the sampler's Python glue and the training loop's contend for the
GIL (measured on a 784-128-10 MLP: 6.2–7.0 ms per secure step with a prefetching
thread, 6.5–7.3 ms drawing in place, 3.5–3.9 ms with this worker process). So
:class:`NoiseStream` runs the sampler in a separate process that writes each
vector into memory shared with the caller.

Determinism and security. Vector k is
``discrete_gaussian(sigma2, d, rng=ChaCha20Random(key_k))`` where ``key_k`` is
32 bytes read from the caller's ``rng`` in order, in the caller's process (so a
seeded :class:`~gaussdp.random.ChaCha20Random` gives the same vectors with or
without the worker, and the default operating-system CSPRNG keys every vector
freshly). The key reaches the worker through a pipe private to the two processes.

Fork. A forked copy of the caller never uses the parent's worker: at the fork
(an ``os.register_at_fork`` hook) it lets go of the parent's pipes and shared
memory without reading them, so that the parent's :meth:`NoiseStream.close` is
not kept waiting by a child that never draws (a DataLoader worker), and on its
first call it starts a worker of its own. When ``rng`` is not reproducible, the key read
for the parent's next vector is dropped and the child reads its keys from a
stream keyed by 32 bytes of ``rng`` and 32 fresh operating-system bytes
(SHA-256 of both), so the child's vectors are independent of
the parent's and of its siblings', even under a deterministic user-defined
source; under a seeded
:class:`~gaussdp.random.ChaCha20Random` the child continues the stream from that
key, as a seed means (the same vectors in both processes: seed each process).

Kernels. For vectors of at least :data:`FAST_KERNELS_MIN_DIM` coordinates the worker
draws with the compiled kernel of :mod:`gaussdp.sampling._fused` where numba is
installed (docs/sampler-exactness.md §2.5); otherwise, when the caller has imported
torch (DP-SGD, federated aggregation), it computes the sampler's float brackets with
torch's vectorised log and exp on one thread (§1, assumption 3). Either way: the same
law and, for a seed, the same vectors as numpy's kernels drawn in place (§8), at less
CPU per vector.

Failure. Off POSIX systems (no file-descriptor passing) the vectors are drawn in
the caller's process. If the worker cannot start or stops, the vector is drawn in
the caller's process with the same key — the same values, only slower — and a
:class:`RuntimeWarning` says so once.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import subprocess
import sys
import tempfile
import warnings
import weakref
from fractions import Fraction
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gaussdp._validation import check_fraction, check_int
from gaussdp.errors import invalid
from gaussdp.random import ChaCha20Random, RandomSource, _DerivedStream, check_rng
from gaussdp.sampling.vectorized import _INT64_SCALE_MAX, discrete_gaussian

__all__ = ["NoiseStream"]

IntArray = npt.NDArray[np.int64]

_KEY_BYTES = 32
#: A request to the worker: the slot byte, then the key (see gaussdp.sampling._worker).
REQUEST_BYTES = 1 + _KEY_BYTES
_OK = b"\x01"
#: The worker draws with numba's compiled kernel (docs/sampler-exactness.md §2.5) or,
#: without numba, computes the sampler's log and exp with torch (§1) when the caller has
#: imported torch (DP-SGD, federated aggregation), for vectors of at least this many
#: coordinates: importing numba and loading its cached kernel costs the worker ≈ 0.9 s
#: of CPU once (torch: ≈ 2.4 s; numba's first run on a machine compiles, ≈ 5 s, and
#: caches), and each saves ≈ 10-30 ns per coordinate on every vector.
FAST_KERNELS_MIN_DIM = 2**15
# Vectors are int64, which discrete_gaussian guarantees up to this sigma2.
_INT64_SIGMA2_MAX = _INT64_SCALE_MAX**2


class NoiseStream:
    r"""Exact N_Z(0, sigma2)^dim vectors, each keyed by 32 bytes from ``rng``, drawn one ahead.

    Parameters
    ----------
    sigma2 : int, Fraction, float or str
        σ² of the discrete Gaussian, an exact positive rational at most 2⁸⁰.
    dim : int
        Coordinates per vector, ≥ 1.
    rng : RandomSource, optional
        Source of the per-vector keys; ``None`` is the operating system's CSPRNG.
    background : bool, default True
        Draw the next vector in a worker process while the caller works (POSIX
        only). ``False`` draws each vector when it is asked for (same values).

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> with NoiseStream(100, 4, rng=ChaCha20Random(0), background=False) as stream:
    ...     first = stream.next()
    >>> first.shape, first.dtype
    ((4,), dtype('int64'))
    """

    def __init__(
        self,
        sigma2: object,
        dim: int,
        *,
        rng: RandomSource | None = None,
        background: bool = True,
    ) -> None:
        exact = check_fraction("sigma2", sigma2)
        if exact > _INT64_SIGMA2_MAX:
            raise ValueError(invalid("sigma2", "at most 2**80 (int64 noise)", sigma2))
        self._sigma2 = exact
        self._dim = check_int("dim", dim, minimum=1)
        self._rng = check_rng(rng)
        self._worker: _Worker | None = None
        self._pending: bytes | None = None  # key of the vector the worker is drawing
        self._pid = os.getpid()
        self._restart = False  # a forked copy that let go of the parent's worker
        if background and os.name == "posix":  # elsewhere: drawn in place, same values
            self._start_worker()

    def _start_worker(self) -> None:
        fast = self._dim >= FAST_KERNELS_MIN_DIM
        self._worker = _Worker.start(
            self._sigma2, self._dim, fused=fast, torch=fast and "torch" in sys.modules
        )
        if self._worker is None:
            _warn_inline("could not be started")
            return
        _WITH_WORKER.add(self)
        if self._pending is None:
            self._submit()
        elif not self._worker.submit(self._pending):
            self._stop_worker()

    def _leave_parent_worker(self) -> None:
        """In a forked copy, at the fork: let go of the parent's worker (restarted on use)."""
        if self._worker is not None:
            self._worker.abandon()
            self._worker = None
            self._restart = True

    def _after_fork(self) -> None:
        """In a forked copy, at its first call: (unless seeded) drop the pending key; restart."""
        self._pid = os.getpid()
        if not self._rng._reproducible:
            self._pending = None  # read before the fork: the parent's vector
            # A deterministic user source is in the same state in every sibling.
            self._rng = _DerivedStream(self._rng, forked=True)
        self._leave_parent_worker()  # where no at-fork hook ran (a fork outside Python)
        if self._restart:
            self._restart = False
            self._start_worker()

    @property
    def sigma2(self) -> Fraction:
        """σ² of the discrete Gaussian."""
        return self._sigma2

    @property
    def dim(self) -> int:
        """Coordinates per vector."""
        return self._dim

    @property
    def background(self) -> bool:
        """Whether a worker process is drawing the vectors."""
        return self._worker is not None

    def _submit(self) -> None:
        assert self._worker is not None
        self._pending = self._rng.random_bytes(_KEY_BYTES)
        if not self._worker.submit(self._pending):
            self._stop_worker()

    def _stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
            _warn_inline("stopped")

    def next(self) -> IntArray:
        """The next noise vector (int64, shape ``(dim,)``), an array of the caller's own.

        With a worker the vector is copied out of the shared memory the worker
        writes into (8 bytes per coordinate, 0.8 MB per 10⁵): a view of it, kept
        across a fork, once showed the forked child the parent's later noise.
        """
        vector = self._next()
        return vector if vector.flags.owndata else vector.copy()

    def _next(self) -> IntArray:
        """:meth:`next` without the copy: with a worker, a read-only view of shared memory.

        The view is rewritten by the call after next (and, in a forked child, by the
        parent's worker): only for a caller that uses it at once and keeps no reference.
        """
        if os.getpid() != self._pid:
            self._after_fork()
        if self._worker is None:
            key = self._pending or self._rng.random_bytes(_KEY_BYTES)
            self._pending = None
            return self._draw(key)
        pending = self._pending
        assert pending is not None
        vector = self._worker.result()
        if vector is None:  # the worker died: same key, drawn here
            self._stop_worker()
            self._pending = None
            return self._draw(pending)
        self._submit()
        return vector

    def _draw(self, key: bytes) -> IntArray:
        noise = discrete_gaussian(self._sigma2, self._dim, rng=ChaCha20Random(key))
        return noise.astype(np.int64, copy=False)

    def close(self) -> None:
        """Stop the worker process (the stream then draws in place)."""
        self._restart = False
        if self._worker is not None:
            if os.getpid() != self._pid:
                self._worker.abandon()
            else:
                self._worker.close()
            self._worker = None

    def __enter__(self) -> NoiseStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Streams that started a worker process in this process (see :func:`_after_fork_in_child`).
_WITH_WORKER: weakref.WeakSet[NoiseStream] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: let go of the parent's noise workers at once.

    The child holds copies of each worker's pipes. A child that never drew from its
    copy of a stream (a DataLoader worker) kept them until it exited, so the worker
    did not see end of input when the parent closed it, and the parent's ``close()``
    waited 5 s before killing it. A stream the child uses starts a worker of its own.
    """
    streams = list(_WITH_WORKER)
    _WITH_WORKER.clear()
    for stream in streams:
        stream._leave_parent_worker()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _warn_inline(what: str) -> None:
    warnings.warn(
        f"gaussdp's background noise process {what}; noise is drawn in this process "
        "instead (same values, slower steps)",
        RuntimeWarning,
        stacklevel=4,
    )


class _Worker:
    """The worker process, its pipes and the two shared slots it writes vectors into."""

    def __init__(self, proc: subprocess.Popen[bytes], shared: mmap.mmap, dim: int) -> None:
        self._proc = proc
        self._shared = shared
        self._slots = np.frombuffer(shared, dtype=np.int64).reshape(2, dim)
        self._slot = 0
        self._finalizer = weakref.finalize(self, _shutdown, proc, shared, os.getpid())

    @classmethod
    def start(
        cls, sigma2: Fraction, dim: int, *, fused: bool = False, torch: bool = False
    ) -> _Worker | None:
        """Start a worker, or return None where it cannot run (no POSIX fd passing).

        ``fused``: the worker uses the compiled kernel where numba is installed;
        ``torch``: otherwise torch's log and exp kernels (see the module's
        :data:`FAST_KERNELS_MIN_DIM`).
        """
        size = 2 * dim * 8
        try:
            fd = _shared_fd()
            try:
                os.ftruncate(fd, size)
                shared = mmap.mmap(fd, size)
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "gaussdp.sampling._worker",
                        str(fd),
                        str(dim),
                        f"{sigma2.numerator}/{sigma2.denominator}",
                        *(["fused"] if fused else []),
                        *(["torch"] if torch else []),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(fd,),
                    env=_worker_environment(),
                )
            finally:
                os.close(fd)  # the mapping and the worker hold their own references
        except (OSError, ValueError):
            return None
        return cls(proc, shared, dim)

    def submit(self, key: bytes) -> bool:
        """Ask for the next vector in the other slot; False if the worker is gone."""
        assert self._proc.stdin is not None
        self._slot ^= 1
        request = bytes([self._slot]) + key
        try:
            # One write(2) on the pipe's descriptor (nothing is ever buffered in the file
            # object): a pipe takes up to PIPE_BUF (≥ 512) bytes at once, whole.
            written = os.write(self._proc.stdin.fileno(), request)
        except (OSError, ValueError):  # ValueError: the file object is closed
            return False
        return written == len(request)

    def result(self) -> IntArray | None:
        """Wait for the vector asked for last; None if the worker is gone."""
        assert self._proc.stdout is not None
        try:
            reply = os.read(self._proc.stdout.fileno(), 1)  # unbuffered: one read(2)
        except (OSError, ValueError):  # ValueError: the file object is closed
            return None
        if reply != _OK:
            return None
        vector: IntArray = self._slots[self._slot]
        vector.flags.writeable = False
        return vector

    def close(self) -> None:
        del self._slots  # release the buffer so that the mapping can be closed
        self._finalizer()

    def abandon(self) -> None:
        """In a forked copy of the caller: let go of the parent's worker without using it.

        This process's copies of the pipes are pointed at /dev/null (nothing buffered
        here reaches the worker, and the worker sees end of input when the parent
        closes its copy), its mapping of the slots is released, and the process is
        left to the parent, which waits for it.
        """
        del self._slots
        self._finalizer.detach()
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_RDWR)
            try:
                for pipe in (self._proc.stdin, self._proc.stdout):
                    if pipe is not None:
                        os.dup2(null, pipe.fileno())
            finally:
                os.close(null)
        with contextlib.suppress(BufferError):  # a caller's view keeps it until it goes
            self._shared.close()
        with warnings.catch_warnings():  # not this process's child: nothing to wait for
            warnings.simplefilter("ignore", ResourceWarning)
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
            del self._proc


def _shared_fd() -> int:
    """A file descriptor for the shared slots: anonymous memory where Linux offers it."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("gaussdp-noise")
    with tempfile.TemporaryFile() as backing:  # unlinked at once on POSIX
        return os.dup(backing.fileno())


def _worker_environment() -> dict[str, str]:
    """The caller's environment, with this gaussdp importable and one BLAS thread."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _shutdown(proc: subprocess.Popen[bytes], shared: mmap.mmap, owner: int) -> None:
    """Close the worker's input (it exits on end of input) and release the shared memory."""
    if os.getpid() != owner:  # a forked copy of the caller: the worker is not ours
        return
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    # If a caller still holds a view, the mapping goes when the view does.
    with contextlib.suppress(BufferError):
        shared.close()
