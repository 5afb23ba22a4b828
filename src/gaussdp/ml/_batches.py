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

The examples of a batch are its tensors' first dimension, and the private model clips
each row of its inputs as one example. A view of a batch tensor that moves another
dimension first (``x.transpose(0, 1)``: the time-major ``[T, B, ...]`` layout of
``nn.LSTM``, ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention`` with
``batch_first=False``) makes each row hold a piece of every example, so that one
example moves every clipped row (a review: 2.25·C at T = 6, growing with T).
:func:`refuse_mixed_rows` refuses such a view from its strides, before anything is
drawn: each row of the view must lie inside one row of the batch tensor, rows in
order. That rule looks at the layout, not at the operation: a view that puts a
piece of several examples in one row is refused at every batch size from 2 on and at
0; at a batch of 1 example every row holds that example only, and a view of it with
one row is accepted (it is one example per row whatever the code did). So code that
only a batch of one example gets right is refused on its first batch of any other
size. Copies carry no tag (``x.transpose(0, 1).contiguous()``) and are not seen:
keep the examples first in every input and output, and transpose inside the model's
``forward`` for a time-major layer. A batch tensor that is itself a view (of a
``collate_fn``'s stack) is copied before it is tagged (:func:`owning_rows`): a view
of it would otherwise be a view of the untagged stack.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

import torch

from gaussdp.errors import invalid

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


def owning_rows(batch: Any) -> Any:
    """``batch`` with each tensor that is a view replaced by a row-major copy of it.

    A ``collate_fn`` may hand out a view (``torch.stack(xs, 1).transpose(0, 1)``:
    stacked time-major, returned batch-first). Tagged as it is, the user's
    ``x.transpose(0, 1)`` of it would be a view of the untagged stack, which
    :func:`refuse_mixed_rows` cannot find (rev29-ml: accepted at 2.89·C); a copy is
    its own base, with each example's row in one block. Tuples (named ones too),
    lists and dicts are walked as :func:`tag` walks them; lists and mappings are
    changed in place, tuples rebuilt. A batch without views is returned as it is.
    """
    if isinstance(batch, torch.Tensor):
        return batch if batch._base is None else batch.clone(memory_format=torch.contiguous_format)
    if isinstance(batch, tuple):
        items = [owning_rows(b) for b in batch]
        if all(a is b for a, b in zip(items, batch, strict=True)):
            return batch
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    if isinstance(batch, list):
        batch[:] = [owning_rows(b) for b in batch]
    elif isinstance(batch, MutableMapping):
        for key, value in batch.items():
            batch[key] = owning_rows(value)
    return batch


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


def _rows_kept(view: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether each row of ``view`` lies inside one row of ``base``, rows in order.

    In bytes of their shared storage (torch's strides are never negative). The
    view's rows must step by a whole number k ≥ 1 of ``base``'s rows (``x[::2]``
    keeps the examples apart). ``base``'s row j is the block ``[o + j·s, o + j·s +
    extent]`` of its offset o, first stride s and the extent of one row; a base whose
    rows are not laid out one after the other, and a view without elements, are held
    to the steps and the number of rows alone.
    """
    rows, examples = view.shape[0], base.shape[0]
    size, width = view.element_size(), base.element_size()
    stride, step = base.stride(0) * width, view.stride(0) * size
    k = step // stride if stride > 0 and step > 0 and step % stride == 0 else int(step == stride)
    if rows != 1 and k < 1:
        return False
    if rows == 0:
        return True
    if rows > 1 + (examples - 1) // max(k, 1):  # not that many examples k apart
        return False
    extent = width - 1 + _row_span(base) * width
    if view.numel() == 0 or (examples >= 2 and extent >= stride):
        return True
    offset = base.storage_offset() * width
    low = view.storage_offset() * size
    high = low + size - 1 + _row_span(view) * size
    first = (low - offset) // stride if examples >= 2 else 0
    start = offset + first * stride
    last = first + (rows - 1) * k
    return first >= 0 and last < examples and start <= low and high <= start + extent


def _row_span(t: torch.Tensor) -> int:
    """Elements from the first to the last of one row of ``t`` (its first index fixed)."""
    return sum((n - 1) * st for n, st in zip(t.shape[1:], t.stride()[1:], strict=True))


def first_row(leaves: Iterable[Any]) -> int | None:
    """The row of the loader's batch that the first tensor among ``leaves`` starts at.

    0 for a tagged batch tensor itself; for a view of one that keeps its row step
    (``x[a:b]``, ``x[a:b, 1:]``) the row ``a``; None when the first tensor is neither
    (untagged: a copy; another step such as ``x[::2]``): its rows cannot be placed.
    """
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            continue
        if _tag_of(leaf) is None:
            return None
        base = leaf._base
        if base is None or _TAGS.get(id(leaf)) is not None:
            return 0
        stride = base.stride(0)
        offset = leaf.storage_offset() - base.storage_offset()
        if base.shape[0] < 2 or (leaf.stride(0) == stride and stride > 0 and offset >= 0):
            return 0 if base.shape[0] < 2 else offset // stride
        return None
    return None


def refuse_mixed_rows(leaves: Iterable[Any], name: str) -> None:
    """Refuse a view of a batch tensor whose rows are not the batch's examples (module notes).

    Raises
    ------
    ValueError
        For a tensor among ``leaves`` that is a view of a tagged batch tensor with a
        row that is not inside one example's row of it (``x.transpose(0, 1)``).
    """
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor) or leaf._base is None:
            continue
        entry = _TAGS.get(id(leaf._base))
        if entry is None or entry[0]() is not leaf._base:
            continue  # not a view of a batch tensor (a batch tensor itself is its own rows)
        if not _rows_kept(leaf, leaf._base):
            raise ValueError(
                invalid(
                    name,
                    "tensors with the examples along the first dimension, as the data "
                    "loader's batch has them (each row one example: a time-major layer, "
                    "batch_first=False, must get its input transposed inside the model's "
                    "forward, not x.transpose(0, 1) passed to the private model)",
                    f"a view of a batch tensor of shape {tuple(leaf._base.shape)} with "
                    f"shape {tuple(leaf.shape)} and strides {leaf.stride()}",
                )
            )
