"""Sources of uniform random bits for the exact samplers.

Every sampler in gaussdp takes ``rng=`` (keyword-only) and normalises it with
:func:`check_rng`. A source hands out *uniform 64-bit words*; everything else
(uniform integers below a bound, fair bits) is derived from words by exact
rejection, so a sampler's distribution depends only on the words being uniform
and independent.

Two sources are provided:

- :class:`SystemRandom`, the default: the operating system's CSPRNG
  (``os.urandom``, i.e. ``getrandom(2)`` on Linux), expanded by ChaCha20 under a
  fresh OS key per 64 KiB block (or read directly with ``expand=False``).
  ``rng=None`` means one per-process instance, created at import, reused by
  every call and thread, and reset in a forked child.
- :class:`ChaCha20Random`, a reproducible stream for tests and replayable runs:
  the ChaCha20 keystream (RFC 8439, from the ``cryptography`` package) under a
  key derived from the seed by SHA-256. The same seed gives the same words on
  every run and platform.

A bare integer seed is refused: a reproducible source must be visibly named,
``ChaCha20Random(seed)``; the only module-level generator is the default
:class:`SystemRandom`.

Every source is safe to share between threads: a byte is handed out once. A
:class:`ChaCha20Random` is a deterministic stream, so a forked child continues
its parent's stream (the same words in both processes): give each process its
own seed.

Objects that keep randomness across calls (:func:`gaussdp.ml.make_private`,
:class:`gaussdp.ml.DPAggregator`) draw from a *derived stream*: ChaCha20 under a
key of 32 bytes read from the ``rng`` they were given. When that ``rng`` is not
reproducible (the default operating-system source, or a user-defined source), a
forked child re-derives the key before its first draw from 32 bytes of that
``rng`` and 32 fresh operating-system bytes (SHA-256 of both), so a child never
repeats its parent's noise nor a sibling's, even when a user-defined source is
deterministic (siblings forked from one parent hold the same state of it);
under a seeded :class:`ChaCha20Random` it continues the parent's stream, as the
seed says.
"""

from __future__ import annotations

import abc
import functools
import hashlib
import os
import struct
import threading
import weakref
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms

from gaussdp.errors import invalid

__all__ = [
    "ChaCha20Random",
    "RandomSource",
    "SystemRandom",
    "check_rng",
]

_WORD_BYTES = 8
# SystemRandom reads a fresh OS key for every block of at most this many bytes; a
# request at least this large is one block under its own key.
_BLOCK_BYTES = 1 << 16
# The buffer of small requests is refilled this many bytes at a time (lazily: a scalar
# draw does not generate a whole block). Requests at least this large bypass it.
_CHUNK_BYTES = 1 << 12

# Every live buffered source, so that a forked child can replace their locks (a lock
# held by another thread of the parent at the fork would stay held in the child).
_LIVE_SOURCES: weakref.WeakSet[_BufferedSource] = weakref.WeakSet()
# The locks serialising random_bytes of RandomSource subclasses that do not lock
# themselves, one per class (see RandomSource.__init_subclass__).
_CLASS_LOCKS: dict[type, threading.RLock] = {}


