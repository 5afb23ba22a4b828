r"""Proven round-off bounds for the FFT convolutions and powers of the PLD code.

Notation: u = 2⁻⁵³ (unit round-off), N the transform length, x a real vector with
‖x‖₁ = Σ|x_i|, φ = rfft(x) its exact DFT, φ̃ the computed one, "full spectrum" the N
coefficients of the complex DFT (the half spectrum that rfft returns, each interior
coefficient counted twice by Hermitian symmetry). docs/accounting.md §3 gives the proofs;
``tests/accounting/test_roundoff.py`` checks every lemma against mpmath.

* Lemma 1 (componentwise DFT error). scipy's pocketfft computes a length-N transform,
  N = r₁r₂⋯r_L (prime factors, with multiplicity; ``next_fast_len`` gives 2, 3, 5), in
  L passes; in each pass an intermediate value is a sum of r twiddled values of the
  previous pass (twiddles of modulus 1, computed to ≤ 2u; a complex product errs by
  ≤ √5·u, Brent–Percival–Zimmermann 2007; r − 1 additions). By induction over the
  passes, every intermediate value v is a sum of ±twiddled inputs over a subset S_v,
  and its computed value errs by at most [Π_{s≤pass}(1 + (r_s + 6)u) − 1]·Σ_{i∈S_v}|x_i|.
  Hence |φ̃_j − φ_j| ≤ γ(N)·‖x‖₁ for every j, with γ(N) = exp(Σ_s (r_s + 6)u) − 1 (+u
  for the 1/N scaling of the inverse transform). The same holds for the inverse
  transform of a coefficient vector y: |ỹ_i − y_i| ≤ γ(N)·(1/N)·Σ_full|y_j|.
* Lemma 2 (evaluating a power). ψ̃ = fl(exp(k·fl(ln|φ̃|))·cis(k·fl(arg φ̃))) satisfies
  |ψ̃ − φ̃^k| ≤ ρ·|φ̃|^k, ρ = 1.01·[k·u·(3|ln|φ̃|| + 3π + 3) + 8u], when that is ≤ 0.01:
  |φ̃| (hypot) and arg (atan2) are correct to 2u relative / 2πu absolute, ln and exp to
  2u relative, cos and sin to 2u absolute, each product to u; the exponent then errs by
  k·2u(1 + |ln|φ̃||) + k·u|ln|φ̃|| (a relative error of the modulus through e^t − 1 ≤
  1.01t), the phase by k·(2πu + πu) (an absolute error on the unit circle), and the
  rest adds 2u (exp) + 2√2u (cos, sin) + √2u (products) < 8u.
* Lemma 3 (a power of a perturbed coefficient). |a^k − b^k| ≤ k·max(|a|, |b|)^{k−1}·|a − b|
  (mean value theorem along the segment), so with |φ̃ − φ| ≤ e:
  |φ̃^k − φ^k| ≤ k·(|φ̃| + e)^{k−1}·e.
* Lemma 4 (from coefficients to outputs). If the coefficients carry errors E_j, the
  outputs of the exact inverse transform err by at most Σ_full E_j² ^(1/2) in ℓ1
  (Parseval: ‖(1/N)F*E‖₂ = ‖E‖₂/√N, and ‖·‖₁ ≤ √N‖·‖₂); the inverse transform's own
  error adds γ(N)·Σ_full|ψ̃_j| in ℓ1 (Lemma 1, summed over the N outputs).
* Lemma 5 (earlier errors). If ‖x̃ − x‖₁ ≤ E, then ‖x̃^{*k} − x^{*k}‖₁ ≤
  k·(‖x̃‖₁ + E)^{k−1}·E and ‖x̃ * ỹ − x * y‖₁ ≤ E_x‖ỹ‖₁ + E_y‖x̃‖₁ + E_xE_y (Young).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = [
    "EXTENDED_PROVEN",
    "U_EXTENDED",
    "U",
    "coefficient_error_l1",
    "fft_gamma",
    "full_weights",
    "power",
    "power_error",
    "propagated_power_error",
]

FloatArray = npt.NDArray[np.float64]
ComplexArray = npt.NDArray[np.complexfloating]

#: Unit round-off of float64.
U = float(np.finfo(np.float64).eps) / 2
#: Unit round-off of ``np.longdouble`` (2⁻⁶⁴ for x87 extended precision; equal to U
#: where long double is double, e.g. on ARM macOS: the bounds then stay valid).
U_EXTENDED = float(np.finfo(np.longdouble).eps) / 2
#: Whether long double is an IEEE binary format (double itself, x87's 64-bit
#: significand, or quad): the arithmetic the round-off lemmas assume. Elsewhere
#: (double-double on ppc64le) extended precision is not used.
EXTENDED_PROVEN = np.finfo(np.longdouble).nmant in (52, 63, 112)


def _prime_factors(n: int) -> list[int]:
    out: list[int] = []
    d = 2
    while d * d <= n:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    if n > 1:
        out.append(n)
    return out


def fft_gamma(n: int, unit: float = U) -> float:
    """γ(N) of Lemma 1: |fl(DFT x)_j − (DFT x)_j| ≤ γ(N)·‖x‖₁ for every j, for a
    transform computed with unit round-off ``unit`` (U: float64; U_EXTENDED: long double)."""
    total = sum(r + 6 for r in _prime_factors(max(n, 2))) + 1
    return math.expm1(total * unit) * (1.0 + 1e-12)


def full_weights(n: int, half: int) -> FloatArray:
    """Multiplicity of each rfft coefficient (length ``half``) in the full spectrum."""
    w = np.full(half, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w


def power(
    phi: ComplexArray, k: int, unit: float = U
) -> tuple[ComplexArray, FloatArray, FloatArray]:
    """φ^k computed as exp(k ln|φ|)·cis(k arg φ), with |φ| and ρ of Lemma 2.

    Computed in ``phi``'s precision (complex128, or clongdouble with ``unit`` =
    U_EXTENDED). Returns the powers, |φ̃| as computed and the relative error bound ρ_j
    (``inf`` where the bound does not apply, ρ > 0.01).
    """
    modulus = np.abs(phi)
    with np.errstate(divide="ignore"):
        log_mod = np.log(modulus)
    out_mod = np.exp(k * log_mod)
    angle = k * np.angle(phi)
    powered = np.empty_like(phi)
    powered.real = out_mod * np.cos(angle)
    powered.imag = out_mod * np.sin(angle)
    with np.errstate(invalid="ignore"):
        log_f = np.abs(log_mod).astype(np.float64)
        rho = k * unit * (3.0 * log_f + 3.0 * math.pi + 3.0) + 8.0 * unit
    rho = np.where(modulus > 0, rho, 0.0)  # φ̃ = 0 gives ψ̃ = 0 exactly
    rho = np.where(rho <= 0.01, rho * 1.01, np.inf)
    return powered, modulus, rho


def power_error(
    modulus: npt.NDArray[np.floating],
    rho: FloatArray,
    e: float | FloatArray,
    k: int,
    unit: float = U,
) -> FloatArray:
    """Bound on |ψ̃_j − φ_j^k| (Lemmas 2 and 3) given |φ̃_j − φ_j| ≤ e (or e_j).

    ``modulus`` is |φ̃| as computed (within 2·``unit`` of the exact modulus, and maybe
    rounded to float64 after that, so M = modulus·(1 + 2.01·unit + 1.01u) bounds it).
    The bound k(M + e)^{k−1}e + ρM^k is evaluated in float64 through logarithms; that
    evaluation's own relative error, ≤ 4ku(|ln M| + 2), is added, and 1e-300 covers a
    power that underflows to 0.
    """
    modulus = np.asarray(modulus, dtype=np.float64)
    big_m = modulus * (1.0 + 2.01 * unit + (1.01 * U if unit != U else 0.0))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_m = np.log(big_m)
        log_me = np.log(big_m + e)
        grown = np.exp((k - 1) * log_me)
        own = np.where(rho > 0, rho * np.exp(k * log_m), 0.0)
        err = k * grown * e + own + 1e-300
        slack = np.exp(4.0 * k * U * (np.abs(np.where(big_m > 0, log_m, log_me)) + 2.0))
        err = err * slack
    return np.asarray(np.where(np.isfinite(err), err, np.inf), dtype=np.float64)


def coefficient_error_l1(err: FloatArray, weights: FloatArray) -> float:
    """Lemma 4, first part: ℓ1 output error from coefficient errors ``err`` (half spectrum)."""
    total = float(np.sum(weights * err * err))
    return math.sqrt(total) * (1.0 + 1e-13) if math.isfinite(total) else math.inf


def propagated_power_error(mass: float, earlier: float, k: int) -> float:
    """Lemma 5: ℓ1 error of the k-fold power of a vector of ℓ1 norm ``mass`` carrying an
    earlier ℓ1 error ``earlier``."""
    if earlier == 0.0:
        return 0.0
    return k * math.exp((k - 1) * math.log(mass + earlier)) * earlier * (1.0 + 1e-13)
