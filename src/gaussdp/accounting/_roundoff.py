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
* Lemma 8 (the surviving coefficients, centred). Around an integer centre c, φ_j =
  ω^{cj}(1 − w_j) with w_j = (1 − m_c) + D_j − ω^{−cj}T_j (core mass m_c, centred core
  deviation D_j = Σ_core p_i(1 − ω^{(i−c)j}), tail DFT T_j): D_j summed term by term with
  exactly reduced angles errs by O(u)·Σ p_i|θ_i| (:func:`centred_deviations`), not by
  γ(N)‖p‖₁; 1 − m_c is correctly rounded (fsum), T_j (blocked direct sums, :func:`tail_dft`)
  errs by about 103u·‖tail‖₁.
* Lemma 9 (a power near 1). (1 − w̃)^k·e^{−2πi·t/N} through log1p and atan2, the turn t
  reduced exactly, errs by ρ|1 − w̃|^k with ρ = O(u)·(k|ln|1 − w̃|| + k|arg(1 − w̃)| + 1)
  (:func:`power_near_one`): no k·u·const term as in Lemma 2.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

__all__ = [
    "EXTENDED_PROVEN",
    "SIN_REL",
    "U_EXTENDED",
    "U",
    "centred_deviations",
    "coefficient_error_l1",
    "fft_gamma",
    "full_weights",
    "power",
    "power_error",
    "power_near_one",
    "propagated_power_error",
    "row_sums",
    "tail_dft",
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


@functools.lru_cache(maxsize=1024)  # a few lengths per composition, each factored once
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


# -- Lemmas 8 and 9: the surviving coefficients, centred --------------------------------
#: Relative accuracy assumed of numpy's float64 ``sin``, in units of u (4 ulp ≤ 8u: the
#: largest error documented for numpy's SIMD implementations; libm's is within 1 ulp).
#: Python's ``math`` functions (glibc: log1p, atan2, exp, cos, sin within 1 ulp, with
#: exact range reduction) are taken to 2u, as in Lemma 2.
SIN_REL = 8.0
#: Lemma 8(a)'s constant for the real terms (in units of u): (1 + (4.73 + SIN_REL)u)²
#: squared and multiplied (2u) and summed (u): 28.7u.
_RE_C = 2.0 * (4.73 + SIN_REL) + 3.2


def row_sums(a: FloatArray) -> tuple[FloatArray, float]:
    """Row sums of the 2-D ``a`` by a pairwise tree of error-free additions.

    Each level adds the two halves with Knuth's TwoSum (s = x + y, z = s − x,
    e = (x − (s − z)) + (y − z): x + y = s + e exactly), so Σ a = (top of the tree) +
    Σ (all e) exactly; the e (≤ u·Σ|a| per level, m = ⌈log₂ n⌉ levels) are summed in any
    order and added at the end. Returns the sums and c with |fl − Σ a| ≤ u|fl| +
    c·Σ|a_row| for every row: c = 1.01·(n + m)·m·u².

    The tree is that of the row padded with zeros to 2^m terms; the first level only
    adds the pairs that hold a term of the second half (a term plus a padding zero is
    itself, with e = 0). The levels run on the transpose, so that each half is one
    contiguous block.
    """
    rows, cols = a.shape
    levels = max(0, (cols - 1).bit_length())
    t = np.ascontiguousarray(a.T)
    corr = np.zeros(rows)
    size = cols
    while size > 1:
        half = 1 << ((size - 1).bit_length() - 1)  # the first half of the padded level
        r = size - half  # pairs with a term in the second half
        x, y = t[:r], t[half:size]
        s = x + y
        z = s - x
        e = s - z
        np.subtract(x, e, out=e)
        np.subtract(y, z, out=z)
        e += z
        corr += e.sum(axis=0)
        t[:r] = s
        size = half
    return t[0] + corr, 1.01 * (cols + levels) * levels * U * U


def _first_moment(plus: FloatArray, minus: FloatArray) -> tuple[float, float]:
    """S = Σ_t t·(plus_t − minus_t) and a bound on |S̃ − S|.

    Veltkamp's split (C = 2²⁷ + 1) writes each mass x ≥ 2⁻⁹⁰⁰ as hi + lo exactly, both
    with at most 26 significant bits, so t·hi and t·lo are exact for integers t < 2²⁶;
    ``math.fsum`` adds the products correctly rounded (u|S̃|). Masses below 2⁻⁹⁰⁰ are
    left out and their Σ t·x (raised) is added to the bound.
    """
    t = np.arange(plus.size, dtype=np.float64)
    if plus.size >= 1 << 26:
        raise ValueError("core window too wide for exact products")
    parts = []
    dropped = 0.0
    for x, sign in ((plus, 1.0), (minus, -1.0)):
        small = x < 2.0**-900
        dropped += float(np.sum(t[small] * np.abs(x[small])))
        big = np.where(small, 0.0, x)
        scaled = big * 134217729.0
        hi = scaled - (scaled - big)
        lo = big - hi
        parts.append(sign * t * hi)
        parts.append(sign * t * lo)
    s = math.fsum(np.concatenate(parts).tolist())  # correctly rounded: u|S̃|
    return s, 1.01 * (U * abs(s) + dropped * (1.0 + 1.01 * (plus.size + 2) * U))


# The cubic part g(θ) = θ − sin θ = θ³·Σ_i (−1)^i θ^{2i}/(2i + 3)! for |θ| ≤ ½: the
# coefficients 1/3!, −1/5!, …, 1/15! (the next term, θ^{17}/17!, is below 0.01u·g(θ)).
_CUBIC_SERIES = tuple((-1.0) ** i / math.factorial(2 * i + 3) for i in range(7))
#: Largest angle whose cubic part is summed as a series (relative error 27u).
_CUBIC_NEAR = 0.5


#: Largest (core width) × (coefficients) whose tables :func:`_centred_tables` keeps
#: between calls (two float64 matrices: 2 MB).
_TABLES_KEPT = 1 << 17


def _centred_tables(size: int, js: tuple[int, ...], n: int) -> tuple[FloatArray, FloatArray, int]:
    """The (t, j) tables of :func:`centred_deviations` that do not depend on the masses:
    fl(sin(x̃))² (the real part's s̃², x̃ = fl(fl(π/N)·r)), g̃_t (the cubic part of the
    imaginary terms, before the factor plus_t − minus_t) and the near limit P.

    The upper and lower sides of one power ask for the same (width, js, N): the last
    tables are kept (:func:`_kept_tables`, at most :data:`_TABLES_KEPT` entries each), the
    same values as formed anew, so the bounds are those of the lemma either way.
    """
    if size * len(js) <= _TABLES_KEPT:
        return _kept_tables(size, js, n)
    return _tables(size, js, n)


def _tables(size: int, js: tuple[int, ...], n: int) -> tuple[FloatArray, FloatArray, int]:
    # The terms as a (t, j) matrix: each j's terms are one column, which row_sums (of
    # the transpose) sums in place without a transposed copy.
    jj = np.asarray(js, dtype=np.int64)[None, :]
    prod = np.arange(size, dtype=np.int64)[:, None] * jj  # t·j, exact
    if (size - 1) * max(js, default=0) > n // 2:
        r = prod % n
        r[r > n // 2] -= n
    else:
        r = prod  # no angle to reduce
    half = r * (math.pi / n)
    s = np.sin(half)
    s *= s
    step = 2.0 * math.pi / n
    theta = half + half  # 2·fl(fl(π/N)·r) = fl(fl(2π/N)·r): the same rounding
    del half, r
    # Near terms: t·j ≤ P with P·fl(2π/N)(1 + 3.01u) < ½ (so t·j < N/2 is not reduced
    # and θ̃ < ½), a prefix of each column, by the series. Far terms, the rest:
    # g̃ = fl(ϑ̃ − sin θ̃), |error| ≤ 14.05u·ϑ̃ + u|g̃| (formed for every term, then the
    # near ones replaced: each term's value is the same elementwise operations).
    limit = math.floor(_CUBIC_NEAR / step * (1.0 - 1e-12))
    g = prod.astype(np.float64)
    g *= step
    g -= np.sin(theta)
    near = prod <= limit
    del prod
    x = theta[near]
    del theta
    y = x * x
    poly = np.full(x.size, _CUBIC_SERIES[-1])
    for coef in _CUBIC_SERIES[-2::-1]:
        poly *= y
        poly += coef
    y *= x
    y *= poly
    g[near] = y
    s.flags.writeable = False
    g.flags.writeable = False
    return s, g, limit


_kept_tables = functools.lru_cache(maxsize=1)(_tables)


def centred_deviations(
    plus: FloatArray, minus: FloatArray, js: list[int], n: int
) -> tuple[ComplexArray, FloatArray]:
    """Lemma 8(a): D_j = Σ_t [plus_t(1 − e^{−iθ_t}) + minus_t(1 − e^{iθ_t})], θ_t = 2π·t·j/N
    (t = 0, 1, …: the core's masses at c + t and c − t), for each j in ``js``, and bounds
    on |D̃_j − D_j|: u-relative to Re D_j and to the first moment's part of Im D_j.

    Pairing ±t: D_j = Σ_t (plus_t + minus_t)·2 sin²(θ_t/2) + i Σ_t (plus_t − minus_t) sin θ_t.
    *Real part.* r_t = t·j mod N is reduced to (−N/2, N/2] exactly (integers), so
    |θ/2| ≤ π/2. x̃ = fl(fl(π/N)·r) = θ/2·(1 + δ), |δ| ≤ 3.01u; since |sin x| ≥ (2/π)|x|
    there, sin(x̃) = sin(x)(1 + δ′), |δ′| ≤ 4.73u, and numpy's sin adds SIN_REL·u: s̃ =
    sin(θ/2)(1 + δ_s), |δ_s| ≤ (4.73 + SIN_REL)u, so each real term fl(fl(plus + minus)·
    fl(s̃²)) errs by ≤ 2(4.73 + SIN_REL)u + 3.1u of itself; :func:`row_sums` adds u of the
    result and c·Re D̃_j (the terms are non-negative).
    *Imaginary part.* With ϑ_t = 2π·t·j/N (not reduced) and g_t = ϑ_t − sin θ_t (sin is
    2π-periodic), Im D_j = L_j − R_j, L_j = (2πj/N)·S, S = Σ_t t(plus_t − minus_t) (the
    core's first moment about c, :func:`_first_moment`), R_j = Σ_t (plus_t − minus_t)·g_t.
    L̃_j = fl(fl(fl(2π/N)·j)·S̃) errs by 4.03u|L̃_j| + 1.01·(2πj/N)·e_S. For t·j ≤
    ⌊½(1 − 10⁻¹²)/fl(2π/N)⌋ (< N/2: not reduced; θ̃_t = fl(fl(2π/N)·t·j) < ½),
    g_t = θ³P(θ²) is summed as the series of
    ``_CUBIC_SERIES`` (Horner on y = θ̃² ≤ ¼ with alternating, fast-falling terms:
    12.3u of P; the rounded coefficients 1.03u; y, θ̃·y and the product 3.02u; the
    truncation 0.01u), and g(θ̃) − g(θ) is at most (θ̃²/2)·3.01u·θ ≤ 9.2u·g(θ̃)
    (g ≥ 0.1645θ³ there): |g̃_t − g_t| ≤ 27u|g̃_t|.
    Otherwise ϑ_t ≥ ½ and g̃_t = fl(ϑ̃_t − fl(sin θ̃_t)) errs by 3.01uϑ_t (ϑ̃) + 3.01u|θ_t|
    + SIN_REL·u|sin θ̃_t| (sin θ̃) + u|g̃_t|: ≤ 14.05u·ϑ̃_t + u|g̃_t|. Each term
    fl(fl(plus − minus)·g̃_t) adds 2.01u of itself; R̃_j is summed by :func:`row_sums`, and
    the difference L̃_j − R̃_j adds u|Im D̃_j|. The first moment's part L_j is where
    Im D_j's size comes from; it is u-relative, instead of (5.1 + SIN_REL)u·Σ_t
    |plus_t − minus_t||θ_t| term by term, and the caller centres the core at its mean
    (|S| ≤ ½), so that L_j is small too.
    """
    size = plus.size
    jj = np.asarray(js, dtype=np.int64)[None, :]
    sin2, g0, limit = _centred_tables(size, tuple(js), n)
    both = plus + minus
    diff = plus - minus
    s = sin2 * both[:, None]
    re, c_re = row_sums(s.T)
    re *= 2.0
    del s
    # Imaginary part: Im D_j = L_j − R_j.
    step = 2.0 * math.pi / n
    jf = np.asarray(js, dtype=np.float64)
    moment, moment_err = _first_moment(plus, minus)
    lin = (step * jf) * moment
    lin_err = 4.03 * U * np.abs(lin) + 1.01 * (step * jf) * (moment_err * (1.0 + 3.01 * U))
    # Σ over j's far terms (t > P // j) of |diff_t|·ϑ̃_t ≤ fl(j·fl(2π/N))·Σ_{t > P//j}
    # t|diff_t|·(1 + 4.01u) (ϑ̃_t, t·|diff_t|, j·step and the product each round once),
    # with the suffix sums of t|diff_t| (non-negative, sequential: within (n + 2)u).
    suffix = np.zeros(size + 1)
    suffix[:size] = np.cumsum((np.arange(size, dtype=np.float64) * np.abs(diff))[::-1])[::-1]
    first = np.full(len(js), size, dtype=np.int64)
    pos = jf > 0
    first[pos] = np.minimum(limit // jj[0, pos] + 1, size)
    far_err = (step * jf) * suffix[first] * (1.0 + 5.0 * U)
    far_err *= 14.05 * U * (1.0 + 1.01 * U) * (1.0 + 1.01 * (size + 2) * U)
    g = g0 * diff[:, None]
    # Each term: |diff|·|g̃ error|·(1 + u) + 2.01u|term|, g's error 27u|g̃| (near) or
    # u|g̃| + 14.05u·ϑ̃ (far), and |diff̃|·|g̃| ≤ (1 + u)|term̃|: 29.1u|term̃| + far_err
    # summed in any order (≤ (n + 2)u relative); row_sums' c·Σ|terms|; u|R̃|.
    total = np.sum(np.abs(g), axis=0) * (1.0 + 1.01 * (size + 2) * U)
    rest, c_rest = row_sums(g.T)
    del g
    rest_err = (29.1 * U * (1.0 + 1.01 * U) + c_rest) * total + far_err + U * np.abs(rest)
    im = lin - rest
    out = re + 1j * im
    err = ((_RE_C + 2.0) * U + c_re) * re + U * np.abs(im) + lin_err + rest_err
    return out, 1.01 * err


#: Block length of :func:`tail_dft`.
TAIL_BLOCK = 32


def _twiddles(
    nb: int, js: tuple[int, ...], n: int
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The inner (s < B) and outer (bB, b < nb) twiddles e^{−2πi·rj/N} of :func:`tail_dft`,
    as (cos, −sin) pairs: the angle reduced exactly (integers), then fl(fl(2π/N)·r)."""
    jj = np.asarray(js, dtype=np.int64)[None, :]
    step = 2.0 * math.pi / n
    out: list[FloatArray] = []
    for idx in (np.arange(TAIL_BLOCK, dtype=np.int64), np.arange(nb, dtype=np.int64) * TAIL_BLOCK):
        r = (idx[:, None] * jj) % n
        r[r > n // 2] -= n
        angle = r * step
        for part in (np.cos(angle), -np.sin(angle)):  # e^{−iθ}
            part.flags.writeable = False
            out.append(part)
    return out[0], out[1], out[2], out[3]


def _tail_twiddles(
    nb: int, js: tuple[int, ...], n: int
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """:func:`_twiddles`, the last ones kept (the upper and lower sides of one power ask
    for the same; at most :data:`_TABLES_KEPT` outer entries: the same values either way)."""
    if nb * len(js) <= _TABLES_KEPT:
        return _kept_twiddles(nb, js, n)
    return _twiddles(nb, js, n)


_kept_twiddles = functools.lru_cache(maxsize=1)(_twiddles)


def tail_dft(tail: FloatArray, js: list[int], n: int) -> tuple[ComplexArray, float]:
    """T_j = Σ_i tail_i·e^{−2πi·ij/N} for each j in ``js``, by blocks, and f with
    |T̃_j − T_j| ≤ f·‖tail‖₁ (Lemma 8(b)): cheaper than a length-N FFT for a few j.

    With B = TAIL_BLOCK, T_j = Σ_b ω^{bBj}·I_bj, I_bj = Σ_{s<B} tail_{bB+s}·ω^{sj}. Every
    twiddle has its angle reduced exactly (integers) and computed to 3.01πu, and cos and
    sin add SIN_REL·u: each errs by at most √2(9.46 + SIN_REL)u =: τ in modulus. The inner
    sums are two real matrix products (any order: γ_B·Σ|tail| each, √2·γ_B in modulus),
    so |Ĩ_b − I_b| ≤ (τ + 1.42γ_B)·m_b (m_b the block's mass); each outer product adds
    τ|Ĩ_b| + 4.03u|ω̃||Ĩ_b| (two products and a difference per part); the outer sums are
    :func:`row_sums` (u of the result and c·Σ|terms| per part). Summed over the blocks
    (Σ m_b = ‖tail‖₁, |T_j| ≤ ‖tail‖₁): f = 1.02·[2τ + 1.42·1.01Bu + 4.03u + 1.42(u + c)].
    """
    block = TAIL_BLOCK
    nb = -(-tail.size // block)
    flat = np.zeros(nb * block)
    flat[: tail.size] = tail
    grid = flat.reshape(nb, block)
    c_in, s_in, c_out, s_out = _tail_twiddles(nb, tuple(js), n)
    # numpy's own loops, not BLAS (whose threads stall on a shared machine).
    inner_re = np.einsum("bs,sj->bj", grid, c_in)
    inner_im = np.einsum("bs,sj->bj", grid, s_in)
    re, c_re = row_sums((c_out * inner_re - s_out * inner_im).T)
    im, c_im = row_sums((c_out * inner_im + s_out * inner_re).T)
    tau = math.sqrt(2.0) * (9.46 + SIN_REL) * U
    factor = 2.0 * tau + 1.42 * 1.01 * block * U + 4.03 * U + 1.42 * (U + max(c_re, c_im))
    return re + 1j * im, 1.02 * factor


def power_near_one(
    w: ComplexArray, k: int, turns: list[int], n: int
) -> tuple[ComplexArray, FloatArray, FloatArray]:
    """Lemma 9: ζ̃_j ≈ (1 − w̃_j)^k·e^{−2πi·turns_j/N} through log1p and atan2.

    Returns ζ̃, an upper bound M_j ≥ |1 − w̃_j| and ρ_j with |ζ̃_j − (1 − w̃_j)^k
    e^{−2πi·turns_j/N}| ≤ ρ_j·|1 − w̃_j|^k (``inf`` where the lemma does not apply).
    With w̃ = a + ib: x = a(a − 2) + b² = |1 − w̃|² − 1 is computed to 3.11u(|a(a − 2)| +
    b²) =: ε_x, ℓ = ½ log1p(x) = ln|1 − w̃| to ½ε_x/(1 + x̃ − ε_x) + 2.01u|ℓ̃|, and
    α = atan2(−b, 1 − a) to 3.1u|α̃| (1 − a rounded to u moves α by at most u|α|;
    |t|/(1 + t²) ≤ |arctan t|). The turn is reduced exactly (integers) and β =
    fl(fl(2π/N)·r) errs by 3.01πu. So k·ℓ errs by ΔL = k·|ℓ̃ − ℓ| + u|kℓ̃| and the phase
    Θ = kα − β by ΔΘ = 3.1ku|α̃| + u|kα̃| + 3.01πu + u|Θ̃|; exp, cos, sin and the two
    products add < 6.3u: ρ = 1.01·(1.01ΔL + ΔΘ + 6.3u) when |1 − w̃|² ∈ (½, 2), ΔL ≤ 0.01
    and ρ ≤ 0.01.
    Unlike Lemma 2 no term is k·u·const: the errors are relative to k·|ln|1 − w̃|| and
    k·|arg(1 − w̃)|, both small for the coefficients that matter.
    """
    size = w.size
    out = np.zeros(size, dtype=np.complex128)
    mod_up = np.zeros(size)
    rho = np.full(size, np.inf)
    turn_step = 2.0 * math.pi / n
    for idx, value in enumerate(w.tolist()):
        a, b = value.real, value.imag
        big_a = a * (a - 2.0)
        big_b = b * b
        x = big_a + big_b
        eps_x = 3.11 * U * (abs(big_a) + big_b)
        if not (x - eps_x > -0.5 and x + eps_x < 1.0):
            continue  # |1 − w̃|² outside (½, 2) (or NaN): the caller keeps Lemma 2
        ell = 0.5 * math.log1p(x)
        d_ell = 0.5 * eps_x / (1.0 + x - eps_x) + 2.01 * U * abs(ell)
        big_l = k * ell
        d_big_l = (k * d_ell + U * abs(big_l)) * 1.01
        alpha = math.atan2(-b, 1.0 - a)
        r = turns[idx] % n
        if r > n // 2:
            r -= n
        beta = turn_step * r
        phase = k * alpha - beta
        d_phase = (3.1 * k * U * abs(alpha) + U * abs(k * alpha) + 3.01 * math.pi * U) * 1.01
        d_phase += U * abs(phase) * 1.01
        if d_big_l > 0.01 or big_l > 700.0:
            continue  # (700: exp(k·ℓ) would overflow, at ℓ > 0 from round-off and k ~ 2**53)
        r_j = 1.01 * (1.01 * d_big_l + d_phase + 6.3 * U)
        if r_j > 0.01:
            continue
        modulus = math.exp(big_l)
        out[idx] = complex(modulus * math.cos(phase), modulus * math.sin(phase))
        rho[idx] = r_j
        # |ℓ| < ½ ln 2 here: exp's 2u and the sum's rounding (u|ℓ|) stay below 4u.
        mod_up[idx] = math.exp(ell + d_ell) * (1.0 + 4.0 * U)
    return out, mod_up, rho
