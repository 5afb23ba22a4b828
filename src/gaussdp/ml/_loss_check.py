"""The check that a loss given to ``loss.backward()`` keeps examples apart.

On the ``loss.backward()`` path (:class:`gaussdp.ml.PrivateModule`) the step clips
example i's gradient of ⟨outputᵢ, s·Gᵢ⟩, where G = ∂loss/∂output is what the user's
backward pass recorded. That is example i's own gradient only if Gᵢ depends on no
other example: a loss that mixes the batch (a penalty on the batch mean of the
outputs, a softmax across examples, an in-batch contrastive loss) makes every clipped
gradient move when one example is removed, and the sum's sensitivity exceeds the
clipping norm C the noise is calibrated to (audit26: 1.88·C and 1.15·C).

**What is checked, and when.** Every training call returns its outputs as
:class:`_Probed` tensors, a ``__torch_function__`` subclass that every result
computed from them inherits, so the loss is one too; every call made on them is
recorded with its result (:data:`_TRACE`, started afresh by a step's first training
call). Their ``backward`` (``loss.backward()`` or ``torch.autograd.backward``) runs
the check below first, with the user's graph still intact, on probed steps
(:meth:`LossCheck.due`: the first :data:`FIRST_STEPS` steps, then every
:data:`EVERY` steps) and on any other step whose loss has a form (:func:`_form`: the
functions called and the kinds of their arguments, a float as zero or not, a batch
size as an integer) not checked before. So a term that starts after the probed steps
— switched on by step, epoch or data, a coefficient no longer 0 — is checked on the
first step that has it. A step of a known form costs the recording and one
comparison (:data:`MAX_FORMS` forms are remembered; a loss whose form changes at
every step beyond that is checked at every step). Under ``torch.compile`` each call
on a probed tensor is a graph break, made eagerly (``torch.compiler.disable``): a
compiled loss is recorded and checked like any other.

1. G = ∂loss/∂output with ``create_graph=True``; then, for each bit k of the example
   index (⌈log₂ B⌉ of them), the Hessian-vector product H·v for a random v nonzero
   only on the examples whose bit k is 1. Rows of H·v of the other examples must be
   exactly zero: H_ij = ∂Gᵢ/∂outputⱼ = 0 for every pair i ≠ j, because any two
   indices differ in some bit (H is symmetric, so one direction suffices). A
   structurally zero block gives exact zeros; a nonzero one gives a nonzero row
   with probability 1 over v (Gaussian, from a fixed-seed generator: the user's
   random state is not touched). Non-finite values are not evidence (an example
   whose own loss is not finite gives 0·inf = NaN; clipping counts its gradient as
   zero): they are left to step 3, which compares them too.
2. For the trainable parameters the loss reaches directly (a regulariser): the
   gradient the step adds unclipped, ∂loss/∂w, must not depend on the outputs
   (λ‖w‖² passes; ``model(x) @ w`` with a parameter w of the model does not: it
   would add a data-dependent gradient without clipping or noise).

3. A second evaluation: every call made on the probed tensors is recorded with its
   result (:data:`_TRACE`), and the loss is recomputed from that record with the
   outputs as they were and, for each bit k, with the examples whose bit k is 1
   given far-off values; the other examples' rows of G must come out equal bit for
   bit. This sees what step 1 cannot when the change crosses a kink: mixing through
   piecewise-linear operations (``(out - out.mean(0)).abs()``, top-k selection of
   the batch's hardest examples) and through values taken out of the graph
   (``.detach()``). Python floats taken out of the outputs (``.item()``,
   ``float()``, ``.tolist()``) are recomputed too, and a later call given that very
   float object gets the recomputed one. A call that changes in place, with values
   computed from the outputs, a tensor the outputs did not produce (``state``): that
   tensor is recomputed from its value before the first such call (a copy, kept in
   :data:`_CHANGED`) in every recorded call that reads it; the caller's tensor is
   not changed again. One changed in place with nothing of the outputs (a step
   counter) is not made again. A record it cannot recompute (a call that fails)
   leaves the loss to steps 1 and 2. The private model's outputs (recorded on every
   step) under ``torch.no_grad()`` while the loader's batch awaits its step (the keys of a
   stop-gradient loss, :meth:`LossCheck.wrap_keys`, in training or eval mode; the
   unwrapped model's too) and the other training calls'
   outputs (``model(x2).detach()``, ``.data``) that the loss takes are moved row for
   row with the outputs (each must have one row per example of the training call,
   or rows placed in the loader's batch, :func:`_keys_of`, or the loss is refused):
   keys carry no gradient, so step 1 cannot see them (rev27-ml, rev28-ml: an
   in-batch contrastive loss on such keys passed at 2.18·C). A recorded call given
   ``out=None`` (``F.normalize`` passes it on) is recomputed like any other; only a
   tensor given as ``out`` marks a call that writes into the caller's tensor.

A failure raises ``ValueError`` from ``loss.backward()`` before the backward pass
runs: nothing is captured, so no step can follow, and nothing is drawn or charged;
what the step captured before (other micro-batches) is spoiled (:meth:`LossCheck.check`)
and the step refuses and drops it. A
probed output whose gradient reached the step without this check (a loss computed
outside torch's functions, so not a :class:`_Probed` tensor) makes the step refuse.

**The mean over class-index targets**, on every step: :class:`_Probed` makes the mean
of ``cross_entropy`` and ``nll_loss`` over class-index targets
(:func:`_per_target_mean`) divide by the number of targets. torch's divides by
the number of targets not equal to ``ignore_index``, or by their summed class weights
— the other examples' labels, which no change of the outputs reveals. Here it divides
by the number of targets times the (equal) class weight; unequal class weights are
refused (``ValueError`` from the loss function, before anything is captured).

**What it cannot see** (documented in docs/ml.md, with what the user must guarantee):
the check is pointwise, on the checked steps' values and on the changes step 3 tries
to the outputs (never to the labels or inputs). It misses dependence on the batch
that does not go through the outputs (a masked mean the user writes with a mask from
the targets, a selection by label, a division by the batch size other than the
declared ``loss_reduction``); values that leave torch and come back as new objects
(Python arithmetic on an ``.item()`` float, numpy, ``torch.tensor`` of such numbers);
state read only through calls that do not take the outputs (``state.clone()``, an
``out=`` argument, a Python attribute); a kink that step 3's changes do not cross;
and a loss that starts mixing after the probed steps without a change of form (a
coefficient held in a tensor that was 0, a kink that only later data crosses) until
the next probed step.
A term that mixes examples only for some data is refused on the probed step whose
data shows it. ``model.backward(x, y)`` with ``loss_fn`` evaluates each example's
loss on its own, so no mixing is possible there.

**torch APIs.** The check's own calls on probed tensors (while :data:`_QUIET` is set)
go to ``torch.Tensor.__torch_function__``, torch's documented default, which returns
plain tensors and records nothing; the reduction is read from the deprecated
``size_average``/``reduce`` arguments by :func:`_reduction` (tested against torch's
own losses). The one private module left is ``torch.utils._pytree`` (as in
:mod:`gaussdp.ml.dpsgd`): torch 2.13 has no public pytree.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from gaussdp.errors import invalid

# Steps probed first, then one step in EVERY (see the module notes).
FIRST_STEPS = 3
EVERY = 100
# Forms of losses remembered as checked (a loss whose form keeps changing is checked
# at every step once this many are known).
MAX_FORMS = 1024

# What the refusal asks for: the rule of PrivateModule, and the way out.
_RULE = (
    "a sum or mean over the batch of per-example terms, each depending on its own "
    "example's output only (a term that mixes examples — a batch mean or softmax across "
    "the batch, an in-batch contrastive loss — lets one example move every other "
    "example's clipped gradient, so the noise calibrated to max_grad_norm would "
    "under-report epsilon): compute such terms per example, or use model.backward(x, y) "
    "with loss_fn, which evaluates each example's loss on its own"
)


class Probe:
    """The captured outputs of one training call, until the step."""

    def __init__(
        self, outputs: list[torch.Tensor], batch: int, due: bool, first: int | None = None
    ) -> None:
        self.outputs = outputs
        self.batch = batch
        # The row of the data loader's batch that its row 0 is, its rows following in
        # order (None: not known); keys of another row count are placed by it.
        self.first = first
        self.due = due  # a probed step: checked whatever the loss's form
        # What the caller gets: the same data and graph, as _Probed tensors.
        self.wrapped: list[torch.Tensor] = [t.as_subclass(_Probed) for t in outputs]
        self.checked = batch < 2  # one example (or none) cannot be mixed with another
        # A loss of the step was refused after this call: its gradient is not released.
        self.spoiled = False


class LossCheck:
    """The loss check of one :func:`gaussdp.ml.make_private` call (see the module notes)."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        self.params = list(params)
        self.steps = 0
        self.pending: list[Probe] = []
        # The private model's outputs under torch.no_grad() on a probed step (keys).
        self.keys: list[Probe] = []
        # The forms (:func:`_form`) of the losses checked so far, at most MAX_FORMS.
        self.forms: set[tuple[Any, ...]] = set()

    def due(self) -> bool:
        """Whether the training calls of the coming step are probed."""
        return self.steps < FIRST_STEPS or self.steps % EVERY == 0

    def wrap(
        self, outputs: list[torch.Tensor], batch: int, first: int | None = None
    ) -> tuple[list[torch.Tensor], Probe]:
        """The outputs as :class:`_Probed` tensors (same data and graph), and their probe.

        ``first``: the row of the loader's batch the call's row 0 is (a micro-batch
        ``x[a:a + m]`` starts at row a), if known.

        The first training call of a step starts the record afresh (a record left by a
        step never taken, of this or another model, would only lengthen it).
        """
        if not self.pending and not self.keys:
            _TRACE.clear()
            _CHANGED.clear()
        probe = Probe(outputs, batch, self.due(), first)
        self.pending.append(probe)
        _ACTIVE.add(self)
        return probe.wrapped, probe

    def wrap_keys(self, output: Any, batch_rows: int | None = None) -> Any:
        """The model's output under ``torch.no_grad()`` as :class:`_Probed`, on every step.

        Keys of a stop-gradient loss (MoCo, SimSiam-style: ``k = model(x2)`` under
        ``torch.no_grad()``, then ``q @ k.T``) carry no gradient, so step 1 cannot see
        example i's Gᵢ depend on the other examples' keys; step 3 moves their rows with
        the training call's (:func:`_check_replayed`). Wrapped on unprobed steps too: a
        loss whose form is new there is checked, and keys left plain could not be
        moved (rev29-ml: a contrastive term switched on after the probed steps passed
        at 2.18·C until the next probed step). Keys with ``batch_rows`` rows (those of
        the loader's batch) are taken to be its rows in order, so that micro-batches
        ``x[a:a + m]`` can take their rows (:func:`_keys_of`).
        """
        leaves, spec = tree_flatten(output)
        keys = [
            i
            for i, t in enumerate(leaves)
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 1
        ]
        if not keys:
            return output
        if not self.pending and not self.keys:
            _TRACE.clear()
            _CHANGED.clear()
        rows = leaves[keys[0]].shape[0]
        probe = Probe([leaves[i] for i in keys], rows, True, 0 if rows == batch_rows else None)
        self.keys.append(probe)
        _ACTIVE.add(self)
        for i, wrapped in zip(keys, probe.wrapped, strict=True):
            leaves[i] = wrapped
        return tree_unflatten(leaves, spec)

    def stepped(self, probes: Sequence[Probe | None]) -> None:
        """At the step, before anything is drawn: refuse if a captured probe was not checked.

        ``probes``: those of the training calls whose gradients the step uses.
        """
        self.drop()
        if not all(p is None or p.checked or not p.due for p in probes):
            raise RuntimeError(
                "the loss of a probed step reached the private model's outputs without "
                "gaussdp's check that it keeps examples apart (see gaussdp.ml._loss_check): "
                "compute the loss with torch operations on the model's output and call "
                "loss.backward() (or torch.autograd.backward) on it"
            )
        self.steps += 1

    def drop(self) -> None:
        """Forget the step's probes and record (at the step, or when its sums are dropped)."""
        self.pending = []
        self.keys = []
        _ACTIVE.discard(self)
        if not _ACTIVE:
            _TRACE.clear()
            _CHANGED.clear()

    def check(self, roots: list[torch.Tensor], seeds: list[torch.Tensor | None]) -> None:
        """Check the pending probes this backward pass reaches (raises ``ValueError``).

        On a probed step; on any other when the loss's form (:func:`_form` of the calls
        recorded since the last step) is not one checked before. A refusal spoils
        every probe of the step so far (:attr:`Probe.spoiled`): the step must not
        release the gradients captured before it, of the other micro-batches (a
        refusal that depends on the data or the batch size would choose which of the
        batch's examples are released).
        """
        try:
            self._check(roots, seeds)
        except ValueError:
            for probe in self.pending:
                probe.spoiled = True
            raise

    def _check(self, roots: list[torch.Tensor], seeds: list[torch.Tensor | None]) -> None:
        form = _form(_TRACE)
        if form in self.forms and all(p.checked or not p.due for p in self.pending):
            return
        waiting = [p for p in self.pending if p.batch >= 2]  # one example cannot mix
        if not waiting:
            return
        outs = [t for p in waiting for t in p.outputs]
        inputs = outs + [w for w in self.params if w.requires_grad]
        try:
            grads = torch.autograd.grad(
                [_plain(r) for r in roots],
                inputs,
                [None if g is None else _plain(g) for g in seeds],
                retain_graph=True,
                create_graph=True,
                allow_unused=True,
            )
        except RuntimeError as error:
            raise _unchecked(error) from error
        start = 0
        for probe in waiting:
            mine = grads[start : start + len(probe.outputs)]
            start += len(probe.outputs)
            if all(g is None for g in mine):
                continue  # another backward pass's outputs
            _check_examples(probe, mine)
            # Keys: the no-grad outputs, and the other training calls' outputs the loss
            # takes without their gradient (``model(x2).detach()``, ``.data``).
            others = [p for p in self.pending if p is not probe]
            _check_replayed(probe, roots, seeds, _keys_of(probe, [*self.keys, *others], roots))
            probe.checked = True
        _check_direct(outs, inputs[len(outs) :], grads[len(outs) :])
        if len(self.forms) < MAX_FORMS:
            self.forms.add(form)


