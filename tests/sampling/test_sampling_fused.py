"""The compiled Gaussian block (numba, docs/sampler-exactness.md §2.5) makes numpy's decisions.

Same words, same bit layout, same exact fallbacks in the same order: the outputs must be
the numpy kernels' outputs, on random words, on words crafted at the brackets' edges, and
with brackets widened so that most lanes go to the exact fallbacks.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from gaussdp.random import ChaCha20Random, RandomSource
from gaussdp.sampling import vectorized
from gaussdp.sampling.background import FAST_KERNELS_MIN_DIM, NoiseStream
from gaussdp.sampling.vectorized import (
    _fused_module,
    _gaussian_plan,
    _gaussian_small,
    _Kernels,
)

pytest.importorskip("numba")
fused = _fused_module()
assert fused is not None

# t <= 256 (one packed word per candidate) and t > 256 (1.5 words), up to the DP-SGD scale
SIGMA2S = [Fraction(1, 3), Fraction(2), Fraction(10**4, 7), Fraction(66000), 17263857673]


def _both(sigma2: Fraction, n: int, source: object) -> tuple[np.ndarray, np.ndarray]:
    """The block drawn by numpy's kernels and by the compiled one, from equal sources."""
    plan = _gaussian_plan(Fraction(sigma2))
    out = []
    for kernel in (None, fused):
        _Kernels.fused = kernel
        try:
            out.append(np.asarray(_gaussian_small(plan, n, source())).astype(np.int64))  # type: ignore[operator]
        finally:
            _Kernels.fused = None
    return out[0], out[1]


@pytest.mark.parametrize("sigma2", SIGMA2S)
def test_compiled_block_equals_numpy_block(sigma2: Fraction) -> None:
    for seed, n in [(0, 1), (1, 7), (2, 255), (3, 257), (4, 3000)]:
        numpy_out, fused_out = _both(sigma2, n, lambda seed=seed: ChaCha20Random(seed))
        np.testing.assert_array_equal(fused_out, numpy_out)


class _Prefixed(RandomSource):
    """Given words first, then a ChaCha20 stream (the exact fallbacks' bits)."""

    def __init__(self, words: np.ndarray) -> None:
        self._head = words.astype("<u8").tobytes()
        self._tail = ChaCha20Random(9)

    def random_bytes(self, n: int) -> bytes:
        head, self._head = self._head[:n], self._head[n:]
        return head + self._tail.random_bytes(n - len(head))


