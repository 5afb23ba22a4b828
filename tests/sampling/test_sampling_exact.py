"""The exact resolver of the vectorised path, and the float accuracy it assumes."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from sampling_stats import Z_CRIT

from gaussdp.random import ChaCha20Random
from gaussdp.sampling._exact import LazyUniform, exp_neg_bounds, floor_neg_log
from gaussdp.sampling.vectorized import _fused_module, _torch_kernels

MPMATH_DPS = 120  # the mpmath precision of every test here (conftest.py)

CASES = [
    Fraction(0),
    Fraction(1),
    Fraction(1, 3),
    Fraction(10**20 + 1, 10**20),
    Fraction(7, 2),
    Fraction(744, 1),
    Fraction(123456789, 1000),
    Fraction(1, 10**30),
]


@pytest.mark.parametrize("x", CASES, ids=str)
@pytest.mark.parametrize("precision", [53, 117, 245])
def test_exp_neg_bounds_bracket_the_value(x: Fraction, precision: int) -> None:
    lo, hi = exp_neg_bounds(x, precision)
    # mpmath at 120 digits: 2**precision * exp(-x), compared exactly with the integers.
    value = mpmath.ldexp(mpmath.exp(-mpmath.mpf(x.numerator) / x.denominator), precision)
    assert lo <= value <= hi
    assert hi - lo <= 4 or hi <= 1


def test_exp_neg_bounds_far_tail_is_zero_one() -> None:
    assert exp_neg_bounds(Fraction(10**6), 64) == (0, 1)


def test_lazy_uniform_decisions_are_consistent_with_its_prefix() -> None:
    # A prefix far from exp(-1) is decided without drawing; one next to it draws more bits.
    class NoDraw(ChaCha20Random):
        def random_bytes(self, n: int) -> bytes:
            raise AssertionError("must not draw")

    e_inv_53 = int(mpmath.floor(mpmath.ldexp(mpmath.exp(-1), 53)))
    assert LazyUniform(e_inv_53 - 5, 53, NoDraw(0)).below_exp_neg(Fraction(1))
    assert not LazyUniform(e_inv_53 + 5, 53, NoDraw(0)).below_exp_neg(Fraction(1))
    near = LazyUniform(e_inv_53, 53, ChaCha20Random(1))
    result = near.below_exp_neg(Fraction(1))
    assert near.bits > 53
    u_low = mpmath.ldexp(near.prefix, -near.bits)
    assert result == (u_low < mpmath.exp(-1))


def test_lazy_uniform_frequency() -> None:
    # 20,000 fresh uniforms against exp(-1/2): z-test, |z| < 4.89 at alpha = 1e-6.
    rng = ChaCha20Random(2)
    p = float(mpmath.exp(-0.5))
    hits = sum(LazyUniform(0, 0, rng).below_exp_neg(Fraction(1, 2)) for _ in range(20_000))
    assert abs(hits - 20_000 * p) / np.sqrt(20_000 * p * (1 - p)) < Z_CRIT


@pytest.mark.parametrize("tau", [Fraction(1), Fraction(5, 2), Fraction(10**6 + 1), Fraction(1, 7)])
def test_floor_neg_log_matches_mpmath(tau: Fraction) -> None:
    gen = random.Random(3)  # test inputs only, not a sampler
    for _ in range(40):
        prefix = gen.getrandbits(256) >> gen.randrange(0, 200)
        bits = 256
        u_lo = mpmath.ldexp(prefix, -bits)
        u_hi = mpmath.ldexp(prefix + 1, -bits)
        t = mpmath.mpf(tau.numerator) / tau.denominator
        expected_hi = int(mpmath.floor(-t * mpmath.log(u_lo))) if prefix else None
        expected_lo = int(mpmath.floor(-t * mpmath.log(u_hi)))
        if expected_hi != expected_lo:
            continue  # the 256-bit prefix does not determine the answer
        for hint in (expected_lo, 0, expected_lo + 50, max(expected_lo - 7, 0)):
            u = LazyUniform(prefix, bits, ChaCha20Random(4))
            assert floor_neg_log(u, tau, hint) == expected_lo


def _kernel_results(u: np.ndarray, x: np.ndarray) -> list[tuple[str, list[float], list[float]]]:
    """log(u) and exp(-x) from every kernel the sampler can use on this platform."""
    results = [
        ("numpy", np.log(u).tolist(), np.exp(-x).tolist()),
        # The few-outputs path (docs §4.1) uses math.log / math.exp (the C library's).
        ("math", [math.log(ui) for ui in u.tolist()], [math.exp(-xi) for xi in x.tolist()]),
    ]
    torch_kernels = _torch_kernels()  # the noise worker's (docs §1), where torch is installed
    if torch_kernels is not None:
        log, exp = torch_kernels
        logs, exps = u.copy(), -x
        log(logs)
        exp(exps)
        results.append(("torch", logs.tolist(), exps.tolist()))
    fused = _fused_module()  # the compiled block's own log and exp (docs §2.5), with numba
    if fused is not None:
        logs, exps, scratch = np.empty_like(u), np.empty_like(x), np.empty_like(u)
        fused.log_into(u * 2.0**53, -53, logs, scratch)  # (2m + 1) * 2**-53, as the block
        fused.exp_into(-x, exps, np.empty_like(x))
        results.append(("fused", logs.tolist(), exps.tolist()))
    return results


#: 1022 ln 2 rounded down: e^-x >= 2**-1022 (normal) for x up to it, < 2**-1022 beyond.
EXP_NORMAL = 708.3964185322641


def test_the_normal_range_of_exp_ends_at_1022_ln_2() -> None:
    """EXP_NORMAL, and the compiled exp's floor (docs §2.5), is fl(1022 ln 2), rounded down."""
    with mpmath.workprec(200):
        edge = 1022 * mpmath.log(2)
        assert mpmath.mpf(EXP_NORMAL) <= edge < mpmath.mpf(math.nextafter(EXP_NORMAL, 800))
    fused = _fused_module()
    if fused is not None:  # with numba
        assert fused._EXP_FLOOR == -EXP_NORMAL


