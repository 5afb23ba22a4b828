"""The floating-point attack: it breaks naive float noise and gains nothing on gaussdp.

The attacker's model of numpy's Laplace sampler is checked bit for bit against numpy
first (the attack's only assumption). Accuracy intervals are Clopper–Pearson at level
1 − 10⁻⁶ (the false-alarm rate of each interval assertion). Seeds are fixed.
"""

from __future__ import annotations

import numpy as np
import pytest

from gaussdp.audit.floating import (
    _laplace_forward,
    attack_gaussdp_release,
    attack_naive_gaussian,
    attack_naive_laplace,
    naive_float_laplace,
)
from gaussdp.random import ChaCha20Random


def test_attacker_models_numpy_laplace_bit_for_bit() -> None:
    noise = np.random.Generator(np.random.PCG64(11)).laplace(0.0, 1.0, 50000)
    uniforms = np.random.Generator(np.random.PCG64(11)).random(50000)
    assert np.array_equal(noise, _laplace_forward(uniforms, 1.0))


@pytest.mark.parametrize(
    ("attack", "param"), [(attack_naive_laplace, 1.0), (attack_naive_gaussian, 0.5)]
)
def test_naive_float_noise_is_broken(attack: object, param: float) -> None:
    result = attack(param, 20000, rng=np.random.default_rng(2026))  # type: ignore[operator]
    assert result.accuracy >= 0.9
    # Far beyond what the claimed guarantee allows (0.731 for ε = 1, 0.841 for μ = 2).
    assert result.accuracy_low > result.certified_accuracy + 0.05
    assert result.support_decided > 0.75
    assert "claimed guarantee" in str(result)


def test_same_attack_gains_nothing_on_gaussdp_release() -> None:
    result = attack_gaussdp_release(0.5, 1500, rng=ChaCha20Random(5))
    assert result.support_decided == 0.0  # both neighbours' outputs have support γℤ
    # Not significantly above the certified ½(1 + δ(0)) (the LR attack sits near it).
    assert result.accuracy_low <= result.certified_accuracy
    assert result.certified_accuracy < 0.85


def test_naive_mechanisms_demand_an_explicit_generator() -> None:
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        naive_float_laplace(0.0, 1.0, 3, rng=None)  # type: ignore[arg-type]
