"""The randomness protocol: secure default, reproducible ChaCha20 stream, exact derived draws."""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import re
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from forking import in_child
from gaussdp import random as random_module
from gaussdp.random import ChaCha20Random, RandomSource, SystemRandom, _BufferedSource, check_rng

# --- an independent ChaCha20 (RFC 8439 §2.3) to derive the known answers -----------------


def _rotl(v: int, c: int) -> int:
    return ((v << c) & 0xFFFFFFFF) | (v >> (32 - c))


def _quarter(s: list[int], a: int, b: int, c: int, d: int) -> None:
    s[a] = (s[a] + s[b]) & 0xFFFFFFFF
    s[d] = _rotl(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & 0xFFFFFFFF
    s[b] = _rotl(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b]) & 0xFFFFFFFF
    s[d] = _rotl(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & 0xFFFFFFFF
    s[b] = _rotl(s[b] ^ s[c], 7)


def _chacha_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    state = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574]
    state += [*list(struct.unpack("<8L", key)), counter, *list(struct.unpack("<3L", nonce))]
    w = state[:]
    for _ in range(10):
        _quarter(w, 0, 4, 8, 12)
        _quarter(w, 1, 5, 9, 13)
        _quarter(w, 2, 6, 10, 14)
        _quarter(w, 3, 7, 11, 15)
        _quarter(w, 0, 5, 10, 15)
        _quarter(w, 1, 6, 11, 12)
        _quarter(w, 2, 7, 8, 13)
        _quarter(w, 3, 4, 9, 14)
    return struct.pack("<16L", *[(a + b) & 0xFFFFFFFF for a, b in zip(w, state, strict=True)])


def test_independent_chacha_matches_rfc8439_block_vector() -> None:
    # RFC 8439 §2.3.2: key 00..1f, nonce 000000090000004a00000000, block counter 1.
    out = _chacha_block(bytes(range(32)), 1, bytes.fromhex("000000090000004a00000000"))
    assert out.hex().startswith("10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c06803")