class RandomSource(abc.ABC):
    """The randomness protocol of gaussdp: uniform 64-bit words and what derives from them.

    A subclass implements :meth:`random_bytes` (independent uniform bytes); the
    other methods are derived from it exactly and need not be overridden.
    Words are assembled from bytes in little-endian order, so two sources that
    emit the same bytes emit the same words on every platform.

    Every source may be shared between threads, and hands out each byte once.
    The derived methods read the source with one :meth:`random_bytes` (or
    :meth:`words`) call each, so they are as safe as those. The built-in sources
    lock per instance; a subclass that defines :meth:`random_bytes` gets it
    wrapped in a lock shared by the instances of that class, unless it sets
    ``_LOCKS_ITSELF = True`` in its class body (its own locking is then its
    responsibility).

    Examples
    --------
    >>> rng = ChaCha20Random(0)
    >>> rng.words(2).dtype
    dtype('uint64')
    >>> 0 <= rng.randbelow(10**30) < 10**30
    True
    """

    #: Whether the output is a deterministic function of a seed: a forked child then
    #: repeats its parent's words by design. False unless a class says otherwise, so that
    #: a stream derived from an unknown source is re-keyed in a forked child.
    _reproducible = False
    #: For a reproducible source: :func:`_process_identity` of the process that created
    #: the stream (for a derived stream, its reproducible parent's). Every process forked
    #: from it repeats its words, so a budget refuses to pay for them anywhere else.
    #: None otherwise (a reproducible source without one is refused by a budget).
    _home: tuple[int, bytes] | None = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        method = cls.__dict__.get("random_bytes")
        if method is None or cls.__dict__.get("_LOCKS_ITSELF", False):
            return
        _CLASS_LOCKS[cls] = threading.RLock()  # reentrant: it may call super().random_bytes
        cls.random_bytes = _locked(cls, method)  # type: ignore[method-assign,assignment]

    # A copy would hand out the bytes the source hands out next (the same buffer and key,
    # or the same deterministic state): the same noise twice. Refused in every form.
    def __copy__(self) -> RandomSource:
        raise TypeError(_not_copied(self))

    def __deepcopy__(self, memo: object) -> RandomSource:
        raise TypeError(_not_copied(self))

    def __reduce_ex__(self, protocol: object) -> str | tuple[object, ...]:
        raise TypeError(_not_copied(self))

    @abc.abstractmethod
    def random_bytes(self, n: int) -> bytes:
        """Return ``n`` independent uniform random bytes."""

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        """Return ``n`` independent uniform 64-bit words as a ``uint64`` array."""
        if n < 0:
            raise ValueError(f"n must be an integer >= 0, got {n!r}")
        raw = np.frombuffer(self.random_bytes(_WORD_BYTES * n), dtype="<u8")
        return raw.astype(np.uint64, copy=True)

    def _word_tuple(self, n: int) -> tuple[int, ...]:
        """The words of ``words(n)`` as a tuple of Python ints, for samplers of a few values.

        Reads the source with one :meth:`random_bytes` call, as :meth:`words` does.
        """
        return struct.unpack(f"<{n}Q", self.random_bytes(_WORD_BYTES * n))

    def randbits(self, k: int) -> int:
        """Return a uniform integer in ``[0, 2**k)`` as a Python ``int``."""
        if k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        if k == 0:
            return 0
        nwords = -(-k // 64)
        value = int.from_bytes(self.random_bytes(_WORD_BYTES * nwords), "little")
        return value >> (64 * nwords - k)

    def randbelow(self, n: int) -> int:
        """Return a uniform integer in ``[0, n)`` for any Python ``int`` ``n >= 1``.

        Exact rejection: draw ``k = bit_length(n - 1)`` bits, retry while the
        result is ``>= n``. Each attempt succeeds with probability ``> 1/2``.
        """
        if n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        k = (n - 1).bit_length()
        while True:
            value = self.randbits(k)
            if value < n:
                return value

    def integers_below(self, bounds: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Return one uniform integer in ``[0, b)`` for each ``b`` in ``bounds``.

        ``bounds`` holds integers in ``[1, 2**63)``. Exact rejection per entry:
        a word is masked to the bit length of ``b - 1`` and redrawn while the
        result is ``>= b``; each attempt succeeds with probability ``> 1/2``.
        """
        b = np.asarray(bounds)
        if b.size and (not np.issubdtype(b.dtype, np.integer) or b.min() < 1):
            raise ValueError(f"bounds must be integers in [1, 2**63), got {bounds!r}")
        b = b.astype(np.uint64)
        mask = b - np.uint64(1)
        for shift in (1, 2, 4, 8, 16, 32):  # smear the top bit down: 2**bitlen - 1
            mask |= mask >> np.uint64(shift)
        out = np.empty(b.shape, dtype=np.uint64)
        todo = np.arange(b.size)
        flat_b, flat_mask, flat_out = b.reshape(-1), mask.reshape(-1), out.reshape(-1)
        while todo.size:
            draw = self.words(todo.size) & flat_mask[todo]
            ok = draw < flat_b[todo]
            flat_out[todo[ok]] = draw[ok]
            todo = todo[~ok]
        return out.astype(np.int64)

    def bits(self, n: int) -> npt.NDArray[np.bool_]:
        """Return ``n`` independent fair bits as a boolean array."""
        if n < 0:
            raise ValueError(f"n must be an integer >= 0, got {n!r}")
        raw = np.frombuffer(self.random_bytes(-(-n // 8)), dtype=np.uint8)
        return np.unpackbits(raw, bitorder="little")[:n].astype(np.bool_)


def _not_copied(source: RandomSource) -> str:
    """The refusal of a copy, deep copy or pickle of ``source``."""
    return invalid(
        "rng",
        "used where it is, not copied or pickled (the copy would hand out the bytes the "
        "source hands out next: the same noise twice); share the source itself, or make "
        "a new one (ChaCha20Random(seed) for a reproducible stream); to save a model made "
        "private, use its state_dict(); copy.deepcopy gives a plain copy of its network",
        source,
    )


def _locked(
    cls: type, method: Callable[[RandomSource, int], bytes]
) -> Callable[[RandomSource, int], bytes]:
    """``method`` run under the lock of ``cls`` (looked up per call: a fork replaces it)."""

    @functools.wraps(method)
    def random_bytes(self: RandomSource, n: int) -> bytes:
        with _CLASS_LOCKS[cls]:
            return method(self, n)

    return random_bytes


class _BufferedSource(RandomSource):
    """A byte stream served through a small buffer, safe to share between threads.

    Subclasses implement :meth:`_fill_into` (the next bytes of the underlying
    generator). Requests below :data:`_CHUNK_BYTES` are served from a buffer that
    is refilled one chunk at a time, so a scalar draw generates 4 KiB, not a
    whole block; larger requests are written straight from the generator into
    the caller's array after the buffered bytes. Every read of the buffer and
    the generator happens under one lock per instance, so each byte of the
    stream is handed out exactly once whatever the number of threads.
    """

    _LOCKS_ITSELF = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = bytearray(_CHUNK_BYTES)
        self._pos = _CHUNK_BYTES  # nothing buffered
        _LIVE_SOURCES.add(self)

    @abc.abstractmethod
    def _fill_into(self, out: memoryview) -> None:
        """Write the next ``len(out)`` bytes of the generator into ``out`` (lock held)."""

    def _discard_if_stale(self) -> None:
        """Hook for subclasses that must drop buffered state (e.g. after a fork); lock held."""

    def _fill_independent(self, out: memoryview) -> bool:
        """Fill a large request from state shared with nothing else, without the lock.

        Returns False (the default) when the source has no such state: the request
        is then served from the stream, in order, under the lock.
        """
        return False

    def _after_fork_in_child(self) -> None:
        """Run first in a forked child: replace a lock that a parent thread may have held."""
        self._lock = threading.Lock()

    def _read_into(self, out: memoryview) -> None:
        """Hand out the next ``len(out)`` bytes of the stream into ``out``, each byte once."""
        need = len(out)
        if need >= _BLOCK_BYTES and self._fill_independent(out):
            return
        with self._lock:
            self._discard_if_stale()
            buffer = memoryview(self._buffer)
            head = min(need, _CHUNK_BYTES - self._pos)
            out[:head] = buffer[self._pos : self._pos + head]
            self._pos += head
            rest = need - head
            if rest >= _CHUNK_BYTES:
                self._fill_into(out[head:])
            elif rest:
                self._fill_into(buffer)
                out[head:] = buffer[:rest]
                self._pos = rest

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        """The next ``8n`` bytes of the stream as little-endian words, written in place.

        The same words as ``random_bytes(8 * n)`` read as ``<u8``, without the copies.
        """
        if n < 0:
            raise ValueError(f"n must be an integer >= 0, got {n!r}")
        out = np.empty(n, dtype="<u8")
        self._read_into(memoryview(out.data).cast("B"))
        return out.view(np.uint64)

    def random_bytes(self, n: int) -> bytes:
        if n < 0:
            raise ValueError(f"n must be an integer >= 0, got {n!r}")
        out = bytearray(n)
        self._read_into(memoryview(out))
        return bytes(out)

    def _word_tuple(self, n: int) -> tuple[int, ...]:
        """The next ``n`` words as Python ints, read in place when the buffer holds them.

        The same words as :meth:`words` (the next ``8n`` bytes of the stream, handed out
        once); a scalar draw then costs no intermediate bytes object or array.
        """
        if type(self).random_bytes is not _BufferedSource.random_bytes:
            return super()._word_tuple(n)  # a subclass's own bytes: through its override
        need = _WORD_BYTES * n
        with self._lock:
            self._discard_if_stale()
            if self._pos + need <= _CHUNK_BYTES:
                words = struct.unpack_from(f"<{n}Q", self._buffer, self._pos)
                self._pos += need
                return words
        return super()._word_tuple(n)  # across a refill: the general path


class SystemRandom(_BufferedSource):
    r"""The operating system's CSPRNG, expanded with ChaCha20 under fresh OS keys.

    The default source of every sampler (``rng=None`` uses one per-process
    instance, see :func:`check_rng`). With ``expand=True`` (default) the output
    is made of *blocks* of at most 64 KiB: each block is the ChaCha20 keystream
    (RFC 8439) under a fresh 256-bit key read from ``os.urandom``
    (``getrandom(2)`` on Linux), with a zero nonce; a request of 64 KiB or more
    is one block under its own key. This is the userspace-stream construction
    of arc4random and libsodium (DESIGN decision 2): as unpredictable as the OS
    source, and about eight times faster here (os.urandom gives ≈ 0.4 GB/s, the
    keystream ≈ 5 GB/s). The keystream of a block is generated lazily, 4 KiB at
    a time, as requests consume it: a scalar draw costs one 32-byte OS read per
    64 KiB and a 4 KiB keystream step, not a 64 KiB fill. ``expand=False`` reads
    every byte from ``os.urandom`` instead.

    Safe to share: a byte is handed out once, also when several threads draw
    from one instance at the same time (the buffer and the current block are
    read under a lock; large requests use their own key and need no lock). In a
    forked child the buffer and the current block's key are dropped before the
    first request (a fork hook, and the process id checked on each request), so
    parent and child never share output; every block has its own key, so a
    child's blocks are independent of the parent's.

    Examples
    --------
    >>> rng = SystemRandom()
    >>> rng.words(3).shape
    (3,)
    """

    def __init__(self, *, expand: bool = True) -> None:
        if not isinstance(expand, bool):
            raise TypeError(f"expand must be True or False, got {expand!r}")
        super().__init__()
        self._pid = os.getpid()
        self._expand = expand
        self._block: CipherContext | None = None  # the current block's keystream
        self._block_left = 0  # bytes of it not yet generated

    def _discard_if_stale(self) -> None:
        pid = os.getpid()
        if pid != self._pid:
            self._drop_state(pid)

    def _drop_state(self, pid: int) -> None:
        self._pos, self._block, self._block_left, self._pid = _CHUNK_BYTES, None, 0, pid

    def _after_fork_in_child(self) -> None:
        super()._after_fork_in_child()
        self._drop_state(os.getpid())

    def _fill_into(self, out: memoryview) -> None:
        if not self._expand:
            _urandom_into(out)
            return
        done = 0
        while done < len(out):
            if self._block is None or self._block_left == 0:
                self._block, self._block_left = _chacha20(os.urandom(32)), _BLOCK_BYTES
            take = min(self._block_left, len(out) - done)
            _keystream_into(self._block, out[done : done + take])
            self._block_left -= take
            done += take

    def _fill_independent(self, out: memoryview) -> bool:
        if self._expand:
            _keystream_into(_chacha20(os.urandom(32)), out)
        else:
            _urandom_into(out)
        return True

    def __repr__(self) -> str:
        return "SystemRandom()" if self._expand else "SystemRandom(expand=False)"


def _urandom_into(out: memoryview) -> None:
    """Fill ``out`` from ``os.urandom`` in blocks of at most 64 KiB.

    os.urandom is fastest per byte in blocks of about 64 KiB (measured here: ~50M
    words/s at 64 KiB, ~31M at 2 MiB).
    """
    for start in range(0, len(out), _BLOCK_BYTES):
        stop = min(start + _BLOCK_BYTES, len(out))
        out[start:stop] = os.urandom(stop - start)


def _chacha20(key: bytes) -> CipherContext:
    """A ChaCha20 encryptor (zero nonce and counter): encrypting zeros gives the keystream."""
    return Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()


_CHACHA_DOMAIN = b"gaussdp.random.ChaCha20Random.v1\x00"
_ZEROS = bytes(1 << 20)


def _keystream_into(encryptor: CipherContext, out: memoryview) -> None:
    """Write the next ``len(out)`` keystream bytes (the encryption of zeros) into ``out``."""
    written = encryptor.update_into(_zeros(len(out)), out)
    assert written == len(out)


def _zeros(n: int) -> memoryview:
    """A read-only view of ``n`` zero bytes (shared for up to 1 MiB)."""
    return memoryview(_ZEROS)[:n] if n <= len(_ZEROS) else memoryview(bytes(n))


def _chacha_key(seed: int | bytes) -> bytes:
    r"""Derive the 256-bit ChaCha20 key of a seed.

    ``key = SHA-256(b"gaussdp.random.ChaCha20Random.v1\\x00" + tag + payload)``
    where an int seed has ``tag = b"i"`` and ``payload`` its minimal
    big-endian unsigned encoding (``b""`` for 0), and a bytes seed has
    ``tag = b"b"`` and ``payload`` the bytes themselves. The tag keeps
    ``0`` and ``b""`` (and ``1`` and ``b"\\x01"``) apart.
    """
    if isinstance(seed, bytes):
        material = b"b" + seed
    else:
        material = b"i" + seed.to_bytes((seed.bit_length() + 7) // 8, "big")
    return hashlib.sha256(_CHACHA_DOMAIN + material).digest()


class ChaCha20Random(_BufferedSource):
    r"""A reproducible stream: the ChaCha20 keystream under a key derived from ``seed``.

    Parameters
    ----------
    seed : int or bytes
        An integer ``>= 0`` or a byte string. The key is
        ``SHA-256(b"gaussdp.random.ChaCha20Random.v1\x00" + tag + payload)``,
        with ``tag = b"i"`` and ``payload`` the minimal big-endian encoding of an
        int seed, or ``tag = b"b"`` and the bytes themselves. The nonce and the
        initial block counter are zero; words are the keystream read as
        little-endian 64-bit integers. Use a seed with at least 128 bits of
        entropy if the stream must be unpredictable.

    Raises
    ------
    TypeError
        If ``seed`` is not an int or bytes (floats, bools and numpy generators
        are refused).
    ValueError
        If ``seed`` is a negative integer.

    Notes
    -----
    The keystream is the RFC 8439 ChaCha20 block function as implemented by
    OpenSSL through ``cryptography``; a stream is good for 2**38 bytes (the
    32-bit block counter), far beyond any sampling run.

    Examples
    --------
    >>> rng = ChaCha20Random(2024)
    >>> [hex(int(w)) for w in rng.words(2)] == [hex(int(w)) for w in ChaCha20Random(2024).words(2)]
    True
    """

    _reproducible = True

    def __init__(self, seed: int | bytes) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int | bytes):
            raise TypeError(
                f"seed must be an int >= 0 or bytes, got {seed!r}",
            )
        if isinstance(seed, int) and seed < 0:
            raise ValueError(f"seed must be an int >= 0 or bytes, got {seed!r}")
        super().__init__()
        self._seed = seed
        self._home = _process_identity()
        self._encryptor = _chacha20(_chacha_key(seed))

    def _fill_into(self, out: memoryview) -> None:
        _keystream_into(self._encryptor, out)

    def __repr__(self) -> str:
        return f"ChaCha20Random({self._seed!r})"


class _DerivedStream(_BufferedSource):
    """A ChaCha20 stream keyed from a parent source, re-keyed in a forked child.

    The key is that of ``ChaCha20Random(parent.random_bytes(32))`` (so the words are
    the same as that stream's), or with ``forked=True`` that of
    ``ChaCha20Random(_fork_key(parent))``. If the parent is not reproducible (the OS
    source, a stream derived from it, a user-defined source), a forked child drops
    the buffered bytes and the key and keys itself with ``_fork_key`` before its
    first request, so the child's words are independent of the parent's and of its
    siblings'. If the parent is reproducible (a :class:`ChaCha20Random`, or a
    stream derived from one), the child continues the stream: the same words in
    both processes, as a seed means.
    """

    def __init__(self, parent: RandomSource, *, forked: bool = False) -> None:
        super().__init__()
        self._parent = parent
        self._reproducible = parent._reproducible
        self._home = parent._home if parent._reproducible else None
        self._pid = os.getpid()
        self._encryptor = self._new_key(forked=forked)

    def _new_key(self, *, forked: bool) -> CipherContext:
        key = _fork_key(self._parent) if forked else self._parent.random_bytes(32)
        return _chacha20(_chacha_key(key))

    def _discard_if_stale(self) -> None:
        pid = os.getpid()
        if pid != self._pid and not self._reproducible:
            encryptor = self._new_key(forked=True)
            self._pos, self._encryptor, self._pid = _CHUNK_BYTES, encryptor, pid

    def _after_fork_in_child(self) -> None:
        super()._after_fork_in_child()
        if not self._reproducible:
            self._pid = -1  # stale: re-keyed from the parent at the first request

    def _fill_into(self, out: memoryview) -> None:
        _keystream_into(self._encryptor, out)

    def __repr__(self) -> str:
        return f"_DerivedStream({self._parent!r})"


def _fork_key(parent: RandomSource) -> bytes:
    """A key for a forked child's stream: SHA-256(32 bytes of ``parent`` ‖ 32 OS bytes).

    For a parent that is not reproducible. A deterministic user-defined source is
    in the same state in every child forked from one process, so its bytes alone
    gave sibling children (and the parent's next use) the same key, hence the same
    noise; the operating system's bytes make every child's key fresh.
    """
    return hashlib.sha256(parent.random_bytes(32) + os.urandom(32)).digest()


# Drawn again in every forked child: a process id can be reused once its process exits,
# this pair cannot (a child of a child may get the id of an exited ancestor).
_PROCESS_TOKEN = os.urandom(16)


def _process_identity() -> tuple[int, bytes]:
    """This process: its id and a random token drawn again in every forked child."""
    return os.getpid(), _PROCESS_TOKEN


def _refuse_foreign_seed(
    rng: RandomSource, what: str, *, owner: tuple[int, bytes] | None = None
) -> None:
    """Refuse a charged ``what`` drawn from a seeded stream outside the process that made it.

    Every process forked from the stream's process (``rng._home``) repeats its words,
    so a budget there would pay, as independent, for the noise the parent (or a
    sibling) also releases: the difference of the two releases is the exact
    difference of the private values. ``owner``, if given, is the process of the
    object that charges (it must be this one too: an object built in a forked child
    from a stream its parent made repeats every sibling's noise). A reproducible
    stream that does not say where it was made is refused everywhere. Called by
    every charged path before anything is charged or read (the ML charger,
    :meth:`gaussdp.release.Release.run`, :meth:`gaussdp.synth.Synthesizer.run`).

    Raises
    ------
    RuntimeError
        As described; nothing has been drawn.
    """
    if not rng._reproducible:
        return
    here = _process_identity()
    if rng._home is None or here != rng._home or (owner is not None and here != owner):
        why = (
            "this stream does not record where it was made"
            if rng._home is None
            else "a forked process repeats that process's noise, which the budget would "
            "pay for again"
        )
        where = "the seeded stream" + ("" if owner is None else " and the object that charges")
        raise RuntimeError(
            invalid(
                "rng",
                f"unseeded (None, the operating system's source) for a charged {what} "
                f"outside the process that made {where} ({why})",
                rng,
            )
        )


def _after_fork_in_child() -> None:
    """Fresh locks in a forked child, and no buffered bytes or keys of the parent's."""
    global _PROCESS_TOKEN
    _PROCESS_TOKEN = os.urandom(16)
    for cls in _CLASS_LOCKS:
        _CLASS_LOCKS[cls] = threading.RLock()
    for source in list(_LIVE_SOURCES):
        source._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)

# The source of rng=None: one per process, shared by all threads and calls. It holds
# no bytes or key until the first request, and a forked child drops what it held.
_DEFAULT_SOURCE = SystemRandom()


def check_rng(rng: object) -> RandomSource:
    """Normalise an ``rng=`` argument to a :class:`RandomSource`.

    ``None`` gives the per-process default, a :class:`SystemRandom` shared by
    every call and thread of the process (reusing it makes a scalar draw cheap:
    one 32-byte OS read per 64 KiB of output); a forked child never reuses its
    parent's bytes or keys. A :class:`RandomSource` is returned unchanged;
    anything else (an int seed, a float, a ``numpy.random.Generator``) is refused.

    Raises
    ------
    TypeError
        If ``rng`` is neither ``None`` nor a :class:`RandomSource`.

    Examples
    --------
    >>> check_rng(None)
    SystemRandom()
    >>> try:
    ...     check_rng(7)
    ... except TypeError as error:
    ...     print(error)  # doctest: +NORMALIZE_WHITESPACE
    rng must be None or a gaussdp.random.RandomSource (for a reproducible stream pass
    gaussdp.random.ChaCha20Random(seed)), got 7
    """
    if rng is None:
        return _DEFAULT_SOURCE
    if isinstance(rng, RandomSource):
        return rng
    raise TypeError(
        "rng must be None or a gaussdp.random.RandomSource (for a reproducible "
        f"stream pass gaussdp.random.ChaCha20Random(seed)), got {rng!r}"
    )