def _edge_words(sigma2: Fraction, n: int) -> np.ndarray:
    """Words whose U sits next to e^{-g/t} (an integer G boundary, §2.1) and whose U' sits
    next to 2**32 e^{-gamma} (the acceptance bracket, §2.2), for the packed layout when
    t <= 256 and the 1.5-word layout otherwise (§2.4)."""
    plan = _gaussian_plan(sigma2)
    gen = np.random.default_rng(7)  # test inputs only, not a sampler
    packed = plan.t <= 256
    bits = 31 if packed else 52
    m_geo, m_acc, sign = [], [], []
    for i in range(n):
        g = int(gen.integers(0, 3 * plan.t))
        if i % 2:  # U = e^{-g/t}: G changes there
            m = int(math.exp(-g / plan.t_f) * 2.0**bits) + int(gen.integers(-3, 3))
        else:  # G = g decided, the acceptance at its edge
            m = int(math.exp(-(g + 0.5) / plan.t_f) * 2.0**bits)
        m_geo.append(min(max(m, 0), 2**bits - 1))
        gamma = (g - plan.c_f) ** 2 * plan.inv_two_sigma2_f
        p = math.exp(-gamma) * 2.0**32
        m_acc.append(min(max(int(p) + int(gen.integers(-2, 2)), 0), 2**32 - 1))
        sign.append(i % 3 == 0)
    geo = np.array(m_geo, dtype=np.uint64)
    acc = np.array(m_acc, dtype=np.uint64)
    neg = np.array(sign, dtype=np.uint64)
    if packed:
        return (geo << np.uint64(33)) | (neg << np.uint64(32)) | acc
    halves = np.zeros(2 * ((n + 1) // 2), dtype=np.uint64)
    halves[:n] = acc
    extra = halves[0::2] | (halves[1::2] << np.uint64(32))
    return np.concatenate([(geo << np.uint64(12)) | neg, extra])


@pytest.mark.parametrize("sigma2", SIGMA2S)
def test_compiled_block_at_the_bracket_edges(sigma2: Fraction) -> None:
    n = 400
    words = _edge_words(Fraction(sigma2), n)
    numpy_out, fused_out = _both(sigma2, n, lambda: _Prefixed(words))
    np.testing.assert_array_equal(fused_out, numpy_out)
    # the crafted lanes do reach the exact fallbacks
    codes = np.empty(n, dtype=np.uint8)
    plan = _gaussian_plan(Fraction(sigma2))
    undecided = fused.gaussian_block(
        words, n, plan.t <= 256, plan.t_f, plan.c_f, plan.inv_two_sigma2_f,
        vectorized._ETA_REL, vectorized._BRACKET_REL, np.empty(n), codes,
    )  # fmt: skip
    assert undecided >= n // 10
    assert (codes == fused.GEOMETRIC_UNDECIDED).any()
    assert (codes == fused.BERNOULLI_UNDECIDED).any()


@pytest.mark.parametrize("sigma2", [Fraction(10, 3), Fraction(10**5, 3)])
def test_compiled_block_with_wide_brackets_equals_numpy_block(
    sigma2: Fraction, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wider brackets are still correct (only more lanes undecided): most lanes then go
    through the exact fallbacks, which must run in numpy's order on the same bits."""
    monkeypatch.setattr(vectorized, "_ETA_REL", 2.0**-10)
    monkeypatch.setattr(vectorized, "_BRACKET_REL", 2.0**-6)
    numpy_out, fused_out = _both(sigma2, 300, lambda: ChaCha20Random(11))
    np.testing.assert_array_equal(fused_out, numpy_out)


def test_the_scalar_exp_is_the_array_exp_bit_for_bit() -> None:
    """exp_one (the ziggurat's wedge lanes, §2.6) repeats exp_into's operations in order:
    the same float everywhere, so §2.5's error bound is its bound too."""
    rng = np.random.default_rng(5)  # the points only: no noise is drawn
    floor = -708.3964185322641
    points = np.concatenate([
        -rng.random(20_000) * 800.0,  # across the floor
        -rng.random(20_000) * 2.0**-20,  # near 0
        -rng.random(20_000) * 130.0,  # the wedge's range, gamma < 128
        np.nextafter(floor, 0.0) - np.arange(-3, 4) * 2.0**-43,  # around the floor
        [0.0, -0.0, -5e-324, -1e-300, floor, np.nextafter(floor, -1.0), -745.2, -1e6],
    ])  # fmt: skip
    arrays = np.empty_like(points)
    fused.exp_into(points, arrays, np.empty_like(points))
    scalars = np.array([fused.exp_one(x) for x in points.tolist()])
    np.testing.assert_array_equal(scalars.view(np.int64), arrays.view(np.int64))
    assert (scalars[points < floor] == 0.0).all()
    assert (scalars[points >= floor] > 0.0).all()


def test_worker_draws_with_the_compiled_block_and_the_in_place_values() -> None:
    dim = FAST_KERNELS_MIN_DIM
    with NoiseStream(17263857673, dim, rng=ChaCha20Random(5)) as stream:
        assert stream._worker is not None
        assert "fused" in stream._worker._proc.args
        drawn = stream.next()
    key = ChaCha20Random(5).random_bytes(32)
    np.testing.assert_array_equal(
        drawn, vectorized.discrete_gaussian(17263857673, dim, rng=ChaCha20Random(key))
    )


def test_importing_gaussdp_does_not_import_numba() -> None:
    import subprocess
    import sys

    code = "import sys, gaussdp, gaussdp.sampling; print('numba' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_without_numba_the_numpy_kernels_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    monkeypatch.delitem(sys.modules, "gaussdp.sampling._fused")
    monkeypatch.delattr(sys.modules["gaussdp.sampling"], "_fused")
    monkeypatch.setattr(_Kernels, "fused", None)
    assert vectorized._fused_module() is None
    assert not vectorized._use_fused_kernels()
    assert _Kernels.fused is None
    values = vectorized.discrete_gaussian(Fraction(10**4, 7), 100, rng=ChaCha20Random(3))
    assert values.shape == (100,)


def test_the_compiled_kernels_hold_no_fused_multiply_add() -> None:
    # §2.5's error bounds take every product and sum rounded on its own; a contracted
    # x * (1 / ln 2) + 1.5 * 2**52 could also round k differently from its bits' copy.
    import platform
    import re

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"the FMA mnemonics checked are x86-64's, not {platform.machine()}'s")
    import numba

    kernels = (fused.log_into, fused.exp_into, fused.exp_one, fused.gaussian_block,
               fused.compact, fused.ziggurat_block)  # fmt: skip
    for kernel in kernels:
        # compiled anew, as _fused compiles it but uncached (cached code has no assembly)
        fresh = numba.njit(nogil=True, error_model="numpy")(kernel.py_func)
        for signature in kernel.signatures:  # the types _fused_module compiled it for
            fresh.compile(signature)
        asm = "".join(fresh.inspect_asm().values())
        assert "mulsd" in asm or "mulpd" in asm or kernel is fused.compact  # real code
        assert re.search(r"vfn?m(add|sub)", asm) is None  # FMA3's vfmadd/vfmsub/vfnm...


def test_the_self_test_passes_and_refuses_a_broken_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    assert vectorized._fused_agrees(fused)
    real_exp, real_block = fused.exp_into, fused.gaussian_block

    def off_by_2_to_minus_40(values: np.ndarray, out: np.ndarray, rounded: np.ndarray) -> None:
        real_exp(values, out, rounded)
        out *= 1.0 + 2.0**-40

    monkeypatch.setattr(fused, "exp_into", off_by_2_to_minus_40)
    assert vectorized._fused_module() is None
    monkeypatch.setattr(fused, "exp_into", real_exp)

    def flips_a_sign(*args: object) -> int:
        undecided = real_block(*args)
        args[8][0] = -args[8][0]  # type: ignore[index]
        return undecided

    monkeypatch.setattr(fused, "gaussian_block", flips_a_sign)
    assert not vectorized._fused_agrees(fused)


def test_with_numba_jit_disabled_the_numpy_kernels_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    import numba

    # plain-Python numba: correct, but about 100 µs per candidate
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    assert vectorized._fused_module() is None
