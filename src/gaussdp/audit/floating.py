r"""The floating-point attack (Mironov 2012) made concrete, and run against gaussdp.

Textbook DP noise computed in floating point does not have the distribution of the
proof. A sampler that maps one uniform double u = k/2⁵³ (numpy's ``random()``)
through a smooth function — ``rng.laplace`` is ``±b·ln(2u)``, and the inverse-CDF
Gaussian is ``σ·Φ⁻¹(u)`` — can reach at most 2⁵³ values, unevenly spread over the
doubles. Released as ``x + η``, the output for x = 0 is a reachable noise value
exactly, while for x = 1 it is ``fl(1 + η)``, usually a double the sampler never
produces. An attacker who knows the sampler's code (Kerckhoffs) counts the grid
points k that map to the observed output under each hypothesis — the exact
likelihood of that double — and picks the larger; on ties it falls back to the
likelihood ratio of the ideal densities. Seeing one output, it tells the neighbours
0 and 1 apart with accuracy above 0.9, far beyond the ≈0.73 (Laplace, ε = 1) or
0.84 (Gaussian, μ = 2) the noise distribution is supposed to allow
(Mironov, "On Significance of the Least Significant Bits for Differential Privacy",
CCS 2012).

:meth:`gaussdp.Gaussian.release` adds exact discrete Gaussian noise on the grid γℤ
(γ a power of two), so both neighbours' outputs have exactly the support γℤ: the
support test never fires and the best attack is the likelihood-ratio test, whose
accuracy ½(1 + TV) is bounded by the certified ½(1 + δ(0)) of the released lattice
mechanism (DRS Prop 2.12 at ε = 0).

The two naive mechanisms here are deliberately insecure: they exist to be attacked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr, ndtri

from gaussdp._validation import check_int, check_positive, format_bound
from gaussdp.audit.stats import clopper_pearson
from gaussdp.errors import invalid
from gaussdp.mechanisms import Gaussian
from gaussdp.random import RandomSource, check_rng

__all__ = [
    "FloatAttackResult",
    "attack_gaussdp_release",
    "attack_naive_gaussian",
    "attack_naive_laplace",
    "naive_float_gaussian",
    "naive_float_laplace",
]

FloatArray = npt.NDArray[np.float64]
_GRID = 2.0**53  # numpy's random() returns k/2⁵³
_WIDTH = 12  # grid points searched on each side of the inverted one
_ALPHA = 1e-6  # two-sided level of the reported accuracy intervals


def _check_generator(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            invalid("rng", "a numpy.random.Generator (these mechanisms are insecure)", rng)
        )
    return rng


def naive_float_laplace(
    value: float, scale: float, size: int, *, rng: np.random.Generator
) -> FloatArray:
    """INSECURE: ``value + rng.laplace(0, scale)``, the float Laplace mechanism Mironov attacks."""
    return float(value) + _check_generator(rng).laplace(0.0, check_positive("scale", scale), size)


def naive_float_gaussian(
    value: float, sigma: float, size: int, *, rng: np.random.Generator
) -> FloatArray:
    """INSECURE: ``value + σ·Φ⁻¹(u)`` with u = ``rng.random()``, a textbook float Gaussian."""
    sigma = check_positive("sigma", sigma)
    noise = np.asarray(ndtri(_check_generator(rng).random(size)), dtype=np.float64)
    return float(value) + sigma * noise


# Samplers as the attacker models them: u ↦ η (bit-exact), and η ↦ u (approximate).
# numpy's C samplers call the C library's log; the ufunc np.log may use a SIMD
# implementation that differs from it by an ulp (153 of 50,000 uniforms on an AVX-512
# machine), so the bit-exact model takes the C library's value, one at a time.
_libm_log = np.frompyfunc(lambda x: math.log(x) if x > 0.0 else -math.inf, 1, 1)


def _log(x: FloatArray) -> FloatArray:
    return np.asarray(_libm_log(x), dtype=np.float64)


def _laplace_forward(u: FloatArray, b: float) -> FloatArray:
    # numpy's random_laplace: U ≥ ½ → −b·ln(2 − U − U), else b·ln(U + U)
    return np.where(u >= 0.5, 0.0 - b * _log(2.0 - u - u), 0.0 + b * _log(u + u))


def _laplace_inverse(eta: FloatArray, b: float) -> FloatArray:
    return np.where(eta >= 0, 1.0 - np.exp(-eta / b) / 2, np.exp(eta / b) / 2)


def _gaussian_forward(u: FloatArray, s: float) -> FloatArray:
    return s * np.asarray(ndtri(u), dtype=np.float64)


def _gaussian_inverse(eta: FloatArray, s: float) -> FloatArray:
    return np.asarray(ndtr(eta / s), dtype=np.float64)


Model = Callable[[FloatArray, float], FloatArray]


def _preimages(y: FloatArray, x: float, forward: Model, inverse: Model, p: float) -> FloatArray:
    """How many grid points k/2⁵³ the sampler maps to output ``y`` when the input is ``x``."""
    k0 = np.round(inverse(y - x, p) * _GRID)
    count = np.zeros(y.shape)
    for d in range(-_WIDTH, _WIDTH + 1):
        k = np.clip(k0 + d, 1.0, _GRID - 1.0)
        count += (x + forward(k / _GRID, p)) == y
    return count


@dataclass(frozen=True, slots=True)
class FloatAttackResult:
    """Outcome of the one-output distinguishing attack on neighbours x₀ = 0 and x₁ = Δ.

    ``accuracy`` is the fraction of correct guesses over ``trials`` (the world drawn
    uniformly at random each time), ``accuracy_low``/``accuracy_high`` its
    Clopper–Pearson interval at level 1 − 10⁻⁶; ``certified_accuracy`` is the most
    any attack can reach if the mechanism had its claimed guarantee, ½(1 + TV);
    ``support_decided`` is the fraction of outputs the support test settled.
    """

    mechanism: str
    trials: int
    accuracy: float
    accuracy_low: float
    accuracy_high: float
    certified_accuracy: float
    support_decided: float

    def __str__(self) -> str:
        return (
            f"{self.mechanism}: attack accuracy {self.accuracy:.3f} "
            f"[{format_bound(self.accuracy_low, up=False, digits=3)}, "
            f"{format_bound(self.accuracy_high, up=True, digits=3)}] vs at most "
            f"{format_bound(self.certified_accuracy, up=True, digits=3)} under its claimed "
            "guarantee; "
            f"{self.support_decided:.0%} of outputs decided by support alone"
        )


def _result(
    name: str,
    secret: npt.NDArray[np.int64],
    guess: npt.NDArray[np.int64],
    decided: float,
    bound: float,
) -> FloatAttackResult:
    correct = int(np.sum(guess == secret))
    lo, hi = clopper_pearson(correct, secret.size, _ALPHA)
    return FloatAttackResult(name, int(secret.size), correct / secret.size, lo, hi, bound, decided)


def _naive_attack(
    name: str,
    sample: Callable[[float, int], FloatArray],
    forward: Model,
    inverse: Model,
    param: float,
    log_density: Callable[[FloatArray, float], FloatArray],
    bound: float,
    trials: int,
    rng: np.random.Generator,
) -> FloatAttackResult:
    trials = check_int("trials", trials, minimum=1)
    secret = rng.integers(0, 2, trials)
    y = np.where(secret == 0, sample(0.0, trials), sample(1.0, trials))
    c0 = _preimages(y, 0.0, forward, inverse, param)
    c1 = _preimages(y, 1.0, forward, inverse, param)
    fallback = (log_density(y, 1.0) > log_density(y, 0.0)).astype(np.int64)
    guess = np.where(c0 > c1, 0, np.where(c1 > c0, 1, fallback))
    decided = float(np.mean((c0 == 0) != (c1 == 0)))
    return _result(name, secret, guess, decided, bound)


def attack_naive_laplace(
    scale: float, trials: int, *, rng: np.random.Generator
) -> FloatAttackResult:
    """Attack ``naive_float_laplace`` with sensitivity 1 (claimed: (1/scale)-DP).

    Examples
    --------
    >>> r = attack_naive_laplace(1.0, 4000, rng=np.random.default_rng(1))
    >>> r.accuracy > 0.9 > r.certified_accuracy
    True
    """
    b = check_positive("scale", scale)
    rng = _check_generator(rng)
    eps = 1.0 / b
    bound = math.exp(eps) / (1.0 + math.exp(eps))  # ½(1 + TV), TV = (e^ε − 1)/(e^ε + 1)
    return _naive_attack(
        "naive float Laplace (numpy)",
        lambda x, n: naive_float_laplace(x, b, n, rng=rng),
        _laplace_forward,
        _laplace_inverse,
        b,
        lambda y, x: -np.abs(y - x) / b,
        bound,
        trials,
        rng,
    )


def attack_naive_gaussian(
    sigma: float, trials: int, *, rng: np.random.Generator
) -> FloatAttackResult:
    """Attack ``naive_float_gaussian`` with sensitivity 1 (claimed: (1/σ)-GDP)."""
    s = check_positive("sigma", sigma)
    rng = _check_generator(rng)
    bound = 0.5 * (1.0 + Gaussian(sigma=s).delta(0.0))  # DRS Cor 2.13 at ε = 0: TV
    return _naive_attack(
        "naive float Gaussian (numpy, inverse CDF)",
        lambda x, n: naive_float_gaussian(x, s, n, rng=rng),
        _gaussian_forward,
        _gaussian_inverse,
        s,
        lambda y, x: -((y - x) ** 2),
        bound,
        trials,
        rng,
    )


def attack_gaussdp_release(
    sigma: float, trials: int, *, rng: RandomSource | None = None, attacker_seed: int = 0
) -> FloatAttackResult:
    """Run the same attack against :meth:`gaussdp.Gaussian.release` (sensitivity 1).

    The support test asks whether the output lies on the release grid γℤ shifted
    by each input's grid point; both inputs (0 and 1, multiples of γ) give γℤ, so
    it never fires, and the fallback is the likelihood-ratio test (the nearer
    input). The bound is ½(1 + δ(0)) of the released lattice mechanism.
    """
    mech = Gaussian(sigma=check_positive("sigma", sigma))
    trials = check_int("trials", trials, minimum=1)
    source = check_rng(rng)
    lattice = mech.lattice(1)
    gamma = lattice.gamma
    secret = np.random.default_rng(attacker_seed).integers(0, 2, trials)
    y = np.array([float(mech.release(float(s), rng=source)) for s in secret])
    on_grid = np.floor(y / gamma) == y / gamma  # γ is a power of two: exact
    in0 = on_grid  # support of x = 0: γℤ
    in1 = on_grid  # support of x = 1 = (1/γ)·γ: γℤ as well
    guess = np.where(in0 & ~in1, 0, np.where(in1 & ~in0, 1, (y > 0.5).astype(np.int64)))
    decided = float(np.mean(in0 != in1))
    bound = 0.5 * (1.0 + lattice.delta(0.0))
    return _result("gaussdp Gaussian.release", secret, guess, decided, bound)
