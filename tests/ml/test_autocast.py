"""Steps under ``torch.autocast`` compute their norms and sums without it (rev28-ml #10).

Autocast runs float32 ``mm``/``bmm``/``linalg.vecdot`` in bfloat16, so the certified
float32 norm bounds were computed with u = 2⁻⁸ and could underestimate (1.0002·C).
The engine's own work (``optimizer.step()``, ``model.backward``) now runs with autocast
off: a step inside CPU bfloat16 autocast releases the same sum as one outside it.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp.ml import make_private  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402


def _clipped_sum(api: str, mode: str, autocast: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 64, generator=gen) + 0.05 * torch.randn(40, 64, generator=gen)
    y = torch.zeros(40, dtype=torch.long)
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # noise_multiplier=0: a measurement, not private
        model, optimizer, loader = make_private(
            net,
            torch.optim.SGD(net.parameters(), lr=0.0),
            DataLoader(TensorDataset(x, y), batch_size=40),
            loss_fn=nnf.cross_entropy,
            noise_multiplier=0.0,
            max_grad_norm=1.0,
            delta=1e-6,
            rng=ChaCha20Random(0),
            grad_sample_mode=mode,  # type: ignore[arg-type]
        )
    xb, yb = next(iter(loader))
    optimizer.zero_grad()
    if api == "idiom":  # the forward outside: its outputs are the same in both runs
        nnf.cross_entropy(model(xb), yb).backward()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        if api == "backward":
            model.backward(xb, yb)
        optimizer.step()
    return torch.cat([p.grad.reshape(-1) for p in net.parameters()])


@pytest.mark.parametrize("mode", ["auto", "functorch"])
@pytest.mark.parametrize("api", ["backward", "idiom"])
def test_a_step_under_autocast_releases_the_float32_sum(api: str, mode: str) -> None:
    assert torch.equal(_clipped_sum(api, mode, True), _clipped_sum(api, mode, False))