def _expected_words(seed: int | bytes, count: int) -> list[int]:
    """Words by the documented derivation, with the independent ChaCha20 above."""
    domain = b"gaussdp.random.ChaCha20Random.v1\x00"
    if isinstance(seed, bytes):
        material = b"b" + seed
    else:
        material = b"i" + seed.to_bytes((seed.bit_length() + 7) // 8, "big")
    key = hashlib.sha256(domain + material).digest()
    stream = b"".join(_chacha_block(key, i, bytes(12)) for i in range(-(-count // 8)))
    return list(struct.unpack(f"<{count}Q", stream[: 8 * count]))


# Known answers: the first four words, computed once with _expected_words above (an RFC 8439
# implementation independent of OpenSSL) and frozen here so any change of derivation fails.
KNOWN_WORDS = {
    0: [0xB0EE2A5EFEED506C, 0xF1F53D301DBA8D49, 0xDB04DC4371C7D71D, 0xED7B88DF8D21775C],
    1: [0x6E7C6BEB957ADCFB, 0x5F62CF389A42FB80, 0x3B33DFC6C57B2978, 0xAB78D998B43896D5],
    b"": [0x1174EE0B5D91B3EE, 0xBE1D7D58DD10636F, 0xC9B94AB6D390E4A8, 0x92EF34198554E89A],
    b"gaussdp": [0xDA69D26EFC56FCE2, 0xCC266BCAFFFD9CA2, 0x44DBCA0DC9C14326, 0x0FDA6B1EB7A8DA30],
}


@pytest.mark.parametrize("seed", list(KNOWN_WORDS))
def test_chacha20_known_answer_words(seed: int | bytes) -> None:
    words = ChaCha20Random(seed).words(4)
    assert words.dtype == np.uint64
    assert [int(w) for w in words] == KNOWN_WORDS[seed]
    assert _expected_words(seed, 4) == KNOWN_WORDS[seed]


def test_chacha20_long_stream_matches_independent_implementation() -> None:
    # Crosses the 64 KiB refill boundary with uneven request sizes.
    rng = ChaCha20Random(2**64 + 5)
    got = np.concatenate([rng.words(k) for k in (3, 8000, 1, 9000)])
    assert [int(w) for w in got] == _expected_words(2**64 + 5, got.size)


class _Counter(_BufferedSource):
    """A buffered source with the default direct fill: bytes 0, 1, ..., 250, 0, 1, ..."""

    def __init__(self) -> None:
        super().__init__()
        self._next = 0

    def _fill_into(self, out: memoryview) -> None:
        n = len(out)
        out[:] = (np.arange(self._next, self._next + n) % 251).astype(np.uint8).tobytes()
        self._next += n


def test_words_continue_the_byte_stream_across_buffer_and_direct_fills() -> None:
    # words() writes large requests straight from the generator: the stream must be
    # the one random_bytes() gives, whatever the mix of request sizes.
    sizes = (3, 8190, 8193, 20000, 1, 0, 150000, 5)
    for make in (lambda: ChaCha20Random(11), lambda: _Counter()):
        a, b = make(), make()
        for n in sizes:
            got = a.words(n)
            assert got.dtype == np.uint64
            assert got.flags.writeable
            np.testing.assert_array_equal(got, np.frombuffer(b.random_bytes(8 * n), "<u8"))
            assert a.random_bytes(3) == b.random_bytes(3)
    expected = _expected_words(2**64 + 5, 30000)
    assert [int(w) for w in ChaCha20Random(2**64 + 5).words(30000)] == expected


def test_word_tuples_continue_the_stream_in_and_across_the_buffer() -> None:
    # _word_tuple (the few-values samplers) reads the buffer in place when it holds the
    # words and the general path across a refill: the words must be those of words().
    sizes = (1, 17, 500, 3, 511, 600, 2, 9000, 40)
    for make in (lambda: ChaCha20Random(12), lambda: _Counter(), lambda: _NaiveCounter()):
        a, b = make(), make()
        for n in sizes:
            got = a._word_tuple(n)
            assert type(got) is tuple
            assert all(type(w) is int for w in got)
            assert list(got) == b.words(n).tolist()
            assert a.random_bytes(5) == b.random_bytes(5)


def test_chacha20_is_reproducible_and_seed_sensitive() -> None:
    a, b = ChaCha20Random(7), ChaCha20Random(7)
    assert np.array_equal(a.words(100), b.words(100))
    assert a.randbelow(10**40) == b.randbelow(10**40)
    assert not np.array_equal(ChaCha20Random(7).words(4), ChaCha20Random(8).words(4))
    # The type tag keeps int and bytes seeds apart.
    assert not np.array_equal(ChaCha20Random(0).words(4), ChaCha20Random(b"").words(4))


def test_no_word_is_shifted_by_a_python_int() -> None:
    # Once: audit_dpsgd seeded its data with ``int(source.words(1)[0] >> 1)``, a
    # TypeError on numpy 1.26 (which pyproject allows): there a uint64 scalar and a
    # Python int promote to float64. Seeds are read as ``randbits(63)``, the same value.
    mixed = re.compile(r"\.words\([^)]*\)(\[[^\]]*\])?\s*(>>|<<|&|\||\^)\s*\(?\s*(\d|0x)")
    src = Path(random_module.__file__).parent
    found = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if mixed.search(line)
    ]
    assert found == []
    for seed in range(4):
        word = ChaCha20Random(seed).words(1)[0]
        assert ChaCha20Random(seed).randbits(63) == int(word >> np.uint64(1))


@pytest.mark.parametrize("seed", [1.0, -1, True, None, "7", np.random.default_rng(0)])
def test_chacha20_refuses_bad_seeds(seed: object) -> None:
    with pytest.raises((TypeError, ValueError), match=r"seed must be an int >= 0 or bytes, got"):
        ChaCha20Random(seed)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [7, 0, 1.5, np.random.default_rng(0), "system"])
def test_check_rng_refuses_non_sources_and_points_to_chacha(bad: object) -> None:
    with pytest.raises(TypeError, match=r"ChaCha20Random\(seed\)"):
        check_rng(bad)


def test_check_rng_default_and_passthrough() -> None:
    assert isinstance(check_rng(None), SystemRandom)
    assert check_rng(None) is check_rng(None)  # one per process, reused across calls
    rng = ChaCha20Random(3)
    assert check_rng(rng) is rng


def test_system_random_words_and_fresh_instances() -> None:
    rng = SystemRandom()
    words = rng.words(10_000)
    assert words.dtype == np.uint64
    assert words.shape == (10_000,)
    # 10,000 words of a CSPRNG: mean of top bits is 1/2 within 6 sigma (alpha ~ 2e-9).
    top = (words >> np.uint64(63)).astype(float)
    assert abs(top.mean() - 0.5) < 6 * 0.5 / 100
    assert not np.array_equal(SystemRandom().words(4), SystemRandom().words(4))


def test_system_random_expands_fresh_os_keys_with_chacha20(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    keys = iter([b"\x01" * 32, b"\x02" * 32, b"\x03" * 32])
    requests: list[int] = []

    def fake_urandom(n: int) -> bytes:
        requests.append(n)
        return next(keys)

    def keystream(key: bytes, n: int) -> bytes:
        encryptor = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
        return encryptor.update(bytes(n))

    monkeypatch.setattr("gaussdp.random.os.urandom", fake_urandom)
    rng = SystemRandom()
    # A small request starts a block under one fresh key (generated 4 KiB at a time)...
    assert rng.random_bytes(10) == keystream(b"\x01" * 32, 10)
    assert rng._block_left == 65536 - 4096
    # ...and the rest of that block is served before a new key is read.
    assert rng.random_bytes(65526) == keystream(b"\x01" * 32, 65536)[10:]
    # A large request is one keystream under its own key.
    big = rng.words(20000)
    assert big.tobytes() == keystream(b"\x02" * 32, 160000)
    assert requests == [32, 32]


def test_system_random_without_expansion_reads_the_os_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    def fake_urandom(n: int) -> bytes:
        calls.append(n)
        return bytes(range(256)) * (n // 256) + bytes(range(n % 256))

    monkeypatch.setattr("gaussdp.random.os.urandom", fake_urandom)
    rng = SystemRandom(expand=False)
    assert repr(rng) == "SystemRandom(expand=False)"
    assert rng.random_bytes(4) == bytes([0, 1, 2, 3])
    assert calls == [4096]  # the buffer is refilled one 4 KiB chunk at a time
    with pytest.raises(TypeError, match="expand must be True or False, got 1"):
        SystemRandom(expand=1)  # type: ignore[arg-type]
    assert repr(SystemRandom()) == "SystemRandom()"


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork is POSIX only")
def test_system_random_buffer_is_not_shared_with_a_forked_child() -> None:
    rng = SystemRandom()
    rng.words(1)  # fill the buffer
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: send the next words, exit without running pytest teardown
        os.write(write, rng.words(4).tobytes())
        os._exit(0)
    os.close(write)
    child = np.frombuffer(os.read(read, 32), dtype=np.uint64)
    os.close(read)
    os.waitpid(pid, 0)
    assert not np.array_equal(child, rng.words(4))


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork is POSIX only")
def test_default_source_is_not_reused_by_a_forked_child() -> None:
    default = check_rng(None)
    default.words(1)  # the parent has a block key and buffered bytes
    child = np.frombuffer(in_child(lambda: check_rng(None).words(4).tobytes()), np.uint64)
    assert child.size == 4
    assert not np.array_equal(child, default.words(4))


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork is POSIX only")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_fork_while_another_thread_holds_the_lock_does_not_deadlock_the_child() -> None:
    for source in (SystemRandom(), ChaCha20Random(1), _NaiveCounter()):
        lock = source._lock if isinstance(source, _BufferedSource) else None
        held = lock if lock is not None else random_module._CLASS_LOCKS[_NaiveCounter]
        taken, done = threading.Event(), threading.Event()

        def hold(
            held: object = held, taken: threading.Event = taken, done: threading.Event = done
        ) -> None:
            with held:  # type: ignore[attr-defined]  # another thread drawing at the fork
                taken.set()
                done.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        taken.wait()
        try:
            got = in_child(lambda source=source: source.random_bytes(16))
        finally:
            done.set()
            holder.join()
        assert len(got) == 16


def test_randbits_and_randbelow_ranges() -> None:
    rng = ChaCha20Random(11)
    assert rng.randbits(0) == 0
    assert all(0 <= rng.randbits(5) < 32 for _ in range(200))
    big = 10**50 + 3
    assert all(0 <= rng.randbelow(big) < big for _ in range(200))
    assert rng.randbelow(1) == 0
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        rng.randbelow(0)


def test_randbelow_is_uniform_chi_square() -> None:
    # 30,000 draws from [0, 6): chi-square with 5 df; critical value 35.89 at alpha = 1e-6.
    rng = ChaCha20Random(12)
    counts = np.bincount([rng.randbelow(6) for _ in range(30_000)], minlength=6)
    expected = 30_000 / 6
    assert float(((counts - expected) ** 2 / expected).sum()) < 35.89


def test_integers_below_vectorised_is_uniform_chi_square() -> None:
    # Bound 2**62 + 2**61 + 1 rejects ~25% per try; 6 bins of the range, 60,000 draws:
    # chi-square with 5 df, critical value 35.89 at alpha = 1e-6.
    rng = ChaCha20Random(13)
    bound = 2**62 + 2**61 + 1
    draws = rng.integers_below(np.full(60_000, bound, dtype=np.int64))
    assert draws.dtype == np.int64
    assert draws.min() >= 0
    assert draws.max() < bound
    bins = np.minimum((draws.astype(np.float64) / bound * 6).astype(np.int64), 5)
    counts = np.bincount(bins, minlength=6)
    expected = 60_000 / 6
    assert float(((counts - expected) ** 2 / expected).sum()) < 35.89
    small = rng.integers_below([1, 2, 3, 7] * 1000)
    assert np.all(small < np.array([1, 2, 3, 7] * 1000))
    assert small[::4].max() == 0


def test_integers_below_refuses_bad_bounds() -> None:
    with pytest.raises(ValueError, match="bounds must be integers in"):
        ChaCha20Random(0).integers_below([3, 0])


def test_bits_are_fair() -> None:
    # 80,000 fair bits: z-test of the mean, |z| < 4.89 at alpha = 1e-6.
    bits = ChaCha20Random(14).bits(80_000)
    assert bits.dtype == np.bool_
    assert bits.shape == (80_000,)
    z = (bits.mean() - 0.5) / (0.5 / np.sqrt(80_000))
    assert abs(z) < 4.89


def test_custom_source_gets_derived_methods() -> None:
    class Counter(RandomSource):
        def __init__(self) -> None:
            self.n = 0

        def random_bytes(self, n: int) -> bytes:
            out = bytes((self.n + i) % 256 for i in range(n))
            self.n += n
            return out

    source = Counter()
    assert check_rng(source) is source
    assert int(source.words(1)[0]) == int.from_bytes(bytes(range(8)), "little")


@pytest.mark.parametrize(
    "make",
    [
        SystemRandom,
        lambda: SystemRandom(expand=False),
        lambda: ChaCha20Random(5),
        lambda: check_rng(None),
        lambda: _NaiveCounter(),  # defined below
    ],
    ids=["system", "system-unexpanded", "chacha20", "default", "user-subclass"],
)
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_source_is_never_copied(make: Callable[[], RandomSource], how: str) -> None:
    # A shallow copy shared the buffer and key and copied the read position: after one
    # draw it handed out exactly the bytes the source handed out next (priv25 #2).
    source = make()
    source.words(1)
    copier = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": pickle.dumps}[how]
    with pytest.raises(TypeError, match=r"^rng must be used where it is, not copied or pickled"):
        copier(source)
    # Nothing was drawn by the refusal, and the source goes on.
    assert source.words(2).shape == (2,)


# --- sharing one source between threads ----------------------------------------------------

# Request sizes in words: below, at and across the 4 KiB chunk (512 words) and the 64 KiB
# block (8192 words), so that buffered, direct and own-key reads interleave; 5000 words is
# the 40,000-byte request of the audit. Mostly large, to keep the test fast on a busy machine.
_THREAD_SIZES = (1, 3, 64, 513, 5000, 8191, 5000, 8192, 20000, 131072)


class _NaiveCounter(RandomSource):
    """A user source written with no thought of threads: bytes are the big-endian counter."""

    def __init__(self) -> None:
        self.next = 0

    def random_bytes(self, n: int) -> bytes:
        words = -(-n // 8)
        start = self.next
        self.next = start + words  # a thread switch between read and write would repeat words
        return b"".join(i.to_bytes(8, "big") for i in range(start, start + words))[:n]


def _draw_in_threads(source: RandomSource, threads: int, words_each: int) -> np.ndarray:
    """Every thread draws ``words_each`` words through words() and the byte paths."""
    barrier = threading.Barrier(threads)
    results: list[list[np.ndarray]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        got, total, k = results[index], 0, index
        barrier.wait()
        try:
            while total < words_each:
                n = min(_THREAD_SIZES[k % len(_THREAD_SIZES)], words_each - total)
                path = k % 4
                if path == 0:
                    got.append(source.words(n))
                elif path == 1:  # the byte path (LazyUniform, randbits, bits) in whole words
                    got.append(np.frombuffer(source.random_bytes(8 * n), dtype="<u8"))
                elif path == 2:  # the few-values samplers' words, read in place
                    got.append(np.array(source._word_tuple(min(n, 600)), dtype="u8"))
                else:
                    got.append(np.array([source.randbits(64) for _ in range(min(n, 8))], "u8"))
                total += got[-1].size
                k += 1
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert not errors, errors
    return np.concatenate([np.concatenate(r).astype(np.uint64) for r in results])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "threads", "words_each"),
    [
        (SystemRandom, 8, 1_250_000),
        (lambda: ChaCha20Random(5), 4, 2_500_000),
        (lambda: SystemRandom(expand=False), 4, 250_000),
        (_NaiveCounter, 4, 100_000),
    ],
    ids=["system", "chacha20", "system-unexpanded", "user-subclass"],
)
def test_a_source_shared_by_threads_never_hands_out_a_word_twice(
    make: object, threads: int, words_each: int
) -> None:
    # 10**7 words from the two main sources. For uniform words a repeat by chance has
    # probability below n**2 / 2**65 = 2.7e-6 (the false-alarm rate); a byte handed out
    # twice repeats whole words (the bug: 23,712 repeats in 4 * 10**6).
    source = make()  # type: ignore[operator]
    drawn = _draw_in_threads(source, threads, words_each)
    assert drawn.size == threads * words_each
    drawn.sort()
    assert not np.any(drawn[1:] == drawn[:-1])
    if isinstance(source, ChaCha20Random):  # exactly the first words of the stream, once each
        expected = ChaCha20Random(5).words(drawn.size)
        expected.sort()
        np.testing.assert_array_equal(drawn, expected)
    if isinstance(source, _NaiveCounter):  # exactly the counter values 0 .. n-1
        counters = drawn.byteswap()
        counters.sort()
        np.testing.assert_array_equal(counters, np.arange(drawn.size, dtype=np.uint64))
