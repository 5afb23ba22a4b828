"""DP-SGD on a CUDA device: the same clipped sums as on the CPU, the exact noise from the CPU.

Skipped without CUDA (the rest of tests/ml runs the same code on the CPU).
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

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _step(device: str, mode: str, api: str, sigma: float) -> torch.Tensor:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 6, generator=gen), torch.randint(0, 3, (40,), generator=gen)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "noise_multiplier=0", UserWarning)
        model, optimizer, _ = make_private(
            net,
            torch.optim.SGD(net.parameters(), lr=0.0),
            DataLoader(TensorDataset(x, y), batch_size=10),
            loss_fn=nnf.cross_entropy,
            noise_multiplier=sigma,
            max_grad_norm=0.5,
            delta=1e-5,
            grad_sample_mode=mode,  # type: ignore[arg-type]
            rng=ChaCha20Random(4),
        )
    xb, yb = x[:13].to(device), y[:13].to(device)
    optimizer.zero_grad()
    if api == "backward":
        model.backward(xb, yb)
    else:
        nnf.cross_entropy(model(xb), yb).backward()
    optimizer.step()
    grads = [p.grad for p in net.parameters()]
    assert all(g is not None and g.device.type == device for g in grads)
    return torch.cat([g.reshape(-1) for g in grads if g is not None]).cpu()


@pytest.mark.parametrize("api", ["backward", "idiom"])
@pytest.mark.parametrize("mode", ["functorch", "ghost"])
def test_cuda_step_equals_cpu_step(mode: str, api: str) -> None:
    # No noise: the clipped sums agree up to float rounding.
    torch.testing.assert_close(
        _step("cuda", mode, api, 0.0), _step("cpu", mode, api, 0.0), rtol=1e-4, atol=1e-6
    )
    # Secure noise from the same seed: the same lattice noise, sums within the rounding.
    diff = (_step("cuda", mode, api, 1.0) - _step("cpu", mode, api, 1.0)).abs().max()
    assert float(diff) < 13 * 0.5 / 250 / 4  # B lattice units of γ ≤ C/250, over qN = 4
