"""NoiseStream: vectors drawn in a worker process equal those drawn in place, key by key."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

from gaussdp.random import ChaCha20Random
from gaussdp.sampling import discrete_gaussian
from gaussdp.sampling.background import NoiseStream
from gaussdp.sampling.vectorized import _discrete_gaussian_into


def test_worker_vectors_equal_in_place_vectors_and_are_keyed_from_rng() -> None:
    with NoiseStream(Fraction(10**6, 3), 1000, rng=ChaCha20Random(4)) as stream:
        assert stream.background
        drawn = [stream.next().copy() for _ in range(3)]
    keys = ChaCha20Random(4)
    expected = [
        discrete_gaussian(Fraction(10**6, 3), 1000, rng=ChaCha20Random(keys.random_bytes(32)))
        for _ in range(3)
    ]
    for got, want in zip(drawn, expected, strict=True):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(drawn[0], drawn[1])
    with NoiseStream(Fraction(10**6, 3), 1000, rng=ChaCha20Random(4), background=False) as same:
        assert not same.background
        for want in expected:
            np.testing.assert_array_equal(same.next(), want)


def test_next_returns_a_vector_of_its_own_and_the_internal_view_is_read_only() -> None:
    # Once: next() returned a view of the worker's shared slot, rewritten by the call after
    # next (in a forked child: by the parent's worker, with the parent's later noise).
    with NoiseStream(100, 8, rng=ChaCha20Random(0)) as stream:
        assert stream.background
        first = stream.next()
        kept = first.copy()
        later = [stream.next() for _ in range(2)]  # the worker rewrites both slots
        np.testing.assert_array_equal(first, kept)
        assert not np.array_equal(first, later[1])
        assert first.flags.writeable
        view = stream._next()  # SumNoiser's: added at once, not kept
        with pytest.raises(ValueError, match="read-only"):
            view[0] = 1


def test_dead_worker_falls_back_to_the_same_values_with_a_warning() -> None:
    stream = NoiseStream(1000, 50, rng=ChaCha20Random(9))
    reference = NoiseStream(1000, 50, rng=ChaCha20Random(9), background=False)
    np.testing.assert_array_equal(stream.next(), reference.next())
    worker = stream._worker
    assert worker is not None
    worker._proc.kill()
    worker._proc.wait()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            np.testing.assert_array_equal(stream.next(), reference.next())
    assert not stream.background
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == [
        "gaussdp's background noise process stopped; noise is drawn in this process "
        "instead (same values, slower steps)"
    ]


def test_close_stops_the_worker_and_later_draws_continue_in_place() -> None:
    stream = NoiseStream(1000, 20, rng=ChaCha20Random(2))
    reference = NoiseStream(1000, 20, rng=ChaCha20Random(2), background=False)
    np.testing.assert_array_equal(stream.next(), reference.next())
    worker = stream._worker
    assert worker is not None
    stream.close()
    assert worker._proc.poll() == 0  # exited on end of input, cleanly
    assert not stream.background
    # The key of the vector the worker was drawing is used for the next one.
    np.testing.assert_array_equal(stream.next(), reference.next())


def test_close_while_the_worker_draws_ends_it_cleanly() -> None:
    # A vector of 10**6 values is still being drawn (prefetched) when close() comes.
    stream = NoiseStream(1000, 10**6, rng=ChaCha20Random(3))
    stream.next()
    worker = stream._worker
    assert worker is not None
    stream.close()
    assert worker._proc.poll() == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sigma2": 0, "dim": 3}, "sigma2 must be"),
        ({"sigma2": float("nan"), "dim": 3}, "sigma2 must be"),
        ({"sigma2": 2**81, "dim": 3}, "sigma2 must be at most 2\\*\\*80"),
        ({"sigma2": 4, "dim": 0}, "dim must be"),
        ({"sigma2": 4, "dim": 2.5}, "dim must be"),
    ],
)
def test_bad_parameters_are_refused_before_any_key_is_read(
    kwargs: dict[str, object], message: str
) -> None:
    rng = ChaCha20Random(1)
    with pytest.raises((ValueError, TypeError), match=message):
        NoiseStream(rng=rng, **kwargs)  # type: ignore[arg-type]
    assert rng.random_bytes(8) == ChaCha20Random(1).random_bytes(8)


def test_a_worker_that_cannot_start_leaves_the_stream_drawing_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("no processes here")

    monkeypatch.setattr("gaussdp.sampling.background.subprocess.Popen", refuse)
    with pytest.warns(RuntimeWarning, match="background noise process could not be started"):
        stream = NoiseStream(1000, 30, rng=ChaCha20Random(6))
    assert not stream.background
    reference = NoiseStream(1000, 30, rng=ChaCha20Random(6), background=False)
    for _ in range(2):
        np.testing.assert_array_equal(stream.next(), reference.next())


@pytest.mark.parametrize("sigma2", [Fraction(1, 2**70), Fraction(9, 4), 10**6, 10**18])
@pytest.mark.parametrize("n", [5, 1000, 9000])
def test_in_place_draw_of_the_worker_equals_discrete_gaussian(sigma2: Fraction, n: int) -> None:
    # The worker writes into shared memory with _discrete_gaussian_into: the same values,
    # and the stream left at the same word, on every path (tiny, few, packed, small, huge).
    out = np.full(n, -(2**62), dtype=np.int64)
    rng, rng_want = ChaCha20Random(7), ChaCha20Random(7)
    _discrete_gaussian_into(Fraction(sigma2), out, rng)
    np.testing.assert_array_equal(out, discrete_gaussian(sigma2, n, rng=rng_want))
    assert rng.words(1)[0] == rng_want.words(1)[0]
