"""Random augmentation in the dataset draws from secret per-example states (gaussdp.ml._fetch).

rev28-ml #5: a dataset's ``__getitem__`` drawing from torch's global generator (flips,
crops) got its augmentation from the script's public seed, by position in the fetch
order: removing one example shifted every later example's augmentation (5.54·C).
"""

from __future__ import annotations

import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset  # noqa: E402
from torch.utils.data.dataloader import default_collate  # noqa: E402

from gaussdp.ml import DPDataLoader, make_private  # noqa: E402
from gaussdp.ml._fetch import SecretFetch  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402


class Draws(Dataset):  # type: ignore[type-arg]
    """Example i draws ``counts[i]`` numbers from torch's generator and returns the last."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def __len__(self) -> int:
        return len(self.counts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.rand(self.counts[i])[-1:], torch.tensor(0)


class Augmented(Dataset):  # type: ignore[type-arg]
    """The reviewer's flip and shift (torchvision-style), and a per-example loss weight."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> None:
        self.x, self.y, self.w = x, y, w

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        v = self.x[i]
        if torch.rand(()) < 0.5:  # RandomHorizontalFlip(p=0.5)
            v = v.flip(0)
        shift = int(torch.randint(-1, 2, ()))  # RandomCrop-like translation
        return v.roll(shift), torch.stack([self.y[i].double(), self.w[i].double()])


def _private(data: Dataset, seed: int | None, workers: int = 0):  # type: ignore[no-untyped-def,type-arg]
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # noise_multiplier=0: a measurement, not private
        made = make_private(
            net,
            torch.optim.SGD(net.parameters(), lr=0.0),
            DataLoader(data, batch_size=len(data), num_workers=workers),  # q = 1
            loss_reduction="sum",
            noise_multiplier=0.0,
            max_grad_norm=1.0,
            delta=1e-6,
            rng=None if seed is None else ChaCha20Random(seed),
        )
    return net, made


def _fetched(counts: list[int], *, script_seed: int, seed: int) -> torch.Tensor:
    torch.manual_seed(script_seed)
    _, (_, _, loader) = _private(Draws(counts), seed)
    torch.manual_seed(script_seed)
    state = torch.get_rng_state()
    xb, _ = next(iter(loader))
    assert torch.equal(torch.get_rng_state(), state)  # the script's generator is left alone
    return xb[:, 0]


def test_augmentation_comes_from_make_privates_rng_not_from_the_scripts_seed() -> None:
    counts = [1] * 8
    first = _fetched(counts, script_seed=0, seed=5)
    assert torch.equal(first, _fetched(counts, script_seed=123, seed=5))  # a replay
    assert not torch.equal(first, _fetched(counts, script_seed=0, seed=6))


def test_each_example_is_fetched_under_a_state_of_its_own() -> None:
    """Example j's draws do not depend on how many the examples before it made."""
    few = _fetched([1, 1, 1, 1, 1, 1], script_seed=0, seed=5)
    many = _fetched([7, 1, 30, 1, 1, 1], script_seed=0, seed=5)
    assert torch.equal(few[[1, 3, 4, 5]], many[[1, 3, 4, 5]])
    assert len(set(few.tolist())) == len(few)  # and the states differ between examples


def _clipped_sum(data: Augmented) -> torch.Tensor:
    net, (model, optimizer, loader) = _private(data, seed=3)
    xb, yw = next(iter(loader))
    optimizer.zero_grad()
    per_example = nnf.cross_entropy(model(xb.float()), yw[:, 0].long(), reduction="none")
    (per_example * yw[:, 1].float()).sum().backward()
    optimizer.step()
    return torch.cat([p.grad.reshape(-1).double() for p in net.parameters()])


def test_coupled_neighbours_differ_by_at_most_the_clip_norm() -> None:
    """Example i in its place with other data and weight 0: the others keep their states.

    The coupling of docs/ml.md ("Dropout and other random layers", and augmentation):
    every other example keeps its augmentation, so the sums differ by i's clipped
    gradient alone. Run with the reviewer's data and augmentation.
    """
    gen = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(12, 6, generator=gen)
    y = torch.randint(0, 2, (12,), generator=gen)
    full = _clipped_sum(Augmented(x, y, torch.ones(12)))
    for i in range(12):
        other, weights = x.clone(), torch.ones(12)
        other[i], weights[i] = -7.0, 0.0
        part = _clipped_sum(Augmented(other, y, weights))
        assert float((full - part).norm()) <= 1.0 + 1e-6


