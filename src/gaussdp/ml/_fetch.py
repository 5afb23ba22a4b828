r"""Secret generator states for fetching each example (random data augmentation).

A dataset whose ``__getitem__`` draws random numbers (torchvision-style
``RandomHorizontalFlip``, ``RandomCrop``, noise added to an input) draws from torch's
default CPU generator. Left there, the augmentation is the script's: a
``torch.manual_seed(0)`` makes it public (unseeded, the CPU twister keeps only 32 bits
of its seed), and the loader fetches a Poisson batch's examples one after the other, so
example j's augmentation depends on how many draws the examples before it made, in
this batch and in every earlier one. Removing one example then shifts every later
example's augmentation and moves the other examples' gradients: a review measured
5.54·C with noise calibrated to C (flip and shift of 12 examples).

So the private data loader (:class:`gaussdp.ml.DPDataLoader`) fetches each example
with torch's CPU generator set to a state of its own, drawn from a ChaCha20 stream
keyed from ``make_private``'s ``rng`` (its fourth: the batches, the noise and the
dropout masks have the other three), and collates each batch under one more; the
caller's generator is put back afterwards. The argument is that of the dropout masks
(:mod:`gaussdp.ml._masks`, docs/ml.md): given the Poisson sample, the states by
position in the fetch order are i.i.d. and independent of the data, and example j's
augmented input is a function of x_j and its own state alone, so giving every other
example of the neighbouring batch the state it had is a coupling under which the
clipped sums differ by one clipped gradient. One state per *example* is what makes it
so: with one state per batch, example j's augmentation would depend on the draws of
the examples before it. States are 624 words of the twister filled from the stream
(never through ``torch.manual_seed``), as secret as the stream under the computational
assumption of :mod:`gaussdp.ml._masks`; under a seeded ``rng`` they are as public as
the seed.

Data loader workers (``num_workers > 0``): at every pass (``iter(loader)``) the parent
draws one 256-bit key per worker from the stream (:meth:`SecretFetch.key_workers`),
and each forked worker re-keys its copy with its own before fetching
(:func:`rekey_worker`, the loader's ``worker_init_fn``). Before, a forked worker
continued the parent's stream where it stood when the stream was seeded: every worker,
and every pass, repeated the same states (rev29-ml: 784 of 796 draws repeated with two
workers), so an example's augmentation depended on its position in the batch. Keys from
the parent keep a seeded run reproducible and never repeat. A spawned worker gets the
dataset pickled with a fresh 256-bit key of its own. The loader's ``generator`` (the
base of the workers' seeds for ``random`` and numpy) is set from a secret state too.

Not covered: randomness from numpy or Python's ``random`` (in the main process the
script's generators, public when seeded; in a worker seeded once per worker and pass
from the loader's secret ``generator``, so an example's draws there depend on its
position in the worker's fetch order: use torch's generator in transforms), from a
``torch.Generator`` of the dataset's own, or on a CUDA device. ``TensorDataset``
(exactly that type, or a ``Subset`` of one) draws nothing and is fetched as it is (a
state per example costs about 2.5 µs of CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.data import Dataset

from gaussdp.ml._masks import MaskStates
from gaussdp.random import ChaCha20Random, RandomSource

__all__ = ["SecretFetch", "rekey_worker"]


class SecretFetch(Dataset[Any]):
    """``dataset`` whose examples are fetched each under a fresh secret CPU generator state.

    :attr:`dataset` is the wrapped dataset. The data loader fetches through
    ``__getitems__`` (one batch's indices): the caller's generator state is saved
    once, each example gets a state of its own, and the saved state is put back.
    """

    def __init__(self, dataset: Dataset[Any], rng: RandomSource) -> None:
        self.dataset = dataset
        self._rng = rng
        self._states = MaskStates(rng, torch.device("cpu"))
        # One key per data loader worker, drawn for the coming pass (key_workers).
        self._worker_keys: list[bytes] = []

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: Any) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[Any]) -> list[Any]:
        saved = torch.get_rng_state()
        try:
            out = []
            for index in indices:
                torch.set_rng_state(self._states.next()[0])
                out.append(self.dataset[index])
            return out
        finally:
            torch.set_rng_state(saved)

    @contextmanager
    def secret_state(self) -> Iterator[None]:
        """Run under a fresh secret CPU generator state, then put the caller's back."""
        saved = torch.get_rng_state()
        torch.set_rng_state(self._states.next()[0])
        try:
            yield
        finally:
            torch.set_rng_state(saved)

    def generator(self) -> torch.Generator:
        """A new CPU generator in a fresh secret state (the loader's, for worker seeds)."""
        gen = torch.Generator()
        gen.set_state(self._states.next()[0])
        return gen

    def key_workers(self, count: int) -> None:
        """Draw one fresh key per worker for the coming pass (in the loader's process).

        Forked workers inherit them and each re-keys with its own
        (:func:`rekey_worker`): drawn from the stream at every pass, they differ
        between workers and passes, and are reproducible under a seeded stream.
        """
        self._worker_keys = [self._rng.random_bytes(32) for _ in range(count)]

    def _rekey(self, worker: int) -> None:
        """In worker ``worker``: fetch under a stream keyed with that worker's key."""
        if worker < len(self._worker_keys):  # a spawned worker's copy has its own key
            self._rng = ChaCha20Random(self._worker_keys[worker])
            self._states = MaskStates(self._rng, torch.device("cpu"))
        self._worker_keys = []

    def __reduce_ex__(self, protocol: Any) -> tuple[Callable[..., SecretFetch], tuple[Any, ...]]:
        """To a spawned worker: the dataset and a fresh 256-bit key of the worker's own.

        Each worker's arguments are pickled on their own, so each gets its own key
        (the stream itself is never copied: a copy would repeat its states).
        """
        return _keyed, (self.dataset, self._rng.random_bytes(32))


def rekey_worker(fetch: SecretFetch, worker: int) -> None:
    """A data loader worker's ``worker_init_fn`` (bound to ``fetch``): its own key."""
    fetch._rekey(worker)


def _keyed(dataset: Dataset[Any], key: bytes) -> SecretFetch:
    """A :class:`SecretFetch` of ``dataset`` under a stream keyed with ``key`` (unpickling)."""
    return SecretFetch(dataset, ChaCha20Random(key))
