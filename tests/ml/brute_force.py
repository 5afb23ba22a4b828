"""Brute-force sensitivity of a clipped gradient sum, shared by the tests of ``gaussdp.ml``.

With no noise and learning rate 0, one optimizer step of a private model gives the
batch's clipped gradient sum; removing each example in turn and taking the largest
change measures the add/remove-one sensitivity directly, whatever path computed it.

torch is imported inside the functions: ``--doctest-modules`` imports this module
even where the ``torch`` extra is missing (the test modules skip there).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

ClippedSum = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]

# The private data loader of each optimizer zero_noise_private made (see draw).
_LOADERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def zero_noise_private(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, mode: str, clip: float = 1.0
) -> tuple[Any, Any, Any]:
    """``make_private`` with no noise and learning rate 0; its loader draws all of ``(x, y)``.

    The sample rate is 1, so every batch of the private loader holds every example:
    a step may train on any rows of ``(x, y)`` (at most ``len(x)``) once :func:`draw`
    has drawn its batch. The warning that such a model is not private is expected
    and checked.
    """
    import pytest
    import torch
    from torch.nn import functional as nnf
    from torch.utils.data import DataLoader, TensorDataset

    from gaussdp.ml import make_private

    with pytest.warns(UserWarning, match="NOT differentially private"):
        model, optimizer, loader = make_private(
            net,
            torch.optim.SGD(net.parameters(), lr=0.0),
            DataLoader(TensorDataset(x, y), batch_size=len(x)),
            loss_fn=nnf.cross_entropy,
            noise_multiplier=0.0,
            max_grad_norm=clip,
            delta=1e-5,
            grad_sample_mode=mode,  # type: ignore[arg-type]
        )
    return keep_loader((model, optimizer, loader))


def keep_loader(made: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """``make_private``'s ``(model, optimizer, loader)``, its loader kept for :func:`draw`."""
    _LOADERS[made[1]] = made[2]
    return made


def draw(optimizer: Any) -> Any:
    """The next batch of the private loader of ``optimizer`` (:func:`keep_loader`).

    A step trains only on rows of the batch drawn last from that loader, each once
    (``optimizer.step()`` refuses otherwise): call this before each step's training calls.
    """
    return next(iter(_LOADERS[optimizer]))


def step_sum(net: nn.Module, model: Any, optimizer: Any, api: str = "backward") -> ClippedSum:
    """The clipped sum of a batch: one step of ``optimizer`` (σ = 0, lr 0), float64.

    ``api="backward"``: ``model.backward(x, y)``; ``"idiom"``: ``loss.backward()`` on
    cross-entropy. ``param.grad`` holds the sum over the expected batch size.
    """
    import torch
    from torch.nn import functional as nnf

    def clipped_sum(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        draw(optimizer)
        if api == "backward":
            model.backward(inputs, targets)
        else:
            nnf.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
        return flat.to(torch.float64) * optimizer.expected_batch_size

    return clipped_sum


def sensitivity(clipped_sum: ClippedSum, x: torch.Tensor, y: torch.Tensor) -> float:
    """max over i of ‖clipped_sum(x, y) − clipped_sum(x without i, y without i)‖₂."""
    import torch

    full = clipped_sum(x, y)
    worst = 0.0
    for i in range(x.shape[0]):
        keep = torch.arange(x.shape[0]) != i
        worst = max(worst, float(torch.linalg.vector_norm(full - clipped_sum(x[keep], y[keep]))))
    return worst
