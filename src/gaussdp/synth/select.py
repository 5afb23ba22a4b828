r"""The exponential mechanism, sampled exactly with Bernoulli(exp(−γ)) coins on rationals.

Candidate ``r`` with integer score ``q_r`` (sensitivity Δ: one privacy unit
changes every score by at most Δ) is chosen with probability

    P[r] ∝ exp(ε·q_r / (2Δ))                    (McSherry & Talwar 2007, Thm 6)

which is ε-DP and, more precisely, ε-bounded-range, hence ε²/8-zCDP
(Cesar & Rogers 2021, Lemma 3.2). No float takes part: with q* = max q_r and
γ_r = ε·(q* − q_r)/(2Δ) ≥ 0 (a rational: ε is taken at its exact binary value),
a candidate drawn uniformly is accepted with probability exp(−γ_r), by CKS
Algorithm 1 (:func:`gaussdp.sampling.bernoulli_exp`), and the draw repeats until
one is accepted. The accepted candidate has probability
exp(−γ_r)/Σ_s exp(−γ_s) = P[r] exactly (rejection sampling); the best
candidate is always accepted, so at most ``len(scores)`` rounds are expected.
Subtracting q* (which depends on the data) only normalises: it does not
change the distribution. Floating-point Gumbel noise — the usual
implementation — is never used.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from gaussdp._validation import check_epsilon, check_int
from gaussdp.errors import invalid
from gaussdp.random import RandomSource, check_rng
from gaussdp.sampling import bernoulli_exp

__all__ = ["exponential_mechanism"]


def exponential_mechanism(
    scores: Sequence[int],
    *,
    epsilon: float,
    sensitivity: int,
    rng: RandomSource | None = None,
) -> int:
    r"""Index of the candidate chosen by the ε-exponential mechanism, sampled exactly.

    Parameters
    ----------
    scores : sequence of int
        One integer score per candidate (higher is better), at least one.
    epsilon : float
        ε ≥ 0 of the mechanism; its exact binary value is used.
    sensitivity : int
        Δ ≥ 1: the most any score changes between neighbouring datasets.
    rng : RandomSource, optional
        The source of random bits; ``None`` is the operating system's CSPRNG.

    Returns
    -------
    int
        The chosen index.

    Notes
    -----
    ε-DP (McSherry & Talwar 2007 Thm 6) and ε-bounded-range, so ε²/8-zCDP
    (Cesar & Rogers 2021 Lemma 3.2); see the module docstring for why the
    sampling is exact.

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> exponential_mechanism([0, 100, 3], epsilon=1.0, sensitivity=1, rng=ChaCha20Random(1))
    1
    """
    eps = Fraction(check_epsilon("epsilon", epsilon))
    delta_q = check_int("sensitivity", sensitivity, minimum=1)
    if isinstance(scores, str | bytes) or not isinstance(scores, Sequence) or not scores:
        raise ValueError(invalid("scores", "a non-empty sequence of integers", scores))
    q = [check_int("score", s) for s in scores]
    source = check_rng(rng)
    best = max(q)
    # γ_r = ε (q* − q_r) / (2Δ): P[accept r] = exp(−γ_r) ∝ exp(ε q_r / (2Δ)).
    gammas = [eps * (best - s) / (2 * delta_q) for s in q]
    n = len(q)
    while True:
        r = source.randbelow(n)
        if bernoulli_exp(gammas[r], rng=source):  # CKS Alg 1
            return r