def test_log_and_exp_are_within_the_assumed_error() -> None:
    """The fast path assumes relative error <= 2**-44 for log and exp (docs §1).

    Checked here on the arguments the sampler uses, for numpy's, the C library's and (where
    installed) torch's kernels and the compiled block's own (numba, docs §2.5): log at
    u = (2m + 1) / 2**53 over all magnitudes of m, and
    exp(-x) for x in [0, 745]. The observed worst case must be below 2**-50 (a few ulp),
    64 times inside the assumption. For x in (745, 1e300] (the sampler's x reaches about
    2**59·G² at tiny σ²) e^-x is below the smallest subnormal, and exp(-x) must stay
    below 2**-60 (the assumption's second clause; 0 on IEEE).
    """
    gen = np.random.default_rng(5)  # test inputs only, not a sampler
    m = np.concatenate(
        [
            gen.integers(1, 2**52, 4000, dtype=np.int64) >> gen.integers(0, 52, 4000),
            np.array([1, 2, 3, 2**52 - 1, 2**51]),
        ]
    )
    u = (2.0 * m.astype(np.float64) + 1.0) * 2.0**-53
    huge = np.concatenate(
        [np.exp(gen.uniform(math.log(745), math.log(1e300), 300)), [745.5, 2.0**59, 1e300]]
    )
    x = np.concatenate(
        [
            gen.uniform(0, 745, 3000),
            gen.uniform(0, 2, 1000),
            [0.0, 1e-300, 700.0],
            huge,
            # the end of exp's normal range, ± 1 ulp; e^-x normal where the compiled exp's
            # floor (-708.39 once) returned 0
            [EXP_NORMAL, math.nextafter(EXP_NORMAL, 0), math.nextafter(EXP_NORMAL, 800)],
            [708.39, 708.3964],
        ]
    )
    # mpmath once per argument (the costly part), then every kernel against it; past 745,
    # e^-x < e^-745 < 2**-1074: 0 stands for it (below `tiny`, so the 2**-60 clause applies).
    exact_logs = [mpmath.log(mpmath.mpf(ui)) for ui in u.tolist()]
    exact_exps = [mpmath.exp(-mpmath.mpf(xi)) if xi <= 745 else mpmath.mpf(0) for xi in x.tolist()]
    tiny = mpmath.mpf(2) ** -1022
    worst = {}
    for name, logs, exps in _kernel_results(u, x):
        worst[name] = 0.0
        for li, exact in zip(logs, exact_logs, strict=True):
            worst[name] = max(worst[name], float(abs((li - exact) / exact)))
        for ei, exact in zip(exps, exact_exps, strict=True):
            if exact > tiny:
                worst[name] = max(worst[name], float(abs((ei - exact) / exact)))
            elif ei >= 2.0**-60:  # §2.2 needs an underflowing exp to stay below 2**-60
                worst[name] = math.inf
    assert max(worst.values()) < 2.0**-50, worst