def test_a_tensor_dataset_is_fetched_as_it_is() -> None:
    data = TensorDataset(torch.randn(8, 6), torch.zeros(8, dtype=torch.long))
    _, (_, _, loader) = _private(data, seed=0)
    assert loader.dataset is data
    part = Subset(data, [1, 3, 5, 7])
    assert _private(part, seed=0)[1][2].dataset is part
    drawn = Subset(Draws([1] * 8), [1, 3, 5, 7])  # a Subset of a dataset that draws: wrapped
    assert isinstance(_private(drawn, seed=0)[1][2].dataset, SecretFetch)


def test_a_tensor_datasets_batch_is_one_index_per_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batches default_collate makes of the examples fetched one by one, empty ones too.

    Without a ``__getitem__`` per example; a collate_fn of the user's keeps that fetch.
    """
    x, y = torch.randn(40, 3, 2), torch.arange(40)
    reversed_part = Subset(TensorDataset(x, y), list(range(39, -1, -1)))
    for data in (TensorDataset(x, y), Subset(reversed_part, [0, 5, 7, 30, 31])):
        for rate in (0.3, 1e-3):  # 1e-3: empty batches
            own = DPDataLoader(data, sample_rate=rate, rng=ChaCha20Random(1), collate_fn=_collate)
            expected = list(own)
            with monkeypatch.context() as patch:
                patch.setattr(TensorDataset, "__getitem__", _not_called)
                got = list(DPDataLoader(data, sample_rate=rate, rng=ChaCha20Random(1)))
            assert len(got) == len(expected)
            assert any(b[1].shape == (0,) for b in got) == (rate < 0.1)
            for batch, reference in zip(got, expected, strict=True):
                assert type(batch) is type(reference) is list
                for a, b in zip(batch, reference, strict=True):
                    assert torch.equal(a, b)
                    assert (a.dtype, a.shape, a.stride()) == (b.dtype, b.shape, b.stride())


def _collate(batch: list[tuple[torch.Tensor, ...]]) -> object:
    return default_collate(batch)


def _not_called(*_: object) -> None:
    raise AssertionError("an example fetched on its own")


def test_workers_fetch_under_states_of_their_own() -> None:
    """Forked workers re-key the (unseeded) stream: batches of two workers differ."""
    _, (_, _, loader) = _private(Draws([1] * 6), seed=None, workers=2)
    state = torch.get_rng_state()
    batches = [xb[:, 0] for xb, _ in loader]
    assert torch.equal(torch.get_rng_state(), state)
    assert len({tuple(b.tolist()) for b in batches}) == len(batches)


def _drawn_by_workers(seed: int) -> list[float]:
    """What each example drew, over two passes of a loader of 4 batches and 2 workers."""
    torch.manual_seed(1)
    net = nn.Linear(1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, _, loader = make_private(
            net,
            torch.optim.SGD(net.parameters(), lr=0.1),
            DataLoader(Draws([1] * 40), batch_size=10, num_workers=2),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            delta=1e-5,
            rng=ChaCha20Random(seed),
        )
    return [v for _ in range(2) for xb, _ in loader for v in xb[:, 0].tolist()]


def test_seeded_forked_workers_never_repeat_states_across_workers_or_passes() -> None:
    # rev29-ml #6: under a seeded rng each forked worker continued the parent's stream
    # where it stood, so workers and passes repeated the same states (784 of 796 draws).
    drawn = _drawn_by_workers(0)
    assert len(drawn) > 40
    assert len(set(drawn)) == len(drawn)
    assert _drawn_by_workers(0) == drawn  # keys from the parent: reproducible under a seed


def test_a_pickled_fetch_gets_a_key_of_its_own() -> None:
    """A spawned worker's copy: a fresh key per pickle, never the stream's own states."""
    fetch = SecretFetch(Draws([1] * 4), ChaCha20Random(0))
    copies = [pickle.loads(pickle.dumps(fetch)) for _ in range(2)]
    values = [torch.cat([x for x, _ in c.__getitems__(range(4))]) for c in (fetch, *copies)]
    assert len({tuple(v.tolist()) for v in values}) == 3
