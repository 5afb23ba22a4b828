"""Calls of the unwrapped model outside the private one: every tensor they make is watched.

``optimizer.step()`` adds what ``param.grad`` holds, unclipped and un-noised, to the
noisy average: that is how a data-independent regulariser (λ‖w‖²) reaches the
parameters. The private model's training calls leave ``param.grad`` alone, so a
gradient there that came through a call of the unwrapped model, or of one of its
parts, is an unclipped per-example gradient, and the step must refuse it
(:meth:`gaussdp.ml.dpsgd._Engine.refuse_raw_calls`). The backward pass may come
long after the call: ``out = net.body(x)``, ``optimizer.zero_grad()``, then
``loss.backward()`` on a loss made from ``out``.

A backward pass reaches a parameter only through a tensor computed from it, and a
watched call computes its tensors with torch functions. So, from the start of the
outermost watched call made with gradients enabled to its end, a :class:`RawCall` —
a ``torch.overrides.TorchFunctionMode``, torch's documented way (notes "Extending
torch Python API", modes) to see every ``__torch_function__`` call in a dynamic
scope — puts a tensor hook on every result that has a ``grad_fn``. The hook stays
with the graph, also after the tensor is gone, and fires when a backward pass
reaches that tensor, whenever it runs. Outputs the module hook's flattening cannot
see are covered too: an output in a dataclass or another object, an intermediate kept
as an attribute (an auxiliary loss, mixture-of-experts style) or anywhere else
(rev29-ml #1: 1.25·C at weight 0.5 and 62.9·C at 50 for a dataclass; 10.4·C and
1033·C for an attribute).

The one kind of call a mode does not see is ``torch.autograd.Function.apply`` (a
custom autograd function, also reentrant ``torch.utils.checkpoint``). The functions its
``forward`` runs are seen, with gradients off, and autograd then gives their
results (the very objects ``forward`` returns) a ``grad_fn``: such results are kept
(weakly) and hooked when the outermost call ends, if they have one then. A custom
function's result that is one of its inputs comes back as a new view, which is not
seen; a backward pass through it reaches the input, which is watched if the call
made it and is a parameter otherwise (a parameter met by data outside every watched
computation, as ``net[0].weight @ x.T`` in the loss, is not detected: docs/ml.md).

Calls the engine makes itself are not watched (:attr:`_Engine.inside`), nor calls
under ``torch.no_grad()`` (their results carry no gradient, unless the module turns
gradients back on inside: that is not seen), nor ``module.forward(x)`` called
directly (no module hook runs). Watching costs a tensor hook per result of such a
call, and a Python call per torch function while it runs; the private model's steps
pay nothing.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

Reached = Callable[[torch.Tensor], None]


class RawCall(TorchFunctionMode):
    """Active from the start to the end of the outermost watched call (module notes)."""

    def __init__(self, reached: Reached) -> None:
        super().__init__()
        self.reached = reached  # the tensor hook: a backward pass reached a result
        self.calls: list[int] = []  # the watched calls begun and not ended (module ids)
        # Results made with gradients off (in a custom autograd function's forward).
        self.later: list[weakref.ref[torch.Tensor]] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        result = func(*args, **(kwargs or {}))
        if isinstance(result, torch.Tensor):
            self.watch(result)
        elif isinstance(result, (tuple, list)):
            for item in result:
                if isinstance(item, torch.Tensor):
                    self.watch(item)
        return result

    def watch(self, tensor: torch.Tensor) -> None:
        """Hook ``tensor`` if a gradient can flow through it; else keep it for :meth:`end`."""
        if tensor.grad_fn is not None:
            tensor.register_hook(self.reached)  # type: ignore[no-untyped-call]
        elif not tensor.requires_grad and not torch.is_grad_enabled():
            self.later.append(weakref.ref(tensor))

    def end(self) -> None:
        """Hook the kept results that autograd gave a ``grad_fn`` since (custom functions)."""
        for ref in self.later:
            tensor = ref()
            if tensor is not None and tensor.grad_fn is not None:
                tensor.register_hook(self.reached)  # type: ignore[no-untyped-call]
        self.later = []


class RawCalls:
    """The watched call under way in each thread (``nn.DataParallel`` runs replicas in threads).

    Module hooks bracket each call: :meth:`begin` from a forward pre-hook, :meth:`ended`
    from a forward hook registered with ``always_call=True``, which runs also when the
    call raises. A call whose pre-hook never ran (an earlier pre-hook raised) is not on
    the stack, and its end changes nothing.
    """

    def __init__(self) -> None:
        self.local = threading.local()

    def begin(self, module: torch.nn.Module, reached: Reached | None) -> None:
        """A watched call begins: inside one under way, or, given ``reached``, a new one."""
        call: RawCall | None = getattr(self.local, "call", None)
        if call is None:
            if reached is None:  # gradients off: nothing to watch
                return
            call = RawCall(reached)
            call.__enter__()  # type: ignore[no-untyped-call]
            self.local.call = call
        call.calls.append(id(module))

    def ended(self, module: torch.nn.Module) -> None:
        """A watched call ended; the outermost one's end stops watching."""
        call: RawCall | None = getattr(self.local, "call", None)
        if call is None or call.calls[-1] != id(module):
            return
        call.calls.pop()
        if not call.calls:
            self.local.call = None
            call.__exit__(None, None, None)  # type: ignore[no-untyped-call]
            call.end()
