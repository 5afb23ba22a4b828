"""Per-example independence is checked, not assumed; norms without overflow; inf/NaN rule.

The sensitivity tests are brute force: with no noise, the clipped gradient sum of a
batch is compared with the sum of the batch without example i, for every i, and the
largest difference must be at most C (or the model must be refused).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from brute_force import sensitivity, step_sum, zero_noise_private  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402

from gaussdp.ml import clip_factors, clip_gradients  # noqa: E402
from gaussdp.ml._ghost import (  # noqa: E402
    GHOST_MARGIN,
    ghost_clipped_sums,
    ghost_layers,
)
from gaussdp.ml.dpsgd import _factors_from_squared, _squared_norms_upper  # noqa: E402
from gaussdp.ml.noise import CLIP_MARGIN  # noqa: E402

SHRINK = GHOST_MARGIN / CLIP_MARGIN  # ghost clipping's margin for its float error

CLIP = 1.0


class Centered(nn.Module):
    """Linear → x − x.mean(0) → Linear: parameter-free mixing of examples."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.b(h - h.mean(0))


class FunctionalBatchNorm(nn.Module):
    """Linear → F.batch_norm (batch statistics, no module) → Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.b(nnf.batch_norm(h, None, None, training=True))


def _data(n: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return 5 * torch.randn(n, 4, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def _clipped_sum_fn(
    make: Callable[[], nn.Module], mode: str, api: str = "backward"
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """One private model (no noise, lr 0) and a function returning the batch's clipped sum.

    ``api="backward"``: ``model.backward(x, y)``; ``"idiom"``: ``loss.backward()``.
    """
    torch.manual_seed(0)
    net = make()
    x, y = _data()
    model, optimizer, _ = zero_noise_private(net, x, y, mode, CLIP)

    return step_sum(net, model, optimizer, api)


def _sensitivity(clipped_sum: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> float:
    return sensitivity(clipped_sum, *_data())


def test_the_batched_path_alone_would_break_the_bound() -> None:
    # Why the check exists: ghost clipping on the whole batch of the centred model.
    torch.manual_seed(0)
    net = Centered()
    layers = ghost_layers(net)
    assert layers is not None

    def raw(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        result = ghost_clipped_sums(
            net,
            layers,
            nnf.cross_entropy,
            inputs,
            targets,
            _squared_norms_upper,
            lambda s: _factors_from_squared(s, CLIP),
        )
        assert result is not None
        return torch.cat([result[0][id(p)].reshape(-1) for p in net.parameters()])

    assert _sensitivity(raw) > 1.5 * CLIP


APIS = ["backward", "idiom"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["auto", "functorch"])
def test_centred_model_keeps_sensitivity_c(mode: str, api: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sensitivity = _sensitivity(_clipped_sum_fn(Centered, mode, api))
    assert sensitivity <= CLIP * (1 + 1e-6)
    fallbacks = [w for w in caught if "could not be proven" in str(w.message)]
    # auto: the proof names the mean over the batch, once; ghost clipping never runs.
    assert len(fallbacks) == (1 if mode == "auto" else 0)
    assert all("mean over the batch dimension 0" in str(w.message) for w in fallbacks)


@pytest.mark.parametrize("api", APIS)
def test_centred_model_is_refused_in_ghost_mode(api: str) -> None:
    clipped_sum = _clipped_sum_fn(Centered, "ghost", api)
    x, y = _data()
    with pytest.raises(
        ValueError,
        match=r"grad_sample_mode must be .* cannot prove .*h\.mean\(0\).*mean over the batch",
    ):
        clipped_sum(x, y)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["auto", "functorch", "ghost"])
def test_functional_batch_norm_is_refused_on_every_path(mode: str, api: str) -> None:
    clipped_sum = _clipped_sum_fn(FunctionalBatchNorm, mode, api)
    x, y = _data()
    # ghost: the proof names the call; auto: it warns, then the per-example path refuses.
    message = (
        r"cannot prove .*batch_norm"
        if mode == "ghost"
        else "model must compute each example's output from that example alone"
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "grad_sample_mode='auto'", UserWarning)
        with pytest.raises(ValueError, match=message):
            clipped_sum(x, y)


@pytest.mark.parametrize("api", APIS)
def test_independent_model_stays_on_ghost_path_and_is_rechecked(api: str) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    clipped_sum = _clipped_sum_fn(lambda: net, "ghost", api)
    assert _sensitivity(clipped_sum) <= CLIP * (1 + 1e-6)  # 13 calls, 5 of them checked


# -- norms without overflow, and the inf/NaN rule ---------------------------------------------
@pytest.mark.parametrize("scale", [1.0, 5e19, 1e30, 1e37])
def test_huge_gradients_are_clipped_not_dropped(scale: float) -> None:
    gen = torch.Generator().manual_seed(1)
    grads = {"w": torch.randn(5, 40, 30, generator=gen) * scale, "b": torch.randn(5, 7) * scale}
    factors = clip_factors(grads, 0.5)
    assert bool((factors > 0).all())
    clipped = clip_gradients(grads, 0.5)
    norms = torch.sqrt(
        sum(
            torch.linalg.vector_norm(g.reshape(5, -1), dim=1, dtype=torch.float64) ** 2
            for g in clipped.values()
        )
    )
    assert bool((norms <= 0.5).all())
    assert bool((norms > 0.5 * (1 - 1e-3)).all())


def test_non_finite_gradients_become_zero_rows() -> None:
    g = torch.tensor([[3.0, 4.0], [math.inf, 1.0], [math.nan, 0.0], [-math.inf, math.nan]])
    assert clip_factors({"w": g}, 1.0).tolist()[1:] == [0.0, 0.0, 0.0]
    clipped = clip_gradients({"w": g}, 1.0)["w"]
    assert bool(torch.isfinite(clipped).all())
    assert clipped[1:].abs().sum() == 0
    torch.testing.assert_close(clipped[0], torch.tensor([0.6, 0.8]), rtol=2e-6, atol=0)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["functorch", "ghost"])
def test_an_example_with_a_huge_gradient_contributes_norm_c(mode: str, api: str) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    clipped_sum = _clipped_sum_fn(lambda: net, mode, api)
    x, y = _data(n=1)
    norm = float(torch.linalg.vector_norm(clipped_sum(1e25 * x, y)))
    margin = SHRINK if mode == "ghost" else 1.0
    assert CLIP * margin * (1 - 1e-5) <= norm <= CLIP