def _form(trace: Sequence[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Any]]) -> Any:
    """What a loss's calls do, whatever the values: the functions and their arguments'
    kinds (a probed tensor; a dtype and dimension for another tensor; small integers,
    strings, flags as they are; a float as zero or not; a larger integer, such as a
    batch size, as ``int``)."""
    return tuple(
        (func, _kind(args), tuple((k, _kind(v)) for k, v in kwargs.items()))
        for func, args, kwargs, _ in trace
    )


def _kind(value: Any) -> Any:
    if isinstance(value, _Probed):
        return _Probed
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.dim())
    if value is None or isinstance(value, bool | str | torch.dtype | torch.device):
        return value
    if isinstance(value, int):
        return value if -16 <= value <= 16 else int
    if isinstance(value, float):
        return 0.0 if value == 0.0 else float
    if isinstance(value, tuple | list):
        return tuple(_kind(v) for v in value)
    if isinstance(value, slice):
        return (slice, _kind(value.start), _kind(value.stop), _kind(value.step))
    return type(value)


def _gradient(
    outputs: list[torch.Tensor], inputs: list[torch.Tensor], cots: list[torch.Tensor]
) -> tuple[torch.Tensor | None, ...]:
    """Σ ⟨output, cotangent⟩ differentiated with respect to ``inputs``; failures explained."""
    try:
        return torch.autograd.grad(outputs, inputs, cots, retain_graph=True, allow_unused=True)
    except RuntimeError as error:
        raise _unchecked(error) from error


