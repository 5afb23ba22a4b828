"""Federated aggregation: central DPAggregator and the distributed discrete Gaussian (KLS21).

Statistical tests use a stated false-alarm rate α = 1e-6 per test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from gaussdp import Budget  # noqa: E402
from gaussdp.accounting import PLDAccountant, PrivacyFilter, Subsampled  # noqa: E402
from gaussdp.mechanisms import Gaussian, LatticeGaussian  # noqa: E402
from gaussdp.ml import DistributedDiscreteGaussian, DPAggregator, ddg_rho  # noqa: E402
from gaussdp.privacy import zcdp_epsilon  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

ALPHA = 1e-6


# -- central ------------------------------------------------------------------------------
def test_aggregator_clips_each_update() -> None:
    agg = DPAggregator(1.0, 1e-6, dim=3, rng=ChaCha20Random(0))
    out = agg.aggregate([torch.tensor([10.0, 0.0, 0.0]), torch.tensor([0.0, 0.5, 0.0])])
    torch.testing.assert_close(out, torch.tensor([1.0, 0.5, 0.0]), rtol=0, atol=1e-4)


def test_aggregator_noise_std_and_empty_round() -> None:
    agg = DPAggregator(0.5, 2.0, dim=5000, client_rate=0.1, rng=ChaCha20Random(1))
    agg.sample_clients(3)
    noise = agg.aggregate([]).double().numpy()  # an empty round is pure noise
    assert 1.0 <= agg.noise_std / 1.0 < 1.004
    s = float((noise**2).sum() / agg.noise_std**2)
    assert stats.chi2.ppf(ALPHA / 2, noise.size) < s < stats.chi2.isf(ALPHA / 2, noise.size)


def test_aggregator_accounting_matches_the_accountant() -> None:
    full = DPAggregator(1.0, 1.5, dim=4, rng=ChaCha20Random(2))
    sub = DPAggregator(1.0, 1.5, dim=4, client_rate=0.2, rng=ChaCha20Random(2))
    for _ in range(5):
        full.aggregate([torch.ones(4)])
        sub.aggregate([torch.ones(4) for _ in sub.sample_clients(10)])
    # Each round is the lattice mechanism actually run (subsampled at q < 1).
    assert isinstance(full.round_event, LatticeGaussian)
    assert sub.round_event == Subsampled(full.round_event, sample_rate=0.2)
    assert full.privacy_spent(1e-6) == PLDAccountant().compose(full.round_event, 5).epsilon(1e-6)
    assert sub.privacy_spent(1e-6) == PLDAccountant().compose(sub.round_event, 5).epsilon(1e-6)
    # Against the continuous Gaussian: the smoothing slack (≈ 10⁻⁷⁵) and the lattice's
    # μ (an ulp or so below 1/σ) move the bounds by far less than 1e-9.
    accounted = PLDAccountant().compose(Gaussian(1.5), 5).epsilon(1e-6)
    assert full.privacy_spent(1e-6).upper == pytest.approx(accounted.upper, rel=1e-9)
    # Five rounds of σ = 1.5 are exactly one Gaussian with σ = 1.5/√5 (DRS Cor 3.3).
    assert full.privacy_spent(1e-6).upper == pytest.approx(
        Gaussian(1.5 / math.sqrt(5)).epsilon(1e-6), rel=1e-9
    )
    expected = PLDAccountant().compose(Subsampled(Gaussian(1.5), sample_rate=0.2), 5).epsilon(1e-6)
    assert sub.privacy_spent(1e-6).upper == pytest.approx(expected.upper, rel=1e-9)


def test_client_sampling_rate() -> None:
    agg = DPAggregator(1.0, 1.0, dim=1, client_rate=0.25, rng=ChaCha20Random(3))
    counts = [len(agg.sample_clients(100)) for _ in range(400)]
    total, n = sum(counts), 400 * 100
    z = (total - 0.25 * n) / math.sqrt(n * 0.25 * 0.75)
    assert abs(z) < stats.norm.isf(ALPHA / 2)


def test_a_subsampled_round_needs_a_sample_of_its_own() -> None:
    # rev27-ml #5: with client_rate < 1, aggregate() was accepted twice after one
    # sample_clients() (ε 0.245 charged for two releases of one Poisson sample, each as
    # an independently subsampled round), and with no sample at all (1000 updates
    # charged as a round at q = 0.01: ε 0.199).
    spend = PrivacyFilter(Budget(epsilon=10.0, delta=1e-5))
    agg = DPAggregator(1.0, 1.0, dim=4, client_rate=0.01, rng=ChaCha20Random(0), filter=spend)
    without = r"aggregate\(\) must be called once per sample_clients\(\) with client_rate < 1"
    with pytest.raises(RuntimeError, match=without):
        agg.aggregate([torch.ones(4) for _ in range(1000)])  # never sampled
    assert agg.rounds == 0
    assert spend.spent == 0.0
    chosen = agg.sample_clients(1000)
    assert 0 < len(chosen) < 1000
    with pytest.raises(ValueError, match=rf"len\(updates\) must be at most the {len(chosen)} "):
        agg.aggregate([torch.ones(4) for _ in range(len(chosen) + 1)])
    with pytest.raises(TypeError):  # a bad update: refused before the charge, sample kept
        agg.aggregate([[1.0, 2.0, 3.0, 4.0]])
    assert agg.rounds == 0
    assert spend.spent == 0.0
    agg.aggregate([torch.ones(4) for _ in chosen[1:]])  # fewer (a client dropped out)
    once = spend.spent
    assert agg.rounds == 1
    assert once > 0
    with pytest.raises(RuntimeError, match=without):
        agg.aggregate([torch.ones(4) for _ in chosen])  # the same sample again
    assert agg.rounds == 1
    assert spend.spent == once
    agg.aggregate([torch.ones(4) for _ in agg.sample_clients(1000)])  # a new sample
    assert agg.rounds == 2
    # At client_rate 1 every client is in every round: no sample needed.
    full = DPAggregator(1.0, 1.0, dim=4, rng=ChaCha20Random(1))
    for _ in range(2):
        full.aggregate([torch.ones(4) for _ in range(3)])
    assert full.rounds == 2


def test_aggregator_bad_input() -> None:
    with pytest.raises(ValueError, match="clip_norm must be a finite positive real number, got 0"):
        DPAggregator(0, 1.0, dim=2)
    agg = DPAggregator(1.0, 1.0, dim=2, rng=ChaCha20Random(0))
    with pytest.raises(ValueError, match=r"updates\[0\].numel\(\) must be 2, got 3"):
        agg.aggregate([torch.ones(3)])
    with pytest.raises(TypeError, match=r"updates\[1\] must be a torch.Tensor"):
        agg.aggregate([torch.ones(2), [1.0, 2.0]])
    assert agg.rounds == 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_aggregator_counts_a_non_finite_update_as_zero(bad: float) -> None:
    # One rule in gaussdp.ml (clip_factors): refusing it would be a data-dependent output.
    agg = DPAggregator(1.0, 1e-6, dim=2, rng=ChaCha20Random(0))
    out = agg.aggregate([torch.tensor([1.0, bad]), torch.tensor([0.0, 0.5])])
    torch.testing.assert_close(out, torch.tensor([0.0, 0.5]), rtol=0, atol=1e-4)
    assert agg.rounds == 1


def test_aggregator_clips_a_float64_update_beyond_the_float32_range() -> None:
    # Regression: a finite float64 update of 1e39 was cast to float32 (inf) before its
    # clip factor applied, so the released aggregate was inf. Same noise (same seed) with
    # and without the client: the aggregates differ by its clipped update rounded to the
    # lattice, norm ≤ C + γ·√d.
    def run(extra: list[torch.Tensor]) -> torch.Tensor:
        agg = DPAggregator(1.0, 1.0, dim=4, rng=ChaCha20Random(1))
        return agg.aggregate([torch.tensor([0.3, -0.2, 0.1, 0.0]), *extra]).double()

    gamma = DPAggregator(1.0, 1.0, dim=4, rng=ChaCha20Random(1))._noiser.unit
    without = run([])
    for huge in ([1e39, 0, 0, 0], [1e300, 1e300, 0, 0], [-3e38, 2e39, 1e38, 0]):
        with_it = run([torch.tensor(huge, dtype=torch.float64)])
        assert bool(torch.isfinite(with_it).all())
        assert float(torch.linalg.vector_norm(with_it - without)) <= 1.0 + gamma * 2


def test_ddg_counts_a_non_finite_or_overflowing_update_as_zero() -> None:
    def make() -> DistributedDiscreteGaussian:
        return DistributedDiscreteGaussian(
            1.0, 1.0, num_clients=3, dim=6, bits=16, rng=ChaCha20Random(2)
        )

    zero = torch.zeros(6, dtype=torch.float64)
    reference = make().aggregate([zero, zero, torch.full((6,), 0.1, dtype=torch.float64)])
    for bad in (math.nan, math.inf, 1e300):
        update = zero.clone()
        update[3] = bad
        if bad == 1e300:
            update[4] = 1e300  # finite, but the norm overflows float64
        ddg = make()  # the same keys: a zero update gives the reference's messages
        out = ddg.aggregate([update, zero, torch.full((6,), 0.1, dtype=torch.float64)])
        torch.testing.assert_close(out, reference, rtol=0, atol=0)
        assert ddg.rounds == 1


# -- distributed discrete Gaussian ----------------------------------------------------------
def test_ddg_rho_reduces_to_the_discrete_gaussian_when_tau_vanishes() -> None:
    # σ² = 10⁴ makes τ = 10 Σ e^{−2π²σ²k/(k+1)} underflow to 0: ρ = Δ²/(2nσ²) (KLS21 Thm 1).
    assert ddg_rho(300.0, 1e4, num_clients=9, dim=1000) == pytest.approx(300**2 / (2 * 9 * 1e4))
    # With σ = 1/2 the τ term is visible and only makes ρ larger.
    assert ddg_rho(3.0, 0.25, num_clients=4, dim=100) > 9 / (2 * 4 * 0.25)
    with pytest.raises(ValueError, match="sigma2 must be >= 1/4"):
        ddg_rho(1.0, 0.2, num_clients=2, dim=1)


def test_ddg_rho_is_never_below_the_exact_formula() -> None:
    # KLS21 Thm 1 evaluated with mpmath at 50 digits; the float ρ must be ≥ it (once it
    # fell below by up to 4.8e-16 relative in 1233 of 2000 such cases) and close.
    mp = pytest.importorskip("mpmath")
    rng = np.random.default_rng(3)
    with mp.workdps(50):
        for _ in range(300):
            delta2 = float(10 ** rng.uniform(0, 6))
            s2 = float(10 ** rng.uniform(-0.6, 8))
            n, d = int(rng.integers(1, 200)), int(2 ** rng.integers(0, 21))
            big_d, big_s2 = mp.mpf(delta2), mp.mpf(s2)
            tau = 10 * mp.fsum(mp.exp(-2 * mp.pi**2 * big_s2 * k / (k + 1)) for k in range(1, n))
            eps = min(
                mp.sqrt(big_d**2 / (n * big_s2) + 2 * tau * d),
                big_d / mp.sqrt(n * big_s2) + tau * mp.sqrt(d),
            )
            exact = eps**2 / 2
            rho = mp.mpf(ddg_rho(delta2, s2, num_clients=n, dim=d))
            assert exact <= rho <= exact * (1 + mp.mpf(1e-13))


def test_ddg_secure_sum_is_the_modular_sum() -> None:
    ddg = DistributedDiscreteGaussian(
        1.0, 1.0, num_clients=4, dim=30, bits=12, rng=ChaCha20Random(4)
    )
    gen = torch.Generator().manual_seed(0)
    messages = [ddg._encode(torch.randn(30, generator=gen)) for _ in range(4)]
    for m in messages:
        assert m.dtype == np.int64
        assert int(m.min()) >= 0
        assert int(m.max()) < ddg.modulus
    exact = [sum(int(m[j]) for m in messages) % ddg.modulus for j in range(messages[0].size)]
    assert ddg._secure_sum(messages).tolist() == exact


def test_ddg_decodes_the_sum_with_the_stated_noise() -> None:
    n, d, z, c = 8, 256, 1.0, 1.0
    ddg = DistributedDiscreteGaussian(c, z, num_clients=n, dim=d, bits=32, rng=ChaCha20Random(5))
    gen = torch.Generator().manual_seed(1)
    updates = [torch.randn(d, generator=gen) / math.sqrt(d) * 0.9 for _ in range(n)]  # norms < c
    true = torch.stack(updates).sum(0).double()
    decoded = ddg.aggregate(updates).double()
    err = (decoded - true).numpy()
    # Total noise: n clients of N_Z(0, σ_Z²) in lattice units plus rounding (≤ n/4 per
    # coordinate, < 1e-9 of the noise here); its variance is z²c² to within that.
    var = float(ddg.client_sigma2) * n * ddg.gamma**2
    assert var == pytest.approx((z * c) ** 2, rel=1e-9)
    # Σ err²/var is approximately χ²(d) (orthogonal rotation of independent noise).
    s = float((err**2).sum() / var)
    assert stats.chi2.ppf(ALPHA / 2, d) < s < stats.chi2.isf(ALPHA / 2, d)


def test_ddg_privacy_is_worse_than_central_and_improves_with_bits() -> None:
    central = Gaussian(sigma=1.0).rho
    rhos = [
        DistributedDiscreteGaussian(
            1.0, 1.0, num_clients=50, dim=4096, bits=b, rng=ChaCha20Random(0)
        ).rho
        for b in (12, 16, 20, 24)
    ]
    assert all(r > central for r in rhos)
    assert rhos == sorted(rhos, reverse=True)
    assert rhos[-1] == pytest.approx(central, rel=1e-3)


def test_ddg_accounting_over_rounds() -> None:
    ddg = DistributedDiscreteGaussian(
        1.0, 2.0, num_clients=3, dim=8, bits=16, rng=ChaCha20Random(6)
    )
    assert ddg.privacy_spent(1e-5).upper == 0.0
    for _ in range(4):
        ddg.aggregate([torch.ones(8) for _ in range(3)])
    spent = ddg.privacy_spent(1e-5)
    # CKS Cor 13 at 4ρ, rounded up as the zCDP accountant of a filter or ledger does.
    direct = zcdp_epsilon(4 * ddg.rho, 1e-5)
    assert direct <= spent.upper == pytest.approx(direct, rel=1e-14)
    assert spent.lower == 0.0


def test_ddg_bad_input() -> None:
    ddg = DistributedDiscreteGaussian(1.0, 1.0, num_clients=3, dim=8, rng=ChaCha20Random(0))
    with pytest.raises(
        ValueError, match="len\\(updates\\) must be at least num_clients = 3, got 2"
    ):
        ddg.aggregate([torch.ones(8), torch.ones(8)])
    with pytest.raises(ValueError, match="bits must be at most 62"):
        DistributedDiscreteGaussian(1.0, 1.0, num_clients=100, dim=8, bits=8)
    with pytest.raises(ValueError, match="beta must be in \\[0, 1\\)"):
        DistributedDiscreteGaussian(1.0, 1.0, num_clients=3, dim=8, beta=1.0)
