"""Which Poisson batch a tensor came from, so that each batch is stepped on once, where drawn.

The data loader of :func:`gaussdp.ml.make_private` gives every batch it hands out an
identity — the process (id and fork token, :func:`gaussdp.random._process_identity`)
and a count — and tags the batch's tensors with it. A training call of the private
model, and ``model.backward(x, y)``, record the batches of their tensor arguments (a
tensor's own tag, or that of the tensor it is a view of). ``optimizer.step()`` then
releases only sums of the loader's current batch in this process, and that batch
once (:meth:`gaussdp.ml.dpsgd._Engine.refuse_foreign`).

Why: the accountant charges each step as the Gaussian mechanism on a fresh Poisson
sample. A process forked after its parent drew a batch holds that batch's tensors; if
it draws a batch of its own and steps on the old tensors, parent and child each
release the parent's sample (two releases of one sample are not two independently
subsampled steps). Stepping twice on one batch in one process is the same gap.

What carries no tag: a copy of a batch's tensors that is not a view (``x.to("cuda")``
from the CPU, ``x.double()`` of a float tensor, a tensor the user built). Calls on
untagged tensors only are held to the process rule alone (the sums belong to the
process that drew the loader's last batch); a CUDA process cannot fork.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

#: A batch handed out by the data loader: process id, fork token, count there.
BatchId = tuple[int, bytes, int]

# id(tensor) -> (a weak reference to it, its batch). An entry leaves with its tensor.
_TAGS: dict[int, tuple[weakref.ref[torch.Tensor], BatchId]] = {}


def tag(batch: Any, batch_id: BatchId) -> None:
    """Tag every tensor of ``batch`` (any nesting of tuples, lists and dicts)."""
    if isinstance(batch, torch.Tensor):
        _TAGS[id(batch)] = (weakref.ref(batch, _forget(id(batch))), batch_id)
    elif isinstance(batch, tuple | list):
        for item in batch:
            tag(item, batch_id)
    elif isinstance(batch, Mapping):
        for item in batch.values():
            tag(item, batch_id)


def _forget(key: int) -> Callable[[weakref.ref[torch.Tensor]], None]:
    """The callback that removes a tensor's entry once the tensor is gone."""

    def forget(_: weakref.ref[torch.Tensor]) -> None:
        _TAGS.pop(key, None)

    return forget


def _tag_of(tensor: torch.Tensor) -> BatchId | None:
    """The batch of ``tensor``, or of the tensor it is a view of; None if untagged."""
    for t in (tensor, tensor._base):
        if t is None:
            continue
        entry = _TAGS.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
    return None


def batches_of(leaves: Iterable[Any]) -> frozenset[BatchId]:
    """The batches the tensors among ``leaves`` were tagged with (or are views of)."""
    found = (_tag_of(t) for t in leaves if isinstance(t, torch.Tensor))
    return frozenset(b for b in found if b is not None)