def _check_examples(probe: Probe, grads: Sequence[torch.Tensor | None]) -> None:
    """Refuse if ∂Gᵢ/∂outputⱼ ≠ 0 for some i ≠ j (step 1 of the module notes)."""
    used = [(i, g) for i, g in enumerate(grads) if g is not None and g.requires_grad]
    if not used:
        return  # G does not depend on the outputs at all (a loss linear in them)
    index = torch.arange(probe.batch, device=probe.outputs[0].device)
    for bit in range((probe.batch - 1).bit_length()):
        side = (index >> bit) & 1 == 1
        cots = [_random_rows(probe.outputs[i], side, bit) for i, _ in used]
        hv = _gradient([g for _, g in used], probe.outputs, cots)
        for h in hv:
            if h is None:
                continue
            rest = h[~side]
            # Only finite values tell: 0·inf is NaN for an example whose own terms are
            # not finite, which clipping zeroes (gaussdp.ml.dpsgd.clip_factors) on its
            # own; mixing through non-finite values is left to step 3.
            moved = (rest != 0) & rest.isfinite()
            rows = moved if moved.dim() == 1 else moved.flatten(1).any(1)
            if bool(rows.any()):
                i = int(index[~side][rows][0])
                j = int(index[side][0])
                raise ValueError(
                    invalid(
                        "the loss given to loss.backward()",
                        _RULE,
                        f"a loss whose gradient for example {i} of the batch depends on "
                        "the outputs of other examples (its second derivative across "
                        f"examples is not zero; example {j} is one of those probed)",
                    )
                )


