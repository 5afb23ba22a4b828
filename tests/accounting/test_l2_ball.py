# Events accept ints, floats and strings for their Fraction fields (validated at run time):
# mypy: disable-error-code="arg-type"
"""The discrete Gaussian vector mechanism with an L2 sensitivity bound (CKS Thm 14).

Known answers by brute force: every integer vector v with ‖v‖₂² ≤ L² is enumerated,
its exact δ_v(ε) = Σ_y max(0, p(y) − e^ε p(y − v)) (CKS Lemma 9) is summed directly
over a truncated grid with mpmath (40 digits), and the maximum is compared with the
maximal-vector reduction and with the PLD brackets.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import mpmath
import pytest

from gaussdp.accounting import PLDAccountant, PrivacyLossDistribution, RDPAccountant
from gaussdp.accounting.events import (
    MAX_L2_CANDIDATES,
    DiscreteGaussianL2,
    DiscreteGaussianVector,
    check_event,
    l2_worst_case_vectors,
)
from gaussdp.mechanisms import Gaussian

MPMATH_DPS = 40  # the mpmath precision of every test here (conftest.py)
# Outputs |y_j| ≤ _B (plus the shift) are summed. With σ² ≤ 3/2 the P-mass left out is
# below 4·e^{−_B²/(2σ²)} ≈ 1e-20, far below the PLD brackets' width checked here.
_B = 11
_EPSILONS = (0.0, 0.5, 1.0, 2.0)


def _pmf(sigma2: Fraction) -> dict[int, mpmath.mpf]:
    """N_Z(0, σ²) on |y| ≤ _B + 3, normalised over |y| ≤ 60 (CKS Def 1)."""
    s2 = mpmath.mpf(sigma2.numerator) / sigma2.denominator
    norm = mpmath.fsum(mpmath.exp(-(y * y) / (2 * s2)) for y in range(-60, 61))
    return {y: mpmath.exp(-(y * y) / (2 * s2)) / norm for y in range(-_B - 3, _B + 4)}


def _brute_delta(pmf: dict[int, mpmath.mpf], v: tuple[int, ...], eps: float) -> mpmath.mpf:
    """Σ_{y ∈ Z²} max(0, p(y) − e^ε p(y − v)), both coordinates independent, direct sum."""
    factor = mpmath.exp(eps)
    total = mpmath.mpf(0)
    for y1 in range(-_B, _B + 1):
        for y2 in range(-_B, _B + 1):
            p = pmf[y1] * pmf[y2]
            q = pmf[y1 - v[0]] * pmf[y2 - v[1]]
            total += max(mpmath.mpf(0), p - factor * q)
    return total


def _ball(squared: int, dim: int) -> list[tuple[int, ...]]:
    """Every non-zero integer vector in Z^dim with Σ v_j² ≤ ``squared``."""
    r = math.isqrt(squared)
    return [
        v
        for v in itertools.product(range(-r, r + 1), repeat=dim)
        if 0 < sum(a * a for a in v) <= squared
    ]


# -- the reduction to maximal vectors is exact ---------------------------------------------
def _dominated(v: tuple[int, ...], w: tuple[int, ...]) -> bool:
    """|v| sorted is componentwise ≤ w sorted (zeros padded): w dominates v."""
    a = sorted((abs(x) for x in v if x), reverse=True)
    return len(a) <= len(w) and all(x <= y for x, y in zip(a, w, strict=False))


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("squared", [1, 2, 3, 4, 5, 8, 10, 13, 17, 25, 30])
def test_candidates_are_exactly_the_maximal_vectors(squared: int, dim: int) -> None:
    ball = _ball(squared, dim)
    multisets = {tuple(sorted((abs(x) for x in v if x), reverse=True)) for v in ball}
    maximal = {m for m in multisets if not any(m != o and _dominated(m, o) for o in multisets)}
    got = l2_worst_case_vectors(squared, dim)
    assert len(got) == len(set(got))
    assert set(got) == maximal
    assert all(any(_dominated(v, c) for c in got) for v in ball)


@pytest.mark.parametrize("sigma2", [Fraction(1), Fraction(3, 2)])
@pytest.mark.parametrize("squared", [1, 2, 4, 5])
def test_brute_force_max_is_attained_by_a_candidate_and_bracketed(
    sigma2: Fraction, squared: int
) -> None:
    pmf = _pmf(sigma2)
    vectors = _ball(squared, 2)
    event = DiscreteGaussianL2(sigma2, math.sqrt(squared), dimension=2)
    assert event.squared_bound == squared
    padded = [(*c, 0, 0)[:2] for c in event.candidates]
    for eps in _EPSILONS:
        each = {v: _brute_delta(pmf, v, eps) for v in vectors}
        brute = max(each.values())
        by_candidates = max(each[c] for c in padded)
        # The maximal-vector reduction loses nothing (to mpmath precision).
        assert abs(brute - by_candidates) <= mpmath.mpf(10) ** -35
        b = event.delta(eps)
        assert b.lower <= float(brute) <= b.upper
        assert b.upper - b.lower <= 1e-8  # the proven FFT round-off allowance
        acc = PLDAccountant().compose(event)
        a = acc.delta(eps)
        assert a.lower <= float(brute) <= a.upper


def test_increasing_one_coordinate_increases_delta() -> None:
    # The monotone-likelihood-ratio argument in DiscreteGaussianL2's docstring.
    pmf = _pmf(Fraction(1))
    for eps in _EPSILONS:
        deltas = [_brute_delta(pmf, (a, 1), eps) for a in range(4)]
        assert all(x < y for x, y in itertools.pairwise(deltas))


# -- composition: a dominating pair -----------------------------------------------------------
def _loss_pmf(sigma2: Fraction, shifts: tuple[int, ...]) -> dict[int, mpmath.mpf]:
    """Exact P-distribution of 2σ²·L = Σ_j (a_j² − 2a_j y_j) over the truncated outputs."""
    pmf = _pmf(sigma2)
    dist: dict[int, mpmath.mpf] = {0: mpmath.mpf(1)}
    for a in shifts:
        one: dict[int, mpmath.mpf] = {}
        for y in range(-_B, _B + 1):
            key = a * a - 2 * a * y
            one[key] = one.get(key, mpmath.mpf(0)) + pmf[y]
        new: dict[int, mpmath.mpf] = {}
        for k1, p1 in dist.items():
            for k2, p2 in one.items():
                new[k1 + k2] = new.get(k1 + k2, mpmath.mpf(0)) + p1 * p2
        dist = new
    return dist


def _loss_delta(dist: dict[int, mpmath.mpf], sigma2: Fraction, eps: float) -> mpmath.mpf:
    s2 = mpmath.mpf(sigma2.numerator) / sigma2.denominator
    return mpmath.fsum(
        p * -mpmath.expm1(eps - k / (2 * s2)) for k, p in dist.items() if k / (2 * s2) > eps
    )


@pytest.mark.parametrize(
    ("dim", "candidates", "tightness"),
    [
        # (2,) dominates (1, 1): the envelope is that one candidate's PLD.
        (2, ((2,), (1, 1)), 1e-9),
        # (2,) and (1, 1, 1, 1) cross: two runs may use different vectors, and the worst
        # pair of runs is a mixed one at ε = 2; the envelope is then a few % above it.
        (4, ((2,), (1, 1, 1, 1)), 0.1),
    ],
)
def test_two_runs_with_different_vectors_are_bounded(
    dim: int, candidates: tuple[tuple[int, ...], ...], tightness: float
) -> None:
    sigma2 = Fraction(1)
    event = DiscreteGaussianL2(sigma2, 2, dimension=dim)
    assert event.candidates == candidates
    acc = PLDAccountant().compose(event, 2)
    # Brute force over all pairs of vectors; a pair's loss depends only on the multiset
    # of |v_j| (checked for one run above), which keys the cache.
    cache: dict[tuple[int, ...], dict[int, mpmath.mpf]] = {}
    keys = {
        tuple(sorted(abs(a) for a in v1 + v2 if a))
        for v1, v2 in itertools.product(_ball(4, dim), repeat=2)
    }
    for key in keys:
        cache[key] = _loss_pmf(sigma2, key)
    for eps in _EPSILONS:
        worst = max(_loss_delta(dist, sigma2, eps) for dist in cache.values())
        b = acc.delta(eps)
        assert b.lower <= float(worst) <= b.upper
        assert b.upper - float(worst) <= tightness * float(worst)
    # Using the same vector twice is not the worst case when the candidates cross:
    same = max(_loss_delta(cache[tuple(sorted(c + c))], sigma2, 2.0) for c in candidates)
    mixed = max(_loss_delta(dist, sigma2, 2.0) for dist in cache.values())
    assert (mixed > same * (1 + 1e-7)) == (dim == 4)  # by 9e-6 relative


def test_composition_with_other_events_and_rdp() -> None:
    event = DiscreteGaussianL2(Fraction(25, 4), 3, dimension=9)
    assert event.squared_bound == 9
    assert event.rho == pytest.approx(9 / 12.5)  # CKS Thm 14: ⌊L²⌋/(2σ²)
    pld = PLDAccountant().compose(event, 3).compose(Gaussian(sigma=4.0))
    rdp = RDPAccountant().compose(event, 3).compose(Gaussian(sigma=4.0))
    # Every candidate vector, used in all three runs, is a valid lower bound.
    for v in event.candidates:
        fixed = PLDAccountant().compose(DiscreteGaussianVector(event.sigma2, v), 3)
        fixed.compose(Gaussian(sigma=4.0))
        assert fixed.epsilon(1e-6).lower <= pld.epsilon(1e-6).upper
    assert pld.epsilon(1e-6).lower <= pld.epsilon(1e-6).upper <= rdp.epsilon(1e-6).upper


def test_event_properties() -> None:
    e = DiscreteGaussianL2("4", 2.5, dimension=1)
    assert e.candidates == ((2,),)
    assert e.squared_bound == 6
    assert e.rho == 0.5  # only v = ±2 fits in one coordinate
    assert not hasattr(e, "mu")  # not μ-GDP in general at small σ (a false claim, removed)
    assert e.rdp(3.0) == 1.5
    assert check_event(e) is e
    assert e == DiscreteGaussianL2(4, "5/2", 1)
    assert hash(e) == hash(DiscreteGaussianL2(4, "5/2", 1))
    assert DiscreteGaussianL2(1, math.sqrt(3), 3).squared_bound == 3  # float √3 means 3
    assert DiscreteGaussianL2(1, "1.7", 3).squared_bound == 2
    assert l2_worst_case_vectors(4, 4) == ((2,), (1, 1, 1, 1))
    single = PLDAccountant().compose(e)
    assert single.supports(e)
    assert RDPAccountant().supports(e)


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"sigma2": 0, "l2_sensitivity": 1, "dimension": 1}, ValueError, "sigma2 must be"),
        (
            {"sigma2": 1, "l2_sensitivity": 0.5, "dimension": 1},
            ValueError,
            "l2_sensitivity must be at least 1",
        ),
        (
            {"sigma2": 1, "l2_sensitivity": 21, "dimension": 1},
            ValueError,
            "l2_sensitivity must be at most √400",
        ),
        (
            {"sigma2": 1, "l2_sensitivity": 20, "dimension": 10},
            ValueError,
            f"at most {MAX_L2_CANDIDATES} worst-case vectors in dimension 10",
        ),
        ({"sigma2": 1, "l2_sensitivity": 2, "dimension": 0}, ValueError, "dimension must be"),
        ({"sigma2": 1, "l2_sensitivity": 2, "dimension": 2.5}, ValueError, "dimension must be"),
        ({"sigma2": 1, "l2_sensitivity": None, "dimension": 2}, TypeError, "l2_sensitivity"),
        ({"sigma2": 1, "l2_sensitivity": True, "dimension": 2}, TypeError, "l2_sensitivity"),
    ],
)
def test_bad_input_is_refused_with_the_template(
    kwargs: dict[str, object], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc, match=message) as info:
        DiscreteGaussianL2(**kwargs)
    assert ", got " in str(info.value)


def test_limits_point_to_alternatives() -> None:
    with pytest.raises(ValueError, match="DiscreteGaussianVector or use ρ-zCDP"):
        DiscreteGaussianL2(1, 20, dimension=10)
    with pytest.raises(ValueError, match="squared_bound must be small enough"):
        l2_worst_case_vectors(100, 100, limit=10)


def test_worst_case_pld_bad_input() -> None:
    build = PrivacyLossDistribution.from_discrete_gaussian_worst_case
    with pytest.raises(ValueError, match="sensitivities must be a non-empty sequence"):
        build(1, [])
    with pytest.raises(ValueError, match="sensitivities must be vectors with a positive"):
        build(1, [(0, 0)])
    with pytest.raises(TypeError, match="sensitivities must be a sequence of integer"):
        build(1, "12")
    with pytest.raises(TypeError, match="sensitivities must be a sequence of integer"):
        build(1, [3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="sensitivities must be an integer"):
        build(1, [(1.5,)])  # type: ignore[list-item]
    # Signs and order do not matter; duplicates are merged.
    a = build(2, [(2, -1), (1, 2), (0, 2)]).delta(1.0)
    b = build(2, [(2, 1), (2,)]).delta(1.0)
    assert a == b
