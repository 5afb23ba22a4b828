"""Scalar reference samplers: CKS §5, Algorithms 1, 2 and 3, on ints and Fractions.

Canonne, Kamath and Steinke (2020), *The Discrete Gaussian for Differential
Privacy*, §5: exact sampling from uniform random bits with no real arithmetic.

- :func:`bernoulli_exp` -- Bernoulli(exp(-gamma)) for rational gamma >= 0 (CKS Alg 1, Prop 33).
- :func:`discrete_laplace_scalar` -- pmf proportional to exp(-|x| / scale) for rational
  scale (CKS Alg 2, Prop 34).
- :func:`discrete_gaussian_scalar` -- N_Z(0, sigma2) for rational sigma2 (CKS Alg 3, Thm 35).

These follow the paper line by line, favour readability over speed, and are the
definition the vectorised samplers of :mod:`gaussdp.sampling` are tested
against. Every random decision is "a uniform integer in ``[0, b)`` is ``< a``";
no float takes part. Running time is random (CKS §5.4): use the vectorised
samplers, and their fixed-work mode, in a release path.
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt

from gaussdp._validation import check_fraction
from gaussdp.errors import invalid
from gaussdp.random import RandomSource, check_rng

__all__ = [
    "bernoulli",
    "bernoulli_exp",
    "discrete_gaussian_scalar",
    "discrete_laplace_scalar",
]


def bernoulli(p: Fraction, *, rng: RandomSource) -> bool:
    """Return ``True`` with probability ``p``, a rational in ``[0, 1]``.

    A uniform integer in ``[0, denominator)`` is compared with the numerator
    (CKS §5: "Bernoulli(a/b) is a uniform integer in [0, b) below a").
    """
    return rng.randbelow(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction | int, *, rng: RandomSource | None = None) -> bool:
    """Return ``True`` with probability ``exp(-gamma)`` (CKS Alg 1).

    Parameters
    ----------
    gamma : Fraction or int
        A rational ``>= 0``.
    rng : RandomSource, optional
        The source of random bits; ``None`` means the default :class:`~gaussdp.random.SystemRandom`.

    Returns
    -------
    bool
        One draw of Bernoulli(exp(-gamma)).

    Raises
    ------
    ValueError
        If ``gamma < 0``.

    References
    ----------
    CKS §5.1, Algorithm 1 and Proposition 33.

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> rng = ChaCha20Random(1)
    >>> sum(bernoulli_exp(Fraction(1, 2), rng=rng) for _ in range(1000))  # about 607
    629
    """
    gamma = Fraction(gamma)
    if gamma < 0:
        raise ValueError(invalid("gamma", "a rational number >= 0", gamma))
    source = check_rng(rng)
    # CKS Alg 1, gamma > 1: floor(gamma) draws of Bernoulli(exp(-1)), 0 at the first failure,
    whole = gamma.numerator // gamma.denominator
    if gamma > 1:
        for _ in range(whole):
            if not _bernoulli_exp_at_most_one(Fraction(1), source):
                return False
        # then one draw of Bernoulli(exp(-(gamma - floor(gamma)))).
        return _bernoulli_exp_at_most_one(gamma - whole, source)
    return _bernoulli_exp_at_most_one(gamma, source)


def _bernoulli_exp_at_most_one(gamma: Fraction, rng: RandomSource) -> bool:
    """CKS Alg 1 for ``0 <= gamma <= 1``: the parity of the first failing K."""
    k = 1  # CKS Alg 1: K <- 1
    while bernoulli(gamma / k, rng=rng):  # while Bernoulli(gamma / K) succeeds:
        k += 1  #                           K <- K + 1
    return k % 2 == 1  # return 1 iff K is odd


def discrete_laplace_scalar(scale: object, *, rng: RandomSource | None = None) -> int:
    """Return one discrete Laplace draw, pmf proportional to ``exp(-|x| / scale)`` (CKS Alg 2).

    Parameters
    ----------
    scale : int, Fraction, float or str
        A positive rational ``t / s`` (validated by ``check_fraction``; a float
        is taken at its exact binary value).
    rng : RandomSource, optional
        The source of random bits; ``None`` means the default :class:`~gaussdp.random.SystemRandom`.

    Returns
    -------
    int
        One sample.

    Raises
    ------
    TypeError, ValueError
        If ``scale`` is not a positive finite rational; nothing is drawn.

    References
    ----------
    CKS §5.2, Algorithm 2 and Proposition 34.

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> rng = ChaCha20Random(2)
    >>> [discrete_laplace_scalar(Fraction(3, 2), rng=rng) for _ in range(8)]
    [0, -1, 0, 3, 0, 0, 1, -1]
    """
    exact = check_fraction("scale", scale)
    source = check_rng(rng)
    return _discrete_laplace(exact.numerator, exact.denominator, source)


def _discrete_laplace(t: int, s: int, rng: RandomSource) -> int:
    """CKS Alg 2 with scale ``t / s`` (``t``, ``s`` positive integers)."""
    while True:
        u = rng.randbelow(t)  # U <- uniform in {0, ..., t-1}
        if not bernoulli_exp(Fraction(u, t), rng=rng):  # D <- Bernoulli(exp(-U/t)); D = 0: restart
            continue
        v = 0  # V <- number of successes of Bernoulli(exp(-1)) before the first failure
        while bernoulli_exp(1, rng=rng):
            v += 1
        x = u + t * v  # X <- U + t * V
        y = x // s  # Y <- floor(X / s)
        b = rng.randbelow(2)  # B <- Bernoulli(1/2)
        if b == 1 and y == 0:  # if B = 1 and Y = 0, restart
            continue
        return (1 - 2 * b) * y  # return (1 - 2B) * Y


def discrete_gaussian_scalar(sigma2: object, *, rng: RandomSource | None = None) -> int:
    """Return one draw of the discrete Gaussian N_Z(0, sigma2) (CKS Alg 3).

    Parameters
    ----------
    sigma2 : int, Fraction, float or str
        The scale parameter sigma^2, a positive rational (validated by
        ``check_fraction``). The variance of N_Z(0, sigma2) is slightly below
        sigma2 (CKS Prop 21).
    rng : RandomSource, optional
        The source of random bits; ``None`` means the default :class:`~gaussdp.random.SystemRandom`.

    Returns
    -------
    int
        One sample.

    Raises
    ------
    TypeError, ValueError
        If ``sigma2`` is not a positive finite rational; nothing is drawn.

    References
    ----------
    CKS §5.3, Algorithm 3 and Theorem 35.

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> rng = ChaCha20Random(3)
    >>> [discrete_gaussian_scalar(4, rng=rng) for _ in range(8)]
    [-2, 1, 1, 1, 1, -3, -1, 2]
    """
    exact = check_fraction("sigma2", sigma2)
    source = check_rng(rng)
    # CKS Alg 3: t <- floor(sigma) + 1, with floor(sqrt(a/b)) = isqrt(a*b) // b exactly.
    t = isqrt(exact.numerator * exact.denominator) // exact.denominator + 1
    while True:
        y = _discrete_laplace(t, 1, source)  # Y <- discrete Laplace with scale t
        gamma = (abs(y) - exact / t) ** 2 / (2 * exact)  # (|Y| - sigma^2/t)^2 / (2 sigma^2)
        if bernoulli_exp(gamma, rng=source):  # C <- Bernoulli(exp(-gamma)); if C = 1 return Y
            return y
