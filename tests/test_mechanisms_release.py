"""Sampling and releasing through the mechanism objects: exact noise, float-safe grids."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from gaussdp import DiscreteGaussian, DiscreteLaplace, Gaussian, LatticeGaussian
from gaussdp.mechanisms import smoothing_log_ratio
from gaussdp.privacy import DiscreteGaussianDistribution, gdp_epsilon
from gaussdp.random import ChaCha20Random, RandomSource

# Two-sided z-test at false-alarm rate α = 1e-6 per test: critical value Φ⁻¹(1 − 5e-7).
Z_CRITICAL = 4.8916


class CountingRandom(RandomSource):
    """A ChaCha20 stream that counts the bytes it hands out."""

    def __init__(self, seed: int) -> None:
        self.inner = ChaCha20Random(seed)
        self.drawn = 0

    def random_bytes(self, n: int) -> bytes:
        self.drawn += n
        return self.inner.random_bytes(n)


class TestDiscreteSampling:
    def test_sample_shapes_and_scalars(self) -> None:
        dg = DiscreteGaussian(9)
        one = dg.sample(rng=ChaCha20Random(1))
        assert isinstance(one, int)
        assert dg.sample((2, 3), rng=ChaCha20Random(1)).shape == (2, 3)
        assert isinstance(DiscreteLaplace(2).sample(rng=ChaCha20Random(1)), int)

    def test_release_adds_exactly_the_sampled_noise(self) -> None:
        for mechanism in (DiscreteGaussian(9), DiscreteLaplace(3)):
            values = np.array([5, -7, 1_000_000])
            noise = mechanism.sample(3, rng=ChaCha20Random(42))
            released = mechanism.release(values, rng=ChaCha20Random(42))
            assert np.array_equal(released, values + noise)
            scalar_noise = mechanism.sample(rng=ChaCha20Random(7))
            assert isinstance(scalar_noise, int)
            assert mechanism.release(10, rng=ChaCha20Random(7)) == 10 + scalar_noise

    def test_release_keeps_huge_integers_exact(self) -> None:
        big = 2**70 + 3
        released = DiscreteGaussian(1).release([big, -big], rng=ChaCha20Random(0))
        noise = DiscreteGaussian(1).sample(2, rng=ChaCha20Random(0))
        assert list(released) == [big + int(noise[0]), -big + int(noise[1])]
        near_limit = np.array([2**63 - 1], dtype=np.uint64)
        wide = DiscreteGaussian(4).release(near_limit, rng=ChaCha20Random(0))
        assert wide[0] - (2**63 - 1) == DiscreteGaussian(4).sample(1, rng=ChaCha20Random(0))[0]

    @pytest.mark.parametrize(
        ("value", "error"),
        [
            (1.5, TypeError),
            (np.array([1.0, 2.0]), TypeError),
            (True, TypeError),
            ("3", TypeError),
            ([1, "a"], TypeError),
        ],
    )
    def test_release_refuses_non_integers_and_draws_nothing(
        self, value: object, error: type[Exception]
    ) -> None:
        rng = CountingRandom(0)
        with pytest.raises(error, match="^value must be an integer or an array of integers"):
            DiscreteGaussian(4).release(value, rng=rng)
        assert rng.drawn == 0

    def test_bare_int_seed_is_refused(self) -> None:
        with pytest.raises(TypeError, match="ChaCha20Random"):
            DiscreteGaussian(4).sample(3, rng=7)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="ChaCha20Random"):
            DiscreteGaussian(4).release(3, rng=7)  # type: ignore[arg-type]


class TestGaussianRelease:
    @pytest.mark.parametrize(
        ("sigma", "sensitivity", "dim"),
        [(4.0, 1.0, 1), (0.3, 1.0, 1), (2.0, 5.0, 10), (100.0, 1.0, 1000)],
    )
    def test_lattice_accounts_for_the_rounding(
        self, sigma: float, sensitivity: float, dim: int
    ) -> None:
        g = Gaussian(sigma=sigma, sensitivity=sensitivity)
        lattice = g.lattice(dim)
        gamma = lattice.gamma
        assert math.frexp(gamma)[0] == 0.5  # a power of two
        root = math.ceil(math.sqrt(dim))
        if dim == 1:
            # Rounded neighbours differ by an integer at most ⌊Δ/γ⌋ + 1.
            assert lattice.lattice_sensitivity == math.floor(sensitivity / gamma) + 1
        else:
            assert lattice.lattice_sensitivity == Fraction(sensitivity) / Fraction(gamma) + root
        # The effective sensitivity grows by at most γ√d (γ⌈√d⌉ with the integer bound).
        assert sensitivity < lattice.effective_sensitivity <= sensitivity + gamma * root
        # The released mechanism's ρ is at most the mechanism's, and within 1% of it.
        assert g.rho * 0.99 < lattice.rho <= g.rho
        # The rounding costs under 1% of the variance (noise growth + worst rounding error).
        assert (lattice.variance + (gamma / 2) ** 2) / g.variance < 1.01

    def test_scalar_release_privacy_is_exact_and_close_to_the_continuous(self) -> None:
        g = Gaussian.calibrate(epsilon=1.0, delta=1e-6)
        lattice = g.lattice(1)
        exact = DiscreteGaussian(lattice.sigma2, int(lattice.lattice_sensitivity))
        assert lattice.epsilon(1e-6) == exact.epsilon(1e-6)
        assert lattice.epsilon(1e-6) == pytest.approx(1.0, rel=1e-3)
        assert lattice.delta(1.0) == exact.delta(1.0)

    @pytest.mark.parametrize("dim", [1, 16, 10_000])
    def test_release_is_as_private_as_the_gaussian(self, dim: int) -> None:
        g = Gaussian(sigma=3.0, sensitivity=2.0)
        lattice = g.lattice(dim)
        assert lattice.mu <= g.mu * (1 + 2e-15)
        assert 0 < lattice.smoothing_slack < 1e-70
        for delta in (1e-3, 1e-6, 1e-12):
            # The certified ε is the GDP one at the lattice's μ plus the (tiny) slack...
            assert lattice.epsilon(delta) >= min(
                gdp_epsilon(lattice.mu, delta),
                DiscreteGaussian(lattice.sigma2, int(lattice.lattice_sensitivity)).epsilon(delta)
                if dim == 1
                else 1,
            )
            # ...and never above what the Gaussian itself reports (up to float rounding).
            assert lattice.epsilon(delta) <= g.epsilon(delta) * (1 + 1e-12)
        for epsilon in (0.0, 0.5, 3.0):
            assert lattice.delta(epsilon) <= g.delta(epsilon) * (1 + 1e-12)

    def test_smoothing_argument_on_a_visible_case(self) -> None:
        # τ² = 1 makes the slack visible (a ≈ 1e-8): the pmf of "continuous N(x, s²), then
        # round y to z with probability ∝ e^{−(z−y)²/(2τ²)}" is within e^{±a} of N_Z(x, s² + τ²).
        tau2, s2 = Fraction(1), Fraction(4)
        a = smoothing_log_ratio(tau2)
        assert 1e-9 < a < 1e-7
        with mpmath.workdps(25):
            tau, s = mpmath.sqrt(tau2), mpmath.sqrt(s2)

            def normaliser(y: mpmath.mpf) -> mpmath.mpf:
                return mpmath.fsum(mpmath.npdf(w, y, tau) for w in range(-30, 31))

            for x, z in [(0, 0), (1, -2)]:
                smoothed = mpmath.quad(
                    lambda y, x=x, z=z: (
                        mpmath.npdf(y, x, s) * mpmath.npdf(z, y, tau) / normaliser(y)
                    ),
                    [-25, x, z, 25],
                )
                weights = [mpmath.exp(-((w - x) ** 2) / (2 * (s2 + tau2))) for w in range(-80, 81)]
                discrete = mpmath.exp(-((z - x) ** 2) / (2 * (s2 + tau2))) / mpmath.fsum(weights)
                assert abs(mpmath.log(discrete / smoothed)) <= a

    def test_released_values_lie_on_the_grid(self) -> None:
        g = Gaussian(sigma=0.7, sensitivity=2.0)
        value = np.array([0.1, -3.3333, 1e6, 17.0])
        out = g.release(value, rng=ChaCha20Random(3))
        assert isinstance(out, np.ndarray)
        steps = out / g.lattice(4).gamma
        assert np.array_equal(steps, np.round(steps))
        scalar = g.release(2.5, rng=ChaCha20Random(3))
        assert isinstance(scalar, float)
        assert (scalar / g.lattice(1).gamma).is_integer()

    def test_noise_has_the_lattice_distribution(self) -> None:
        g = Gaussian(sigma=1.5)
        n = 200_000
        value = np.full(n, 0.3)
        lattice = g.lattice(n)
        noise = g.release(value, rng=ChaCha20Random(11)) - np.rint(value / lattice.gamma) * (
            lattice.gamma
        )
        variance = lattice.variance
        assert variance == pytest.approx(
            lattice.gamma**2 * DiscreteGaussianDistribution(lattice.sigma2).var(), rel=1e-15
        )
        # Mean: z = mean / sqrt(var / n); second moment: fourth moment of a near-normal is 3σ⁴.
        assert abs(float(noise.mean())) / math.sqrt(variance / n) < Z_CRITICAL
        second = float(np.mean(noise**2))
        assert abs(second - variance) / math.sqrt(2 * variance**2 / n) < Z_CRITICAL

    @pytest.mark.parametrize(
        ("value", "error", "message"),
        [
            (float("nan"), ValueError, "value must be a finite real number"),
            ([1.0, float("inf")], ValueError, "value must be a finite real number"),
            ([], ValueError, "value must be a finite real number"),
            ("1.0", TypeError, "value must be a finite real number"),
            (True, TypeError, "value must be a finite real number"),
        ],
    )
    def test_bad_values_draw_nothing(
        self, value: object, error: type[Exception], message: str
    ) -> None:
        rng = CountingRandom(0)
        with pytest.raises(error, match=f"^{message}"):
            Gaussian(sigma=1.0).release(value, rng=rng)
        assert rng.drawn == 0

    def test_lattice_validation(self) -> None:
        with pytest.raises(ValueError, match="^gamma must be a positive power of two, got 0.3$"):
            LatticeGaussian(gamma=0.3, sigma2=Fraction(1), dim=1, sensitivity=1.0)
        with pytest.raises(ValueError, match="^dim must be an integer >= 1, got 0$"):
            Gaussian(sigma=1.0).lattice(0)


def _grid_units(g: Gaussian, value: object, seed: int) -> Fraction:
    """The released value in grid units, exactly (outputs are exact floats below 2**53 units)."""
    out = g.release(value, rng=ChaCha20Random(seed))
    assert isinstance(out, float)
    return Fraction(out) / Fraction(g.lattice(1).gamma)


class TestExactRounding:
    """Inputs are put on the grid once, exactly: ints never pass through float64."""

    @pytest.mark.parametrize("magnitude", [53, 60, 70, 80, 84, 90])
    def test_neighbouring_integers_stay_within_the_charged_sensitivity(
        self, magnitude: int
    ) -> None:
        # γ = 2**(m - 51) keeps indices near 2**51 (the grid limit is 2**52); Δ = 256.75 γ
        # is charged floor(256.75) + 1 = 257 units. With the same seed both releases get
        # the same noise, so outputs differ by exactly the pre-noise grid difference.
        gamma = 2 ** (magnitude - 51)
        g = Gaussian(sigma=float(50 * gamma), sensitivity=256.75 * gamma)
        lattice = g.lattice(1)
        assert lattice.gamma == gamma
        charged = lattice.lattice_sensitivity
        assert charged == 257
        delta = int(Fraction(g.sensitivity))  # neighbours x and x + delta, |delta| <= Δ
        worst = Fraction(0)
        rng = np.random.default_rng(magnitude)
        for k in range(60):
            base = 2**magnitude + int(rng.integers(0, 2**40)) * (gamma // 2**30 or 1)
            # Put x just above a rounding boundary, so x + Δ lands just below one.
            x = base - base % gamma + gamma // 2 + (k % 3) - 1 if gamma > 2 else base
            for value, neighbour in ((x, x + delta), (np.int64(x) if x < 2**63 else x, x - delta)):
                diff = abs(_grid_units(g, value, k) - _grid_units(g, neighbour, k))
                assert diff.denominator == 1
                assert diff <= charged, (magnitude, x, diff)
                worst = max(worst, diff)
        assert worst == charged  # the boundary cases are really exercised

    def test_the_audit_case_is_charged_correctly(self) -> None:
        # The audit: Δ = 256.75·2**32 and values near 1.93e25 gave 258 units (257 charged).
        g = Gaussian(sigma=2.0**40, sensitivity=256.75 * 2**32)
        assert g.lattice(1).gamma == 2**32
        x = 2**84 - 2**42 + 2**31 - 1
        diff = abs(_grid_units(g, x, 1) - _grid_units(g, x + int(256.75 * 2**32), 1))
        assert diff <= 257

    @pytest.mark.parametrize(
        "make",
        [
            int,
            np.int64,
            lambda v: np.array([v], dtype=np.uint64)[0],
            Fraction,
            lambda v: Decimal(v),
            lambda v: np.array([v], dtype=object),
            lambda v: [v, 0.5],
        ],
        ids=["int", "int64", "uint64", "Fraction", "Decimal", "object-array", "list-with-float"],
    )
    def test_every_exact_input_type_rounds_to_the_nearest_grid_point(self, make: object) -> None:
        g = Gaussian(sigma=2.0**14, sensitivity=2.0**20)  # γ = 2**9 for one or two values
        gamma = 2**9
        # Above and below 2**53, ties (2**60 - 2**8 is 2**51 - 1/2 units) and off-ties.
        for v in (2**60 + 2**8, 2**60 + 2**8 + 1, 2**60 - 2**8, 2**60 + 3 * 2**8, 12345, 2**53 + 1):
            value, zero = make(v), make(0)  # type: ignore[operator]
            out = np.asarray(g.release(value, rng=ChaCha20Random(5))).reshape(-1)
            base = np.asarray(g.release(zero, rng=ChaCha20Random(5))).reshape(-1)
            assert g.lattice(out.size).gamma == gamma
            units = (Fraction(float(out[0])) - Fraction(float(base[0]))) / gamma
            assert units == round(Fraction(v, gamma)), v  # round() is half to even

    def test_integer_rounding_matches_the_float_rule_and_ties_go_to_even(self) -> None:
        g = Gaussian(sigma=100.0, sensitivity=4096.0)
        ints = np.array([2, 6, -2, -6, 5, -5, 7], dtype=np.int64)
        assert g.lattice(ints.size).gamma == 4.0
        a = g.release(ints, rng=ChaCha20Random(2))
        b = g.release(ints.astype(np.float64), rng=ChaCha20Random(2))
        c = g.release([Fraction(int(v)) for v in ints], rng=ChaCha20Random(2))
        zero = g.release(np.zeros(ints.size), rng=ChaCha20Random(2))
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal((a - zero) / 4.0, [0, 2, 0, -2, 1, -1, 2])


class TestClampNotRefusal:
    """Whether a value is released never depends on its size (audit: 2**52·γ − 1 was
    released and 2**52·γ, one Δ away, refused, telling the neighbours apart for sure)."""

    def test_neighbours_across_the_grid_limit_are_both_released(self) -> None:
        g = Gaussian(sigma=1.0, sensitivity=1.0)
        lattice = g.lattice(1)
        limit = 2**52 * lattice.gamma  # 17592186044416.0 for γ = 2**-8
        charged = lattice.lattice_sensitivity
        for seed, (x, y) in enumerate([(limit - 1.0, limit), (limit - 0.5, limit + 0.5)]):
            a, b = _grid_units(g, x, seed), _grid_units(g, y, seed)
            assert abs(a - b) <= charged  # same noise: the clamp kept them within Δ
        # Far beyond the limit, every type clamps to exactly ±2**52 grid steps.
        noise = _grid_units(g, 0.0, 7)  # the same seed draws the same noise
        for big in (limit, 1e300, 2**70, np.int64(2**62), Fraction(10**40), Decimal("1e40")):
            assert _grid_units(g, big, 7) - noise == 2**52, big
            assert _grid_units(g, -big, 7) - noise == -(2**52), big  # type: ignore[operator]

    def test_large_int64_with_a_coarse_grid_clamps_with_its_sign(self) -> None:
        # γ = 2**9 > 1: the int64 shift path, which once returned +limit for -2**62.
        g = Gaussian(sigma=2.0**14, sensitivity=2.0**20)
        values = np.array([2**62, -(2**62), 5 * 2**9], dtype=np.int64)
        assert g.lattice(3).gamma == 2**9
        out = g.release(values, rng=ChaCha20Random(3))
        zero = g.release(np.zeros(3, dtype=np.int64), rng=ChaCha20Random(3))
        units = [
            (Fraction(float(o)) - Fraction(float(z))) / 2**9 for o, z in zip(out, zero, strict=True)
        ]
        assert units == [2**52, -(2**52), 5]


class TestExtremeParameters:
    """Extreme but finite parameters get the message template, never OverflowError."""

    @pytest.mark.parametrize(
        ("sigma", "sensitivity", "name"),
        [
            (1e308, 1.0, "sigma"),
            (1.7976931348623157e308, 1e308, "sigma"),
            (1e308, 5e-324, "sensitivity"),
            (1.0, 5e-324, "sensitivity"),
            (5e-324, 1.0, "sigma"),
            (1e-305, 1e300, "sigma"),
        ],
    )
    def test_release_refuses_with_the_template_and_draws_nothing(
        self, sigma: float, sensitivity: float, name: str
    ) -> None:
        rng = CountingRandom(0)
        with pytest.raises(ValueError, match=f"^{name} must be "):
            Gaussian(sigma, sensitivity).release(1.0, rng=rng)
        assert rng.drawn == 0

    def test_huge_but_representable_releases_are_finite(self) -> None:
        out = Gaussian(1e300, 1.0).release([1.0, 2.0], rng=ChaCha20Random(0))
        assert np.all(np.isfinite(out))
        assert np.all(np.abs(out) > 1e290)  # noise of scale 1e300, not lost on the way

    def test_properties_and_samplers_at_extreme_scales(self) -> None:
        assert Gaussian(1e308).variance == math.inf
        rng = ChaCha20Random(0)
        assert isinstance(DiscreteGaussian(Fraction(10**400)).sample(rng=rng), int)
        assert np.asarray(DiscreteGaussian(1e308).sample(3, rng=rng)).dtype == object
        assert isinstance(DiscreteLaplace(Fraction(10**400)).sample(rng=rng), int)
        assert DiscreteGaussian(5e-324).sample(rng=rng) == 0
        assert DiscreteLaplace(5e-324).release(7, rng=rng) == 7


def test_the_release_lattice_is_built_once_per_size() -> None:
    # Gaussian.release reuses the exact lattice (its Fraction arithmetic cost more than
    # a scalar draw); equal mechanisms share it, other sizes get their own.
    assert Gaussian(4.0).lattice(3) is Gaussian(4.0).lattice(3)
    assert Gaussian(4.0).lattice(3) == Gaussian(4.0).lattice(3.0)
    assert Gaussian(4.0).lattice(3).dim == 3
    assert Gaussian(4.0).lattice(1) != Gaussian(4.0).lattice(3)
    assert Gaussian(4.0, 2.0).lattice(1).sensitivity == 2.0
