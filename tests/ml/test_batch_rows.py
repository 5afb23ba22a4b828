"""A DP-SGD step releases at most the examples of the loader's current batch, each once.

rev27-ml finding 1 (rest): tensors made by augmentation carry no batch tag
(gaussdp.ml._batches), so two views of a batch, each with its own backward, gave the
clipped sum a brute-force sensitivity of 2.0·C and the views concatenated into one call
1.975·C, each charged as one subsampled step of sensitivity C. Finding 1c: training from
the user's original (shuffled, fixed-size) loader was accepted and charged as Poisson
sampling. Now the rows of a step's training calls must fit in the batch the private
loader handed out last in this process, and a step needs a batch no step released.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from brute_force import draw, sensitivity, zero_noise_private  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp.ml import make_private  # noqa: E402

REFUSED = (
    r"optimizer\.step\(\) must be called on the examples of the batch last drawn in this "
    r"process from the data loader make_private returned \(iterate that loader, not the "
    r"original one\), each once \(.*\), got '{}'$"
)
Train = Callable[[Any, torch.Tensor, torch.Tensor], None]


def _data(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return 5 * torch.randn(n, 3, generator=gen), torch.randint(0, 2, (n,), generator=gen)


def _net() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _two_views(model: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    nnf.cross_entropy(model(x), y).backward()
    nnf.cross_entropy(model(x + 0.01), y).backward()


def _views_concatenated(model: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    nnf.cross_entropy(model(torch.cat([x, x.flip(1)])), torch.cat([y, y])).backward()


def _two_fast_calls(model: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    model.backward(x, y)
    model.backward(x.clone(), y.clone())


def _micro_batches(model: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    """Untagged copies of the batch in micro-batches, each its own backward: allowed."""
    half = x.shape[0] // 2
    nnf.cross_entropy(model(x[:half].clone()), y[:half]).backward()
    model.backward(x[half:].clone(), y[half:].clone())


def _clipped_sum(net: nn.Module, model: Any, optimizer: Any, train: Train) -> Any:
    def clipped_sum(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        draw(optimizer)  # sample rate 1: the batch holds every example of the dataset
        train(model, inputs, targets)
        optimizer.step()
        flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])  # type: ignore[union-attr]
        return flat.to(torch.float64) * optimizer.expected_batch_size  # type: ignore[no-any-return]

    return clipped_sum


@pytest.mark.parametrize("train", [_two_views, _views_concatenated, _two_fast_calls])
def test_an_example_counted_twice_in_one_step_is_refused_and_nothing_is_charged(
    train: Train,
) -> None:
    x, y = _data()
    net = _net()
    model, optimizer, _ = zero_noise_private(net, x, y, "auto")
    weights = [p.detach().clone() for p in net.parameters()]
    optimizer.zero_grad()
    xb, yb = draw(optimizer)
    train(model, xb, yb)
    with pytest.raises(RuntimeError, match=REFUSED.format("12 rows for a batch of 6 examples")):
        optimizer.step()
    assert optimizer.steps == 0
    assert all(torch.equal(a, p) for a, p in zip(weights, net.parameters(), strict=True))
    with pytest.raises(RuntimeError, match="must follow loss.backward"):
        optimizer.step()  # the sums were dropped
    # Brute force (the reviewer's method): the refused forms never release, the
    # micro-batches of the batch keep the sensitivity at C.
    with pytest.raises(RuntimeError, match=REFUSED.format(".*")):
        sensitivity(_clipped_sum(net, model, optimizer, train), x, y)
    fresh = _net()
    model, optimizer, _ = zero_noise_private(fresh, x, y, "auto")
    clipped = _clipped_sum(fresh, model, optimizer, _micro_batches)
    assert sensitivity(clipped, x, y) <= 1.0 + 1e-5


def test_a_batch_is_released_once_whatever_its_tensors() -> None:
    x, y = _data()
    net = _net()
    model, optimizer, _ = zero_noise_private(net, x, y, "functorch")
    optimizer.zero_grad()
    xb, yb = draw(optimizer)
    _micro_batches(model, xb, yb)
    optimizer.step()
    optimizer.zero_grad()
    model.backward(xb.clone(), yb.clone())  # untagged copies of the released batch
    got = "its last batch, which a step already released"
    with pytest.raises(RuntimeError, match=REFUSED.format(got)):
        optimizer.step()
    assert optimizer.steps == 1
    optimizer.zero_grad()
    model.backward(*draw(optimizer))  # the next batch: a step of its own
    optimizer.step()
    assert optimizer.steps == 2


def test_training_from_the_original_loader_is_refused() -> None:
    # rev27-ml r13: shuffled batches of fixed size are no Poisson sample; they were
    # charged as one (q = 10/500) for every step.
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(500, 3), torch.randint(0, 2, (500,)))
    net = nn.Linear(3, 2)
    original = DataLoader(data, batch_size=10, shuffle=True)
    model, optimizer, private = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.1),
        original,
        max_grad_norm=1.0,
        delta=1e-5,
        noise_multiplier=1.0,
    )
    weights = net.weight.detach().clone()
    xb, yb = next(iter(original))
    optimizer.zero_grad()
    nnf.cross_entropy(model(xb), yb).backward()
    with pytest.raises(RuntimeError, match=REFUSED.format("no batch of it drawn in this process")):
        optimizer.step()
    assert optimizer.steps == 0
    assert optimizer.privacy_spent(1e-5).upper == 0.0
    assert torch.equal(net.weight, weights)
    for xb, yb in private:  # the loader make_private returned
        optimizer.zero_grad()
        nnf.cross_entropy(model(xb), yb).backward()
        optimizer.step()
        break
    assert optimizer.steps == 1


def test_the_current_batch_size_follows_the_batches_handed_out_with_workers() -> None:
    """Workers fetch batches ahead of the one handed out; an abandoned pass leaves none."""
    from gaussdp.ml.dpsgd import DPDataLoader
    from gaussdp.random import ChaCha20Random

    data = TensorDataset(torch.randn(200, 3), torch.zeros(200, dtype=torch.long))
    loader = DPDataLoader(data, sample_rate=0.1, steps=12, rng=ChaCha20Random(0), num_workers=2)
    sampler = loader.batch_sampler
    sizes = []
    for k, (x, _) in enumerate(loader):
        sizes.append((sampler._current_rows, x.shape[0]))  # type: ignore[union-attr]
        if k == 5:
            break  # the workers had fetched further
    for x, _ in loader:
        sizes.append((sampler._current_rows, x.shape[0]))  # type: ignore[union-attr]
    assert len(sizes) == 18
    assert all(recorded == rows for recorded, rows in sizes)
    assert len({rows for _, rows in sizes}) > 1  # Poisson sizes vary: the pairing is tested


def test_rows_kept_by_a_refused_budget_still_count_at_the_retry() -> None:
    """A step the filter refuses keeps its sums; a second view added before the retry
    would count each example twice."""
    from gaussdp import Budget
    from gaussdp.accounting import PrivacyFilter
    from gaussdp.errors import BudgetExceededError

    x, y = _data()
    net = _net()
    model, optimizer, loader = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.1),
        DataLoader(TensorDataset(x, y), batch_size=len(x)),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        delta=1e-5,
        filter=PrivacyFilter(Budget(epsilon=1e-3, delta=1e-5)),
    )
    xb, yb = next(iter(loader))
    optimizer.zero_grad()
    nnf.cross_entropy(model(xb), yb).backward()
    with pytest.raises(BudgetExceededError):
        optimizer.step()  # the sums of the 6 rows are kept for a retry
    nnf.cross_entropy(model(xb + 0.01), yb).backward()  # a second view, untagged
    with pytest.raises(RuntimeError, match=REFUSED.format("12 rows for a batch of 6 examples")):
        optimizer.step()
    assert optimizer.steps == 0