def _keys_of(
    probe: Probe, keys: Sequence[Probe], roots: list[torch.Tensor]
) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The outputs of ``keys`` that the recorded calls carry to ``roots``, each with its rows.

    ``keys``: the model's no-grad outputs (:meth:`LossCheck.wrap_keys`) and the other
    training calls' outputs of the step. Each comes with None (its rows are the
    training call's examples, in order: one row per example) or, when both its
    place and the call's in the loader's batch are known (:attr:`Probe.first`), the
    example of the call each of its rows is, -1 for a row of an example outside the
    call (keys computed once for the Poisson batch and taken by its micro-batches,
    ``k[a:a + m]`` for ``model(x[a:a + m])``): whether the loss passes then does not
    depend on how many micro-batches the batch has. Raises ``ValueError`` for one of
    another row count whose rows cannot be placed.
    """
    calls = [
        ({id(t) for t in tree_flatten((args, kwargs))[0]}, [id(t) for t in tree_flatten(result)[0]])
        for _, args, kwargs, result in _TRACE
    ]
    targets = {id(r) for r in roots}
    used: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    for key in keys:
        for t in key.wrapped:
            reached = {id(t)}
            for args, results in calls:
                if not args.isdisjoint(reached):
                    reached.update(results)
            if targets.isdisjoint(reached):
                continue
            if key.first is not None and probe.first is not None:
                rows = torch.arange(t.shape[0], device=t.device) + (key.first - probe.first)
                used.append((t, torch.where((rows >= 0) & (rows < probe.batch), rows, -1)))
            elif t.shape[0] == probe.batch:
                used.append((t, None))
            else:
                raise ValueError(
                    invalid(
                        "the loss given to loss.backward()",
                        _RULE + " (outputs of the private model that the loss takes "
                        "without their gradient — under torch.no_grad(), .detach(), "
                        ".data — must have one row per example of its training call, or "
                        "be the loader's whole batch taken by a training call on rows "
                        "x[a:b] of the batch tensor itself)",
                        f"a loss of a training call of {probe.batch} examples that takes "
                        f"an output of the private model without its gradient of "
                        f"{t.shape[0]} rows",
                    )
                )
    return used


def _check_replayed(
    probe: Probe,
    roots: list[torch.Tensor],
    seeds: list[torch.Tensor | None],
    placed: Sequence[tuple[torch.Tensor, torch.Tensor | None]] = (),
) -> None:
    """Refuse if changing some examples' outputs changes another example's Gᵢ (step 3).

    The loss is recomputed from :data:`_TRACE` (the calls made on the probed outputs and
    what came of them) with the outputs replaced: once as they were, and once per bit
    k of the example index with the examples whose bit k is 1 given far-off values.
    ``placed``, the model's outputs under ``torch.no_grad()`` that the loss takes, with
    their rows' examples (:func:`_keys_of`), are replaced alike, row for row with the
    outputs; rows of examples outside the call are changed in every evaluation but the
    first two (no example of the call may depend on them).
    The other examples' rows of G must be equal bit for bit (the comparison is skipped
    when two evaluations at the same values differ: a loss that is not bit for bit
    reproducible, such as one using atomic additions on a GPU). Sees piecewise-linear
    mixing (``abs``, ``max``, top-k selection, ``detach``) when the change crosses a
    kink; a loss the record cannot recompute is left to steps 1 and 2.
    """
    device = probe.outputs[0].device
    index = torch.arange(probe.batch, device=device)
    keys = [k for k, _ in placed]
    both = [*probe.outputs, *keys]
    scale = [float(o.detach().abs().max()) + 1.0 for o in both]
    as_they_were = [o.detach().as_subclass(torch.Tensor) for o in both]
    base = _replayed(probe, as_they_were, roots, seeds, keys)
    twice = _replayed(probe, as_they_were, roots, seeds, keys)
    if base is None or twice is None or not _same(base, twice, index >= 0):
        return  # not recomputable, or not bit for bit the same twice (atomics on a GPU)
    for bit in range((probe.batch - 1).bit_length()):
        side = (index >> bit) & 1 == 1
        sides = [side] * len(probe.outputs) + [
            side if rows is None else torch.where(rows >= 0, side[rows.clamp(min=0)], True)
            for _, rows in placed
        ]
        moved = [
            torch.where(_rows(on, o), 4 * c * _random_rows(o, on, bit) - o, o)
            for o, c, on in zip(as_they_were, scale, sides, strict=True)
        ]
        again = _replayed(probe, moved, roots, seeds, keys)
        if again is None:
            return
        if not _same(base, again, ~side):
            raise ValueError(
                invalid(
                    "the loss given to loss.backward()",
                    _RULE,
                    "a loss whose gradient for some examples of the batch changes "
                    "when the outputs of other examples change (the loss recomputed "
                    "with those outputs changed)",
                )
            )


def _same(
    first: Sequence[torch.Tensor | None], second: Sequence[torch.Tensor | None], rows: torch.Tensor
) -> bool:
    """Whether two evaluations of G agree bit for bit on ``rows`` (NaN equal to NaN)."""
    for a, b in zip(first, second, strict=True):
        if a is None and b is None:
            continue
        ref = b if a is None else a
        assert ref is not None
        x = (torch.zeros_like(ref) if a is None else a)[rows]
        y = (torch.zeros_like(ref) if b is None else b)[rows]
        if not bool(((x == y) | (x.isnan() & y.isnan())).all()):
            return False
    return True


def _replayed(
    probe: Probe,
    values: list[torch.Tensor],
    roots: list[torch.Tensor],
    seeds: list[torch.Tensor | None],
    keys: Sequence[torch.Tensor] = (),
) -> tuple[torch.Tensor | None, ...] | None:
    """G of the loss recomputed from :data:`_TRACE` at ``values``; None if it cannot be.

    ``values``: the outputs' new values, then those of ``keys`` (no gradient taken).

    Random draws start from the random state of now (each recomputation the same):
    torch's, and that of any generator passed to a call, restored afterwards. Calls
    that take nothing computed from ``values`` are not made again (their results are
    kept), nor are calls that change in place a tensor not computed from ``values`` (a
    running log of the caller's: it would change the caller's state). None if a call
    fails.
    """
    count = len(probe.wrapped)
    leaves = [v.clone().requires_grad_() for v in values[:count]]
    env: dict[int, Any] = {id(w): v for w, v in zip(probe.wrapped, leaves, strict=True)}
    env.update({id(k): v.clone() for k, v in zip(keys, values[count:], strict=True)})
    # A tensor of the caller's that a call changed in place with values computed from
    # the outputs: recomputed too, from its value before that call, in every call.
    env.update({key: before.clone() for key, (_, before) in _CHANGED.items()})
    device = values[0].device
    generators = {
        id(g): (g, g.get_state())
        for _, args, kwargs, _ in _TRACE
        for g in tree_flatten((args, kwargs))[0]
        if isinstance(g, torch.Generator)
    }
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            return _recomputed(env, leaves, roots, seeds)
    finally:
        for g, state in generators.values():
            g.set_state(state)


def _recomputed(
    env: dict[int, Any],
    leaves: list[torch.Tensor],
    roots: list[torch.Tensor],
    seeds: list[torch.Tensor | None],
) -> tuple[torch.Tensor | None, ...] | None:
    """The calls of :data:`_TRACE` made again (:func:`_replayed`), and G."""

    def swap(a: Any) -> Any:
        return env.get(id(a), a) if isinstance(a, torch.Tensor) or type(a) is float else a

    for func, args, kwargs, result in _TRACE:
        if not any(id(t) in env for t in tree_flatten((args, kwargs))[0]):
            continue  # its result is the same: kept
        if kwargs.get("out") is not None or (
            _in_place(func) and (not args or id(args[0]) not in env)
        ):
            continue  # it changed a tensor of the caller's (a log): not again
        try:
            fresh = func(*tree_map(swap, args), **tree_map(swap, kwargs))
        except (RuntimeError, TypeError, ValueError, IndexError):
            return None
        for old, new in zip(tree_flatten(result)[0], tree_flatten(fresh)[0], strict=False):
            # Tensors, and Python floats taken out of them (.item(), float(), .tolist()):
            # a later call given that very float gets the recomputed one.
            tensors = isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor)
            if tensors or (type(old), type(new)) == (float, float):
                env[id(old)] = new
    if not all(id(r) in env for r in roots):
        return None
    try:
        return torch.autograd.grad(
            [env[id(r)] for r in roots], leaves, [swap(g) for g in seeds], allow_unused=True
        )
    except RuntimeError:
        return None


def _in_place(func: Callable[..., Any]) -> bool:
    """Whether ``func`` changes its first argument in place (by torch's naming)."""
    name = getattr(func, "__name__", "")
    return (
        name == "__setitem__"
        or name.startswith("__i")
        or (name.endswith("_") and not name.endswith("__"))
    )


def _check_direct(
    outs: list[torch.Tensor],
    params: list[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
) -> None:
    """Refuse if a parameter's direct gradient depends on the outputs (step 2)."""
    used = [(w, g) for w, g in zip(params, grads, strict=True) if g is not None and g.requires_grad]
    if not used:
        return
    generator = torch.Generator(device=used[0][1].device).manual_seed(0)
    cots = [
        torch.randn(g.shape, generator=generator, dtype=g.dtype, device=g.device) for _, g in used
    ]
    hv = _gradient([g for _, g in used], outs, cots)
    if any(h is not None and bool((h != 0).any()) for h in hv):
        raise ValueError(
            invalid(
                "the loss given to loss.backward()",
                "a function of the model's outputs plus terms of the parameters alone "
                "(regularisers such as λ‖w‖²): the gradient the loss gives a parameter "
                "directly is added without clipping or noise, so it must not depend on "
                "the data; apply every layer that uses a trained parameter inside the "
                "model",
                "a loss that combines a trained parameter with the model's outputs",
            )
        )


def _rows(side: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """``side`` (one flag per example) shaped to broadcast over ``output``."""
    return side.reshape(-1, *([1] * (output.dim() - 1)))


def _random_rows(output: torch.Tensor, side: torch.Tensor, bit: int) -> torch.Tensor:
    """Gaussian values on the examples of ``side``, zero on the others (fixed seed)."""
    generator = torch.Generator(device=output.device).manual_seed(bit)
    v = torch.randn(output.shape, generator=generator, dtype=output.dtype, device=output.device)
    return v * _rows(side, output).to(output.dtype)


def _unchecked(error: Exception) -> ValueError:
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return ValueError(
        invalid(
            "the loss given to loss.backward()",
            "twice differentiable by torch (gaussdp checks with its second derivative that "
            "no example's gradient depends on another's), or computed per example by "
            "model.backward(x, y) with loss_fn",
            f"a loss torch could not differentiate twice ({first})",
        )
    )


def _reduction(size_average: Any, reduce: Any, reduction: Any) -> Any:
    """The reduction torch's losses take from their arguments (legacy ones first)."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _per_target_mean(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> torch.Tensor | None:
    """``cross_entropy`` / ``nll_loss`` with the mean reduction over class-index targets.

    torch's mean divides by the number of targets not equal to ``ignore_index`` (or by
    their summed class weights), which depends on the other examples' labels: one
    example's term is ℓᵢ / Σⱼ [yⱼ ≠ ignore_index]. Here it divides by the number of
    targets, ignored ones included (each counting 0), times the class weight: each
    example's term no longer depends on another's label. The same value as torch's
    when no target is ignored. Unequal class weights are refused (the mean would
    divide by the batch's summed weights). None for every other call: a reduction
    other than the mean, probability targets (their mean divides by the batch size).
    """
    if len(args) == 2 and "input" not in kwargs and "target" not in kwargs:
        values = {"input": args[0], "target": args[1], **kwargs}  # as torch dispatches it
    else:
        values = dict(_SIGNATURES[func].bind(*args, **kwargs).arguments)
    target = values["target"]
    legacy = (values.get("size_average"), values.get("reduce"))
    reduction = _reduction(*legacy, values.get("reduction", "mean"))
    if reduction != "mean" or not isinstance(target, torch.Tensor) or target.is_floating_point():
        return None
    weight = values.get("weight")
    first = None if weight is None else weight.reshape(-1)[0]
    if weight is not None and bool((weight != first).any()):
        raise ValueError(
            invalid(
                f"the weight of {func.__name__} with reduction='mean'",
                "equal for every class, or applied per example: "
                f"(w[y] * {func.__name__}(output, y, reduction='none')).mean() (the mean "
                "reduction divides by the batch's summed weights, so each example's "
                "gradient would depend on the other examples' labels)",
                f"a weight of {weight.numel()} unequal entries",
            )
        )
    # The sum reduction adds the per-target terms (ignored ones add nothing).
    values.update(size_average=None, reduce=None, reduction="sum")
    total = func(**values)  # a call on the probed tensors: recorded
    count = target.numel()
    return total / count if first is None else total / (first * count)  # type: ignore[no-any-return]


_MEAN_LOSSES: tuple[Callable[..., Any], ...] = (
    torch.nn.functional.cross_entropy,
    torch.nn.functional.nll_loss,
)
_SIGNATURES = {f: inspect.signature(f) for f in _MEAN_LOSSES}

# Every call made on probed tensors since the probes began, with its result (kept alive,
# so that ids stay unique): the loss as computed, for _replayed.
_TRACE: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Any]] = []
# Tensors not probed that a recorded call changed in place with probed values: id ->
# (the tensor, kept alive so that ids stay unique; its value before the first such call).
_CHANGED: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
# The LossChecks with probes awaiting their backward pass.
_ACTIVE: weakref.WeakSet[LossCheck] = weakref.WeakSet()
_BACKWARDS: tuple[Callable[..., Any], ...] = (torch.Tensor.backward, torch.autograd.backward)
# Non-empty while the check runs: calls on probed tensors then are the check's own.
_QUIET: list[bool] = []


class _Probed(torch.Tensor):
    """A probed output, and every tensor computed from it: its backward is checked first."""

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if torch.compiler.is_compiling():  # under torch.compile: run eagerly, recorded
            return _eager(cls, func, types, args, kwargs)
        return _dispatch(cls, func, types, args, kwargs)


def _dispatch(
    cls: type[_Probed],
    func: Callable[..., Any],
    types: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
) -> Any:
    """:meth:`_Probed.__torch_function__`: record the call, check a backward pass first."""
    kwargs = kwargs or {}
    if _QUIET:  # the check's own calls: plain tensors in and out, nothing recorded
        return torch.Tensor.__torch_function__(func, (), args, kwargs)  # type: ignore[no-untyped-call]
    if func in _MEAN_LOSSES:
        mean = _per_target_mean(func, args, kwargs)  # made of recorded calls
        if mean is not None:
            return mean
    if func in _BACKWARDS and _ACTIVE:
        _QUIET.append(True)
        try:
            roots, seeds = _roots(func, args, kwargs)
            if any(r.requires_grad for r in roots):  # else backward raises torch's error
                for check in list(_ACTIVE):
                    check.check(roots, seeds)
        finally:
            _QUIET.pop()
    if _ACTIVE and _in_place(func) and args and _changes_callers(args, kwargs):
        _CHANGED[id(args[0])] = (args[0], args[0].detach().clone())
    result = super(_Probed, cls).__torch_function__(func, types, args, kwargs)  # type: ignore[no-untyped-call]
    if _ACTIVE and func not in _BACKWARDS:
        _TRACE.append((func, args, kwargs, result))
    return result


# _dispatch with torch.compile's tracing turned off: a graph break, the call made eagerly.
_eager = torch.compiler.disable(_dispatch)  # type: ignore[no-untyped-call]


def _changes_callers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call changes in place, with probed values, a tensor not probed (first seen)."""
    first = args[0]
    if not isinstance(first, torch.Tensor) or isinstance(first, _Probed) or id(first) in _CHANGED:
        return False
    return any(isinstance(t, _Probed) for t in tree_flatten((args[1:], kwargs))[0])


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """The same tensor (data and graph) as a plain ``torch.Tensor``."""
    return tensor.as_subclass(torch.Tensor) if isinstance(tensor, _Probed) else tensor


def _roots(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """The tensors and seed gradients of a ``Tensor.backward`` or ``autograd.backward`` call."""
    if func is torch.Tensor.backward:
        tensors: Any = args[0]
        seeds: Any = args[1] if len(args) > 1 else kwargs.get("gradient")
    else:
        tensors = args[0] if args else kwargs["tensors"]
        seeds = args[1] if len(args) > 1 else kwargs.get("grad_tensors")
    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    if seeds is None or isinstance(seeds, torch.Tensor):
        seeds = [seeds] * len(roots) if seeds is None else [seeds]
    return roots, list(seeds)
