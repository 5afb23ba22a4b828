"""Each round-off lemma of gaussdp.accounting._roundoff against mpmath (exact sums)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import fft as sp_fft

from gaussdp.accounting._roundoff import (
    U_EXTENDED,
    U,
    centred_deviations,
    coefficient_error_l1,
    fft_gamma,
    full_weights,
    power,
    power_error,
    power_near_one,
    row_sums,
    tail_dft,
)
from gaussdp.accounting.pld import _LossPMF, _power

MPMATH_DPS = 50  # the mpmath precision of every test here (conftest.py)


def _exact_dft(x: np.ndarray) -> list[mp.mpc]:
    """(DFT x)_j = Σ_i x_i e^{−2πi·ij/N} for j ≤ N/2, in 50-digit arithmetic."""
    n = x.size
    xs = [mp.mpf(float(v)) for v in x]
    out = []
    for j in range(n // 2 + 1):
        out.append(mp.fsum(xs[i] * mp.expjpi(mp.mpf(-2 * ((i * j) % n)) / n) for i in range(n)))
    return out


@pytest.mark.parametrize("n", [60, 96, 125, 128])
@pytest.mark.parametrize("signed", [False, True])
def test_lemma_1_componentwise_forward_dft(n: int, signed: bool) -> None:
    rng = np.random.default_rng(n)
    x = rng.random(n) ** 4  # uneven magnitudes
    if signed:
        x -= x.mean()
    exact = _exact_dft(x)
    computed = sp_fft.rfft(x)
    bound = fft_gamma(n) * float(np.sum(np.abs(x)))
    errors = [abs(mp.mpc(complex(c)) - e) for c, e in zip(computed, exact, strict=True)]
    assert max(errors) <= bound
    assert max(errors) > 0  # the check is not vacuous: round-off happens


@pytest.mark.parametrize("n", [60, 96, 128])
def test_lemma_1_componentwise_inverse_dft(n: int) -> None:
    rng = np.random.default_rng(7 + n)
    half = n // 2 + 1
    y = (rng.standard_normal(half) + 1j * rng.standard_normal(half)) * rng.random(half) ** 3
    y[0] = y[0].real
    if n % 2 == 0:
        y[-1] = y[-1].real
    computed = sp_fft.irfft(y, n)
    w = full_weights(n, half)
    bound = fft_gamma(n) * float(np.sum(w * np.abs(y))) / n
    ys = [mp.mpc(complex(v)) for v in y]
    for i in range(n):
        # x_i = (1/N) Σ_full y_j e^{2πi·ij/N} = (1/N)[y_0 + 2 Re Σ_{0<j<N/2} ... + y_{N/2}(−1)^i]
        total = mp.mpf(0)
        for j in range(half):
            term = ys[j] * mp.expjpi(mp.mpf(2 * ((i * j) % n)) / n)
            total += term.real if w[j] == 1 else 2 * term.real
        assert abs(mp.mpf(float(computed[i])) - total / n) <= bound


@pytest.mark.parametrize("k", [2, 37, 1000, 20_000])
def test_lemma_2_power_evaluation(k: int) -> None:
    rng = np.random.default_rng(k)
    modulus = 1.0 - rng.random(200) ** 2 * (5.0 / k)  # |φ|^k between e^{−5} and 1
    phi = modulus * np.exp(2j * math.pi * rng.random(200))
    powered, _, rho = power(phi, k)
    assert np.all(np.isfinite(rho))
    for c, r, p in zip(phi, rho, powered, strict=True):
        exact = mp.mpc(complex(c)) ** k  # the computed coefficient, raised exactly
        assert abs(mp.mpc(complex(p)) - exact) <= r * abs(mp.mpc(complex(c))) ** k


@pytest.mark.parametrize("k", [3, 500])
def test_lemma_3_power_of_a_perturbed_coefficient(k: int) -> None:
    rng = np.random.default_rng(11 * k)
    e = 1e-13
    exact = (1.0 - rng.random(100) * (3.0 / k)) * np.exp(2j * math.pi * rng.random(100))
    shift = e * rng.random(100) * np.exp(2j * math.pi * rng.random(100))
    computed = exact + shift  # |φ̃ − φ| ≤ e
    powered, mod, rho = power(computed, k)
    bound = power_error(mod, rho, e, k)
    for x, p, b in zip(exact, powered, bound, strict=True):
        assert abs(mp.mpc(complex(p)) - mp.mpc(complex(x)) ** k) <= b


def _exact_power(p: np.ndarray, k: int) -> list[mp.mpf]:
    out = [mp.mpf(1)]
    ps = [mp.mpf(float(v)) for v in p]
    for _ in range(k):
        nxt = [mp.mpf(0)] * (len(out) + len(ps) - 1)
        for i, a in enumerate(out):
            for j, b in enumerate(ps):
                nxt[i + j] += a * b
        out = nxt
    return out


@pytest.mark.parametrize("upper", [True, False])
def test_lemmas_4_and_5_end_to_end_k_fold_power(upper: bool) -> None:
    # A k-fold power through _power: the ℓ1 distance to the exact convolution power,
    # plus the mass outside the window, is within the allowance it reports.
    rng = np.random.default_rng(3)
    p = rng.random(12)
    p /= p.sum()
    k = 9
    base = _LossPMF(1e-2, -5, p, 0.0, 0.0, upper)
    out = _power(base, k, 1e-30)
    exact = _exact_power(p, k)
    offset = out.start - k * base.start
    inside = sum(
        abs(mp.mpf(float(v)) - exact[offset + i])
        for i, v in enumerate(out.probs)
        if 0 <= offset + i < len(exact)
    )
    outside = mp.fsum(exact[j] for j in range(len(exact)) if not 0 <= j - offset < out.probs.size)
    assert inside + outside <= out.fft_l1 + out.slack
    assert out.fft_l1 < 1e-12


@pytest.mark.parametrize("extended", [False, True])
def test_only_surviving_coefficients_are_raised_and_each_bound_holds(extended: bool) -> None:
    # _powered raises only the coefficients whose k-th power can exceed e^{−680}; the
    # others are set to 0 with the bound 1e-290. Against 50-digit DFTs and powers: every
    # coefficient's reported bound holds, and both kinds occur.
    from gaussdp.accounting._roundoff import U_EXTENDED
    from gaussdp.accounting.pld import _powered

    rng = np.random.default_rng(11)
    n, k = 64, 3000
    x = np.zeros(n)
    x[:5] = rng.random(5)
    x /= x.sum()
    phi = sp_fft.rfft(x.astype(np.longdouble) if extended else x)
    unit = U_EXTENDED if extended else U
    e = fft_gamma(n, unit) * float(np.sum(x))
    live, _, err_live = _powered(phi, k, e, extended)
    powered = phi  # raised in place; the others are 0 within 1e-290
    err = np.full(powered.size, 1e-290)
    err[live] = err_live
    exact = _exact_dft(x)
    dead = 0
    for j, (c, bound) in enumerate(zip(powered, err, strict=True)):
        got = mp.mpc(mp.mpf(str(c.real)), mp.mpf(str(c.imag)))
        assert abs(got - exact[j] ** k) <= bound, j
        dead += int(c == 0)
    assert 0 < dead < len(powered)


@pytest.mark.parametrize("n", [1000, 1001])
def test_raised_coefficients_bound_covers_the_whole_spectrum(n: int) -> None:
    # Lemma 4 over the raised coefficients only (_powered keeps their bounds, not N/2):
    # at least the whole spectrum's √(Σ w_j E_j²) with every other E_j = 1e-290, in 50
    # digits (where float64 squares of 1e-290 underflow to 0), with or without survivors.
    from gaussdp.accounting.pld import _coefficients_l1, _live_weights

    half = n // 2 + 1
    weights = full_weights(n, half)
    for live, err in (
        (np.array([0, 3, half - 1]), np.array([1e-13, 2e-14, 1e-300])),
        (np.array([], dtype=np.intp), np.array([])),
    ):
        assert np.array_equal(_live_weights(n, half, live), weights[live])
        full = np.full(half, 1e-290)
        full[live] = err
        with mp.workdps(50):
            terms = zip(weights, full, strict=True)
            exact = mp.sqrt(mp.fsum(mp.mpf(w) * mp.mpf(e) ** 2 for w, e in terms))
            assert mp.mpf(_coefficients_l1(err, _live_weights(n, half, live), n)) >= exact


@pytest.mark.parametrize("n", [7, 100, 29305, 94848, 115200, 945035])
def test_power_lengths_are_5_smooth_and_carry_the_least_round_off(n: int) -> None:
    from gaussdp.accounting.pld import _low_roundoff_len

    size = _low_roundoff_len(n)
    fast = sp_fft.next_fast_len(n, real=True)
    assert n <= size <= max(fast, int(1.1 * n))
    rest = size
    for r in (2, 3, 5):
        while rest % r == 0:
            rest //= r
    assert rest == 1
    assert fft_gamma(size) <= fft_gamma(fast)


def test_coefficient_error_l1_is_parseval_over_the_full_spectrum() -> None:
    err = np.array([1.0, 2.0, 2.0, 1.0])
    w = full_weights(6, 4)
    assert coefficient_error_l1(err, w) == pytest.approx(math.sqrt(1 + 8 + 8 + 1))
    assert fft_gamma(1024) < 200 * U


# -- extended precision (long double FFTs; Lemma 1 with U_EXTENDED, Lemma 6) -------------
@pytest.mark.parametrize("n", [60, 96, 125])
def test_lemma_1_long_double_forward_dft(n: int) -> None:
    rng = np.random.default_rng(100 + n)
    x = (rng.random(n) ** 4).astype(np.longdouble)
    exact = _exact_dft(np.asarray(x, dtype=np.float64))  # x is float64-exact
    computed = sp_fft.rfft(x)
    assert computed.dtype == np.clongdouble
    bound = fft_gamma(n, U_EXTENDED) * float(np.sum(np.abs(x)))
    for c, e in zip(computed, exact, strict=True):
        got = mp.mpc(mp.mpf(str(c.real)), mp.mpf(str(c.imag)))
        assert abs(got - e) <= bound


@pytest.mark.parametrize("upper", [True, False])
def test_extended_k_fold_power_is_within_its_smaller_allowance(upper: bool) -> None:
    # Lemmas 1–6 end to end in extended precision: the ℓ1 distance to the exact power
    # is within the reported allowance, which is far below the float64 one.
    rng = np.random.default_rng(5)
    p = rng.random(12)
    p /= p.sum()
    k = 9
    base = _LossPMF(1e-2, -5, p, 0.0, 0.0, upper)
    out = _power(base, k, 1e-30, extended=True)
    plain = _power(base, k, 1e-30)
    exact = _exact_power(p, k)
    offset = out.start - k * base.start
    inside = sum(
        abs(mp.mpf(float(v)) - exact[offset + i])
        for i, v in enumerate(out.probs)
        if 0 <= offset + i < len(exact)
    )
    outside = mp.fsum(exact[j] for j in range(len(exact)) if not 0 <= j - offset < out.probs.size)
    assert inside + outside <= out.fft_l1 + out.slack
    if U_EXTENDED < U:  # x87 long double
        assert out.fft_l1 < plain.fft_l1 / 100


def test_extended_precision_certifies_small_delta() -> None:
    # The DP-SGD reference at δ = 1e-12: the FFT-only float64 allowance (≈4·10⁻¹⁰) would
    # exceed δ; with the centred coefficients (Lemmas 8–9, ≈3·10⁻¹³) and in long double
    # (≈2·10⁻¹³) it does not, and both brackets hold dp_accounting's 4.2059.
    from gaussdp.accounting import PrivacyLossDistribution

    one = PrivacyLossDistribution.from_subsampled_gaussian(
        1.1, 256 / 60000, value_discretization=1e-4, tail_mass=1e-15 / 14063
    )
    plain = one.self_compose(14063)
    ext = one.self_compose(14063, extended_precision=True)
    b = plain.epsilon(1e-12)
    assert 4.1 < b.lower <= b.upper < 4.25
    if U_EXTENDED < U:
        b = ext.epsilon(1e-12)
        assert 4.1 < b.lower <= b.upper < 4.25
    # Both are certified: the extended bracket sits inside the plain one at δ = 1e-9.
    assert plain.epsilon(1e-9).lower <= ext.epsilon(1e-9).upper <= plain.epsilon(1e-9).upper


# -- the surviving coefficients, centred (Lemmas 8 and 9) --------------------------------
def test_row_sums_are_within_their_bound() -> None:
    rng = np.random.default_rng(21)
    a = rng.standard_normal((4, 1000)) * rng.random((4, 1000)) ** 8
    a[1] = np.abs(a[1])
    sums, c = row_sums(a)
    for row, got in zip(a, sums, strict=True):
        exact = mp.fsum(mp.mpf(float(v)) for v in row)
        bound = U * abs(got) + c * float(np.sum(np.abs(row)))
        assert abs(mp.mpf(float(got)) - exact) <= bound


@pytest.mark.parametrize("n", [1000, 1012500])
def test_lemma_8_centred_deviations(n: int) -> None:
    # D_j = Σ core_i (1 − e^{−2πi·t_i·j/N}) against 50-digit sums: within the bound, and
    # the bound is proportional to Σ core_i|θ_i| (far below γ(N)‖core‖₁ at small j).
    rng = np.random.default_rng(n)
    core = np.exp(-0.5 * (np.arange(-60, 61) / 9.0) ** 2) * (1.0 + 0.1 * rng.random(121))
    core /= core.sum()
    offsets = np.arange(-60, 61, dtype=np.int64)
    js = [0, 1, 2, 7, 40, n // 3, n // 2]
    plus = core[60:]
    minus = np.concatenate(([0.0], core[:60][::-1]))
    dev, err = centred_deviations(plus, minus, js, n)
    assert dev[0] == 0
    assert err[0] == 0
    cs = [mp.mpf(float(v)) for v in core]
    for j, d, b in zip(js, dev, err, strict=True):
        exact = mp.fsum(
            c * (1 - mp.expjpi(mp.mpf(-2 * ((int(t) * j) % n)) / n))
            for c, t in zip(cs, offsets, strict=True)
        )
        assert abs(mp.mpc(complex(d)) - exact) <= b, j
        if n > 10**5 and 0 < j <= 7:  # small angles: Σ core_i|θ_i| ≤ 2π·7·60/N
            assert b < fft_gamma(n) / 100  # what Lemma 1 would charge: γ(N)·‖core‖₁


def test_lemma_8_first_moment_is_within_u_of_itself() -> None:
    # S = Σ_t t(plus_t − minus_t) from exact products (Veltkamp) and error-free sums: within
    # u|S| of the exact rational sum (masses below 2⁻⁹⁰⁰ within their stated share).
    from fractions import Fraction

    from gaussdp.accounting._roundoff import _first_moment

    rng = np.random.default_rng(5)
    plus = rng.random(5000) ** 3
    minus = plus * (1.0 + 1e-9 * rng.standard_normal(5000))  # S ≪ Σ t·plus_t
    minus[0] = 0.0
    plus[17] = 3e-300
    got, bound = _first_moment(plus, minus)
    exact = sum(
        Fraction(t) * (Fraction(float(a)) - Fraction(float(b)))
        for t, (a, b) in enumerate(zip(plus, minus, strict=True))
    )
    assert abs(Fraction(got) - exact) <= Fraction(bound)
    assert bound <= 1.1 * U * abs(got) + 17 * 3e-300 * 1.1 + 1e-300
    assert abs(got) < 1e-6 * float(np.sum(np.arange(5000) * plus))


@pytest.mark.parametrize("n", [1000, 1012500])
def test_lemma_8_skewed_core_is_within_u_of_its_deviation(n: int) -> None:
    # A skewed core (one side falls off 4x faster), centred off its mean: Im D_j is then
    # mostly the first moment's part (2πj/N)·S, which Lemma 8(a) sums to u of itself, so
    # at small angles the whole bound is about 6u of |D_j| (the bound term by term,
    # 13u·Σ_t|plus_t − minus_t||θ_t|, was 14u of it here, 20u on a DP-SGD PLD). Large j (the
    # angles reduced, t·j > N/2) stay within their bound.
    rng = np.random.default_rng(n + 7)
    t = np.arange(0, 200)
    plus = np.exp(-t / 12.0) * (1.0 + 0.1 * rng.random(200))
    minus = np.exp(-t / 3.0) * (1.0 + 0.1 * rng.random(200))
    minus[0] = 0.0
    total = plus.sum() + minus.sum()
    plus /= total
    minus /= total
    js = [1, 2, 7, 40, n // 3, n // 2 - 1]
    dev, err = centred_deviations(plus, minus, js, n)
    ps = [mp.mpf(float(v)) for v in plus]
    ms = [mp.mpf(float(v)) for v in minus]
    for j, d, b in zip(js, dev, err, strict=True):
        exact = mp.fsum(
            ps[i] * (1 - mp.expjpi(mp.mpf(-2 * ((i * j) % n)) / n))
            + ms[i] * (1 - mp.expjpi(mp.mpf(2 * ((i * j) % n)) / n))
            for i in range(200)
        )
        assert abs(mp.mpc(complex(d)) - exact) <= b, j
        if n > 10**5 and j <= 7:
            assert b <= 10 * U * float(abs(exact)), j


@pytest.mark.parametrize("n", [997, 1012500])
def test_lemma_8_blocked_tail_dft(n: int) -> None:
    # The tail's DFT by blocked direct sums against 50-digit sums: within f·‖tail‖₁, and
    # f is of the order of Lemma 1's γ(N).
    rng = np.random.default_rng(n + 1)
    tail = rng.random(301) ** 6
    tail[100:150] = 0.0  # the core's place
    js = [0, 1, 5, 33, n // 2]
    got, factor = tail_dft(tail, js, n)
    assert factor < 2 * fft_gamma(n) + 200 * U
    ts = [mp.mpf(float(v)) for v in tail]
    for j, g in zip(js, got, strict=True):
        exact = mp.fsum(t * mp.expjpi(mp.mpf(-2 * ((i * j) % n)) / n) for i, t in enumerate(ts))
        assert abs(mp.mpc(complex(g)) - exact) <= factor * float(np.sum(tail)), j


@pytest.mark.parametrize("k", [3, 1000, 1_000_000])
def test_lemma_9_power_near_one(k: int) -> None:
    rng = np.random.default_rng(k)
    n = 1012500
    size = 40
    scale = rng.random(size) * min(20.0 / k, 0.1)  # |1 − w|^k from about e^{−20} to 1
    w = scale * (rng.random(size) + 1j * (rng.random(size) - 0.5) * 5.0)
    w[0] = 0.0
    w[1] = 3e-17  # j = 0 of a sub-probability measure
    turns = [int(t) for t in rng.integers(0, 10**15, size)]
    z, mod_up, rho = power_near_one(w, k, turns, n)
    assert np.all(np.isfinite(rho))
    for wj, zj, mj, rj, t in zip(w, z, mod_up, rho, turns, strict=True):
        base = 1 - mp.mpc(complex(wj))
        exact = base**k * mp.expjpi(mp.mpf(-2 * (t % n)) / n)
        assert abs(mp.mpc(complex(zj)) - exact) <= rj * abs(base) ** k
        assert mj >= abs(base)
        assert rj < 1e-12 * max(1.0, k * abs(math.log(abs(complex(1 - wj)))))


def test_lemma_9_declines_a_power_that_would_overflow() -> None:
    # |1 − w̃| = 1 + 1e-13 (round-off of a coefficient of modulus 1) at k = 2**53:
    # (1 − w̃)^k ≈ e^900 used to raise OverflowError; the caller keeps Lemma 2 (ρ = inf).
    w = np.array([-1e-13 + 0j])
    z, _, rho = power_near_one(w, 2**53, [0], 64)
    assert rho[0] == math.inf
    assert z[0] == 0
    assert power_near_one(w, 10**6, [0], 64)[2][0] < 1e-9  # a moderate k keeps the lemma


def test_centred_survivors_each_coefficient_within_its_bound() -> None:
    # A peak of spread 3 on a long, light tail (core window and tail FFT both used): after
    # _centre_survivors every raised coefficient's bound holds against 50-digit DFTs and
    # powers, and the largest bounds fall far below Lemma 3's k·γ(N)·‖p‖₁.
    from gaussdp.accounting.pld import _centre_survivors, _powered

    rng = np.random.default_rng(8)
    n, size, k = 300, 1024, 200
    i = np.arange(n)
    p = np.exp(-0.5 * ((i - 150) / 3.0) ** 2) + 3e-8 * rng.random(n)
    p /= p.sum()
    phi = sp_fft.rfft(p, size)
    gamma = fft_gamma(size)
    live, modulus, err = _powered(phi, k, gamma * float(p.sum()), False)
    before = err.copy()
    _centre_survivors(p, size, k, live, modulus, phi, err, gamma)
    changed = np.nonzero(err < before)[0]
    assert changed.size > 5
    ps = [mp.mpf(float(v)) for v in p]
    bound = np.full(phi.size, 1e-290)  # the coefficients set to 0
    bound[live] = err
    for j in range(0, 150, 3):
        exact = mp.fsum(ps[a] * mp.expjpi(mp.mpf(-2 * ((a * j) % size)) / size) for a in range(n))
        got = mp.mpc(complex(phi[j]))
        assert abs(got - exact**k) <= bound[j], j
    assert err[0] < before[0] / 1000


def test_centred_survivors_also_tighten_a_long_double_power() -> None:
    # After a long double transform Lemma 3 charges k·γ′(N)·‖p‖₁; at large k the float64
    # centred sums beat it at the lowest j, and each coefficient keeps the smaller bound,
    # which holds against 50-digit DFTs and powers.
    from gaussdp.accounting.pld import _centre_survivors, _powered

    rng = np.random.default_rng(8)
    n, size, k = 300, 1024, 20_000
    i = np.arange(n)
    p = np.exp(-0.5 * ((i - 150) / 3.0) ** 2) + 3e-8 * rng.random(n)
    p /= p.sum()
    phi = sp_fft.rfft(p.astype(np.longdouble), size)
    gamma = fft_gamma(size, U_EXTENDED)
    live, modulus, err = _powered(phi, k, gamma * float(p.sum()), True)
    before = err.copy()
    _centre_survivors(p, size, k, live, modulus, phi, err, gamma)
    changed = np.nonzero(err < before)[0]
    if U_EXTENDED < U:  # x87 long double: the centred sums win at j = 0, 1, 2
        assert changed.size >= 2
        assert err[0] < before[0] / 10
    ps = [mp.mpf(float(v)) for v in p]
    assert live[:12].tolist() == list(range(12))
    for j in range(0, 12):
        exact = mp.fsum(ps[a] * mp.expjpi(mp.mpf(-2 * ((a * j) % size)) / size) for a in range(n))
        got = mp.mpc(complex(phi[j]))
        assert abs(got - exact**k) <= err[j], j


def test_centred_survivors_memory_is_bounded() -> None:
    # A short power of a long PMF with a narrow core: nearly every coefficient qualifies,
    # but only the largest few are recomputed (about 10⁶ array elements at most).
    import tracemalloc

    from gaussdp.accounting.pld import _centre_survivors, _powered

    n, size, k = 200_000, 1 << 18, 3
    p = np.full(n, 1e-9)
    p[1000:1020] = 1.0
    p /= p.sum()
    phi = sp_fft.rfft(p, size)
    gamma = fft_gamma(size)
    live, modulus, err = _powered(phi, k, gamma * float(p.sum()), False)
    before = err.copy()
    tracemalloc.start()
    try:
        _centre_survivors(p, size, k, live, modulus, phi, err, gamma)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 150e6
    assert 0 < np.count_nonzero(err < before) <= 100
