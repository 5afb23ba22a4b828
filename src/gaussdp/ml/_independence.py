r"""A static proof that a model processes the examples of a batch independently.

Ghost clipping (:mod:`gaussdp.ml._ghost`) runs the forward pass on the whole batch and
attributes slice i of every layer's input and output to example i. That is sound only
if nothing in the model mixes examples: no reduction over the batch dimension
(``h - h.mean(0)``, functional batch norm), no data-dependent switch computed from the
whole batch (``torch.where((x > 100).any(), …)``), no reshape that moves the batch
dimension, no use of the batch size as a number. :func:`prove` decides it statically
and conservatively, for one call structure (argument tree, dtypes, shapes beyond the
batch size):

1. the model is traced with :mod:`torch.fx` (``Tracer.trace``), with the modules of
   :data:`LEAVES` kept whole (matched by exact type, without an instance-level
   ``forward``) and every other module traced through; non-tensor arguments and
   defaults are fixed to the values of the call (``concrete_args``). A forward that
   cannot be traced (control flow on tensors) is not proven.
2. the graph is run once on copies of the inputs (no gradients, torch's generators
   restored afterwards) to learn every value's concrete shape, and each node is
   given a *fact*: a tensor's batch dimension (slice i depends on example i and on
   data-independent values only), ``"const"`` (independent of the data and of the
   batch size), ``"size"`` (the batch size as a Python number), or a tuple of facts.
   Each node's fact follows from a rule for its operation (:func:`_function_fact`,
   :func:`_module_fact`); an operation without a rule, or whose arguments the rule
   does not accept, stops the proof and is named in the reason returned.
3. every layer ghost clipping reads must see the examples along the dimension its
   formulas assume (the first; the second for ``nn.MultiheadAttention`` with
   ``batch_first=False``), and every output of the model must have them first.

The rules only accept what holds for every batch size: reductions, softmax and
concatenation over explicit dimensions other than the batch one; elementwise
operations with broadcasting that keeps the batch dimensions aligned (a constant
operand must have size 1 there); reshapes whose batch dimension is the batch size of
the same tensor (``x.view(x.size(0), -1)``) or ``-1`` with the products before and
after it unchanged; indexing with ints and slices, the batch dimension only by ``:``;
``zeros``/``randn``/``expand`` of constants to the batch size (identical or i.i.d.
slices); never ``arange`` of the batch size (it numbers the examples). The batch size
as a number is only accepted as such a size, never in arithmetic.

Python control flow that does not depend on tensors is fixed at the trace: a
``forward`` that branches on Python randomness, a counter, or state held in a list, a
dict or a global could later take a path that was never traced. So what is proven is
the graph, and the graph is what runs: :func:`prove` returns it as a :class:`Proven`
(an ``fx.GraphModule`` holding the model's own kept-whole modules, parameters and
buffers), and the batched path of :mod:`gaussdp.ml.dpsgd` calls it in place of
``model.forward``. The engine also keys proofs by the modules' training flags and
other scalar attributes (a change is traced and proven again), refuses the proof while
any module carries hooks (a hook on a leaf could change its output unseen), and keeps
comparing the batched path with the per-example one (which runs ``model.forward``) on
some calls (:meth:`gaussdp.ml.dpsgd._Engine._verify_now`).
"""

from __future__ import annotations

import inspect
import math
import operator
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx, nn
from torch.nn import functional as nnf

__all__ = ["LEAVES", "Proven", "prove"]

Fact = Any  # int (batch dimension of a tensor) | "const" | "size" | tuple[Fact, ...]
CONST = "const"
SIZE = "size"


class NotProvenError(Exception):
    """A node of the traced model whose per-example independence has no proof."""


_ELEMENTWISE_MODULES: tuple[type[nn.Module], ...] = (
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Sigmoid,
    nn.Tanh,
    nn.Softplus,
    nn.Softsign,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.LogSigmoid,
    nn.Tanhshrink,
    nn.Identity,
    nn.Dropout,
    nn.AlphaDropout,
)
_POOLS: dict[type[nn.Module], int] = {  # pooling over the last k dimensions
    nn.MaxPool1d: 1,
    nn.MaxPool2d: 2,
    nn.MaxPool3d: 3,
    nn.AvgPool1d: 1,
    nn.AvgPool2d: 2,
    nn.AvgPool3d: 3,
    nn.AdaptiveAvgPool1d: 1,
    nn.AdaptiveAvgPool2d: 2,
    nn.AdaptiveAvgPool3d: 3,
    nn.AdaptiveMaxPool1d: 1,
    nn.AdaptiveMaxPool2d: 2,
    nn.AdaptiveMaxPool3d: 3,
}
_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.Embedding,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.MultiheadAttention,
    nn.TransformerEncoderLayer,
    nn.Flatten,
    nn.Unflatten,
    nn.Softmax,
    nn.LogSoftmax,
)
#: Module types the trace keeps whole: their handling of the batch is known.
LEAVES: frozenset[type[nn.Module]] = frozenset(_ELEMENTWISE_MODULES + tuple(_POOLS) + _LAYERS)
#: The children a kept-whole layer may have, by name: exactly these stock types. Any
#: other child (or none of the others may have one) makes the layer traced through.
_CHILDREN: dict[type[nn.Module], dict[str, tuple[type[nn.Module], ...]]] = {
    nn.TransformerEncoderLayer: {
        "self_attn": (nn.MultiheadAttention,),
        "linear1": (nn.Linear,),
        "linear2": (nn.Linear,),
        "dropout": (nn.Dropout,),
        "dropout1": (nn.Dropout,),
        "dropout2": (nn.Dropout,),
        "norm1": (nn.LayerNorm,),
        "norm2": (nn.LayerNorm,),
        "activation": _ELEMENTWISE_MODULES,
    },
    nn.MultiheadAttention: {
        "out_proj": (nn.modules.linear.NonDynamicallyQuantizableLinear,),
    },
}


def _stock_leaf(m: nn.Module) -> bool:
    """Whether ``m`` is kept whole: a stock type of LEAVES, its children stock too.

    No instance-level ``forward``/``_call_impl`` on it or any descendant, and each
    child exactly of the type its class creates (hooks are refused for every module).
    """
    return type(m) in LEAVES and _stock_tree(m)


def _stock_tree(m: nn.Module) -> bool:
    if "forward" in vars(m) or "_call_impl" in vars(m):
        return False
    allowed = _CHILDREN.get(type(m), {})
    return all(
        type(child) in allowed.get(name, ()) and _stock_tree(child)
        for name, child in m.named_children()
    )


# -- operations, by name (torch functions, Tensor methods and operators alike) -------------
_ELEMENTWISE = frozenset(
    [
        "add",
        "sub",
        "rsub",
        "mul",
        "div",
        "true_divide",
        "truediv",
        "floordiv",
        "floor_divide",
        "mod",
        "remainder",
        "neg",
        "pos",
        "pow",
        "abs",
        "exp",
        "expm1",
        "log",
        "log1p",
        "log2",
        "log10",
        "sqrt",
        "rsqrt",
        "sin",
        "cos",
        "tan",
        "tanh",
        "sigmoid",
        "relu",
        "relu6",
        "gelu",
        "silu",
        "mish",
        "softplus",
        "elu",
        "selu",
        "celu",
        "leaky_relu",
        "hardtanh",
        "hardswish",
        "hardsigmoid",
        "logsigmoid",
        "softsign",
        "tanhshrink",
        "clamp",
        "clip",
        "clamp_min",
        "clamp_max",
        "maximum",
        "minimum",
        "where",
        "masked_fill",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "and_",
        "or_",
        "xor",
        "invert",
        "erf",
        "erfc",
        "floor",
        "ceil",
        "round",
        "trunc",
        "frac",
        "sign",
        "reciprocal",
        "square",
        "lerp",
        "addcmul",
        "addcdiv",
        "nan_to_num",
        "dropout",
        "alpha_dropout",
        "float",
        "double",
        "half",
        "bfloat16",
        "int",
        "long",
        "bool",
        "to",
        "type_as",
        "contiguous",
        "clone",
        "detach",
        "sinh",
        "cosh",
        "atan",
        "asin",
        "acos",
        "fmod",
        "hypot",
        "atan2",
        "isnan",
        "isfinite",
        "isinf",
    ]
)
_METADATA_ONLY = frozenset({"to", "type_as"})  # later tensor arguments give dtype/device only
_REDUCTIONS = {  # name: position of ``dim`` (self first)
    **dict.fromkeys(
        [
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "prod",
            "logsumexp",
            "argmax",
            "argmin",
            "any",
            "all",
            "nansum",
            "nanmean",
            "median",
            "std",
            "var",
            "count_nonzero",
        ],
        1,
    ),
    "norm": 2,
    "vector_norm": 2,
}
_ALONG = {  # dimension-wise operations that keep the shape: name: (position, default dim)
    "softmax": (1, None),
    "log_softmax": (1, None),
    "softmin": (1, None),
    "cumsum": (1, None),
    "cumprod": (1, None),
    "logcumsumexp": (1, None),
    "normalize": (2, 1),
    "glu": (1, -1),
}
_PERMUTATIONS = frozenset(
    ["transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis", "t"]
)
_SPLITS = frozenset(["chunk", "split", "unbind", "tensor_split"])
_FILLS = frozenset(
    [
        "zeros",
        "ones",
        "empty",
        "full",
        "rand",
        "randn",
        "new_zeros",
        "new_ones",
        "new_empty",
        "new_full",
    ]
)
_LIKE = frozenset(["zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"])
_CONSTRUCT = frozenset(["arange", "linspace", "logspace", "eye", "tensor", "as_tensor"])
_CHECKS = frozenset({"_assert", "_assert_is_none"})  # fx's guards on fixed arguments
_ATTRIBUTES_CONST = frozenset(
    [
        "device",
        "dtype",
        "ndim",
        "is_cuda",
        "is_floating_point",
        "is_complex",
        "layout",
        "dim",
        "ndimension",
    ]
)

_OPERATORS: dict[Any, str] = {
    operator.add: "add",
    operator.sub: "sub",
    operator.mul: "mul",
    operator.truediv: "truediv",
    operator.floordiv: "floordiv",
    operator.mod: "mod",
    operator.neg: "neg",
    operator.pos: "pos",
    operator.pow: "pow",
    operator.eq: "eq",
    operator.ne: "ne",
    operator.lt: "lt",
    operator.le: "le",
    operator.gt: "gt",
    operator.ge: "ge",
    operator.and_: "and_",
    operator.or_: "or_",
    operator.xor: "xor",
    operator.invert: "invert",
    operator.matmul: "matmul",
    operator.getitem: "getitem",
    operator.iadd: "add_",
    operator.isub: "sub_",
    operator.imul: "mul_",
    operator.itruediv: "div_",
    getattr: "getattr",
}


def _name_of(target: Any) -> str | None:
    """The operation's name, for torch's own functions and Python's operators only."""
    if target in _OPERATORS:
        return _OPERATORS[target]
    name = getattr(target, "__name__", None)
    module = getattr(target, "__module__", None) or ""
    if name is None:
        return None
    own = (
        getattr(torch, name, None) is target
        or getattr(nnf, name, None) is target
        or getattr(torch.linalg, name, None) is target
        or getattr(torch.special, name, None) is target
        or (module.startswith("torch.fx") and name in _CHECKS)
    )
    return name if own else None


# -- facts -----------------------------------------------------------------------------------
def _const_args(facts: Sequence[Fact], what: str) -> None:
    if any(_contains_batch(f) or _contains_size(f) for f in facts):
        raise NotProvenError(f"{what}: an argument depends on the batch")


def _contains_batch(fact: Fact) -> bool:
    if isinstance(fact, list | tuple):
        return any(_contains_batch(f) for f in fact)
    return isinstance(fact, int)


def _contains_size(fact: Fact) -> bool:
    if isinstance(fact, list | tuple):
        return any(_contains_size(f) for f in fact)
    return isinstance(fact, str) and fact == SIZE


def _norm_dim(dim: Any, ndim: int, what: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -max(ndim, 1) <= dim < max(ndim, 1):
        raise NotProvenError(f"{what}: dimension {dim!r} is not an explicit dimension")
    return dim % max(ndim, 1)


def _dims(dim: Any, ndim: int, what: str) -> list[int]:
    if dim is None:
        raise NotProvenError(f"{what} over every dimension, the batch dimension included")
    dims = list(dim) if isinstance(dim, list | tuple) else [dim]
    if not dims:
        raise NotProvenError(f"{what} over every dimension (empty dim)")
    return [_norm_dim(d, ndim, what) for d in dims]


def _broadcast(tensors: list[tuple[Fact, torch.Tensor]], out: Any, what: str) -> Fact:
    """Elementwise with broadcasting: batch dimensions aligned, constants of size 1 there."""
    batched = [(f, t) for f, t in tensors if isinstance(f, int)]
    if not batched:
        return CONST
    if not isinstance(out, torch.Tensor):  # e.g. torch.where(cond): indices over the batch
        raise NotProvenError(f"{what} of a tensor with a batch gives a {type(out).__name__}")
    rights = {t.dim() - f for f, t in batched}
    if len(rights) != 1:
        raise NotProvenError(f"{what}: the operands' batch dimensions are not aligned")
    (right,) = rights
    for fact, t in tensors:
        if fact == CONST and t.dim() >= right and t.shape[t.dim() - right] != 1:
            raise NotProvenError(
                f"{what}: a constant operand spans the batch dimension (size "
                f"{t.shape[t.dim() - right]}, not 1)"
            )
    return out.dim() - right


class _Prover:
    """Runs the traced graph on real values, giving each node a fact (or raising)."""

    def __init__(
        self, root: nn.Module, expected: dict[int, int], constants: dict[str, Any]
    ) -> None:
        self.root = root
        self.constants = constants  # tensors the forward created (fx's _tensor_constant*)
        self.expected = expected  # id(ghost layer) -> the batch dimension its formulas read
        self.values: dict[fx.Node, Any] = {}
        self.facts: dict[fx.Node, Fact] = {}

    def value(self, arg: Any) -> Any:
        return fx.node.map_arg(arg, lambda n: self.values[n])

    def fact(self, arg: Any) -> Fact:
        """The fact of an argument: nodes by their fact, containers element by element."""
        if isinstance(arg, fx.Node):
            return self.facts[arg]
        if isinstance(arg, list | tuple):
            return tuple(self.fact(a) for a in arg)
        if isinstance(arg, slice):
            return tuple(self.fact(a) for a in (arg.start, arg.stop, arg.step))
        if isinstance(arg, dict):
            return tuple(self.fact(a) for a in arg.values())
        return CONST

    def run(self, graph: fx.Graph, inputs: dict[str, Any]) -> None:
        for node in graph.nodes:
            try:
                self._step(node, inputs)
            except NotProvenError as reason:
                raise NotProvenError(
                    f"{node.format_node() or node.name}{_source(node)}: {reason}"
                ) from None

    def _step(self, node: fx.Node, inputs: dict[str, Any]) -> None:
        if node.op == "placeholder":
            value = inputs[str(node.target)]
            self.values[node] = value
            self.facts[node] = 0 if isinstance(value, torch.Tensor) else CONST
            return
        if node.op == "get_attr":
            value = self.constants.get(str(node.target), self.root)
            if str(node.target) not in self.constants:
                for part in str(node.target).split("."):
                    value = getattr(value, part)
            if isinstance(value, nn.Parameter) and value.requires_grad:
                raise NotProvenError(
                    "a trainable parameter used outside its layer (the ghost formulas "
                    "read only the layers' own calls)"
                )
            self.values[node] = value
            self.facts[node] = CONST
            return
        if node.op == "output":
            fact, value = self.fact(node.args[0]), self.value(node.args[0])
            for f, v in zip(_flatten(fact), _flatten(value), strict=True):
                if isinstance(v, torch.Tensor) and f != 0:
                    raise NotProvenError("a model output does not have the examples first")
            return
        if "out" in node.kwargs and node.op != "call_module":
            # The result lands in another tensor, whose node keeps its old fact.
            name = node.target if node.op == "call_method" else _name_of(node.target)
            raise NotProvenError(f"an `out=` argument to {name or node.target!r}")
        args, kwargs = self.value(node.args), self.value(node.kwargs)
        facts, kwfacts = self.fact(node.args), {k: self.fact(v) for k, v in node.kwargs.items()}
        if node.op == "call_module":
            module = self.root.get_submodule(str(node.target))
            out = module(*args, **kwargs)
            fact = _module_fact(module, args, kwargs, facts, kwfacts, out)
            expected = self.expected.get(id(module))
            if expected is not None and (not args or facts[0] != expected):
                raise NotProvenError(
                    f"ghost clipping reads {type(module).__name__} with the examples along "
                    f"dimension {expected}, but they are along {facts[0] if args else None}"
                )
        elif node.op == "call_method":
            name = str(node.target)
            out = getattr(args[0], name)(*args[1:], **kwargs)
            fact = _function_fact(name, args, kwargs, facts, kwfacts, out)
        else:  # call_function
            target = node.target
            known = _name_of(target)
            if known is None or not callable(target):
                raise NotProvenError(f"no rule for the function {target!r}")
            out = target(*args, **kwargs)
            fact = _function_fact(known, args, kwargs, facts, kwfacts, out)
        self.values[node] = out
        self.facts[node] = fact


def _source(node: fx.Node) -> str:
    """The user's line that made the node (the last frame outside torch), or ''."""
    lines = (node.stack_trace or "").strip().splitlines()
    frames = [
        (lines[i].strip(), lines[i + 1].strip())
        for i in range(len(lines) - 1)
        if lines[i].strip().startswith("File ")
        and f"{os.sep}torch{os.sep}" not in lines[i]
        and f"{os.sep}gaussdp{os.sep}ml{os.sep}" not in lines[i]
    ]
    return f" at {frames[-1][0]}: {frames[-1][1]}" if frames else ""


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, slice):
        return [value.start, value.stop, value.step]
    if isinstance(value, list | tuple):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten(v)]
    return [value]


def _arg(
    args: Sequence[Any], kwargs: dict[str, Any], position: int, names: Sequence[str], default: Any
) -> tuple[Any, bool]:
    for name in names:
        if name in kwargs:
            return kwargs[name], True
    if position < len(args):
        return args[position], True
    return default, False


def _function_fact(
    name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    facts: Sequence[Fact],
    kwfacts: dict[str, Fact],
    out: Any,
) -> Fact:
    """The fact of ``name(*args, **kwargs)`` (a torch function, Tensor method or operator)."""
    every = [*facts, *kwfacts.values()]
    if name in _CHECKS or not (_contains_batch(every) or _contains_size(every)):
        return _const_result(out)  # computed from constants only
    if name.endswith("_") and not name.endswith("__") and name[:-1] in _ELEMENTWISE:
        return _inplace_fact(name, args, kwargs, facts, kwfacts, out)
    if name in _ELEMENTWISE:
        return _elementwise_fact(name, args, kwargs, facts, kwfacts, out)
    self_fact = facts[0] if facts else CONST
    x = args[0] if args else None
    if name == "getattr":
        return _getattr_fact(x, args[1], self_fact)
    if name == "getitem":
        return _getitem_fact(x, args[1], self_fact, facts[1], out)
    if name == "size":
        return _size_fact(x, self_fact, _arg(args, kwargs, 1, ("dim",), None)[0])
    if name in _ATTRIBUTES_CONST:
        return CONST
    if name in _FILLS:
        return _fill_fact(name, args, facts, kwfacts)
    if name in ("expand", "repeat") and isinstance(x, torch.Tensor):
        one = len(args) == 2 and isinstance(args[1], list | tuple)
        sizes = args[1] if one else args[1:]
        size_facts = facts[1] if one else facts[1:]
        return _expand_fact(name, x, self_fact, list(sizes), list(size_facts), out)
    if name in ("matmul", "mm", "bmm", "linear"):
        return _matmul_fact(name, args, facts, out)
    if name in ("cat", "concat", "concatenate", "stack"):
        return _join_fact(name, args, kwargs, facts, out)
    if name == "scaled_dot_product_attention":
        return _attention_fact(args, kwargs, facts, kwfacts)
    if not isinstance(x, torch.Tensor) or not isinstance(self_fact, int):
        raise NotProvenError(f"{name}: no rule for these arguments")
    d = self_fact
    if name in ("view", "reshape"):
        one = len(args) == 2 and isinstance(args[1], list | tuple)
        shape, shape_facts = (args[1], facts[1]) if one else (args[1:], facts[1:])
        if "shape" in kwargs:
            shape, shape_facts = kwargs["shape"], kwfacts["shape"]
        return _reshape_fact(name, x, d, list(shape), list(shape_facts), out)
    _const_args([*facts[1:], *kwfacts.values()], name)
    if name in _REDUCTIONS:
        dim, _ = _arg(args, kwargs, _REDUCTIONS[name], ("dim", "axis"), None)
        if name in ("max", "min") and isinstance(dim, torch.Tensor):
            raise NotProvenError(f"{name} of two tensors with a batch")  # pragma: no cover
        reduced = _dims(dim, x.dim(), name)
        if d in reduced:
            raise NotProvenError(f"{name} over the batch dimension {d}")
        first = _flatten(out)[0]
        if first.dim() == x.dim():
            return _same(out, d)
        if first.dim() == x.dim() - len(set(reduced)):
            return _same(out, d - sum(1 for r in set(reduced) if r < d))
        raise NotProvenError(f"{name}: unexpected result shape")
    if name in _ALONG:
        position, default = _ALONG[name]
        dim, _ = _arg(args, kwargs, position, ("dim",), default)
        if d in _dims(dim, x.dim(), name):
            raise NotProvenError(f"{name} along the batch dimension {d}")
        return _same(out, d)
    if name in _PERMUTATIONS:
        probe = torch.empty([2 if i == d else 1 for i in range(x.dim())])
        moved = getattr(probe, name)(*args[1:], **kwargs)
        return next(i for i, s in enumerate(moved.shape) if s == 2)
    if name == "flatten":
        start, _ = _arg(args, kwargs, 1, ("start_dim",), 0)
        end, _ = _arg(args, kwargs, 2, ("end_dim",), -1)
        return _flatten_fact(x, d, start, end, out)
    if name == "unflatten":
        dim, _ = _arg(args, kwargs, 1, ("dim",), None)
        return _unflatten_fact(x, d, dim, out)
    if name == "unsqueeze":
        dim, _ = _arg(args, kwargs, 1, ("dim",), None)
        u = _norm_dim(dim, x.dim() + 1, name)
        return d if u > d else d + 1
    if name == "squeeze":
        dim, given = _arg(args, kwargs, 1, ("dim",), None)
        if not given:
            raise NotProvenError("squeeze() without a dimension would drop a batch of one")
        dims = set(_dims(dim, x.dim(), name))
        if d in dims:
            raise NotProvenError("squeeze of the batch dimension")
        return d - sum(1 for r in dims if r < d and x.shape[r] == 1)
    if name in _SPLITS:
        dim, _ = _arg(args, kwargs, 2 if name != "unbind" else 1, ("dim",), 0)
        s = _norm_dim(dim, x.dim(), name)
        if s == d:
            raise NotProvenError(f"{name} along the batch dimension {d}")
        inner = d if name != "unbind" or s > d else d - 1
        return tuple(inner for _ in out)
    if name in _LIKE:
        return d
    if name in ("layer_norm", "rms_norm"):
        shape, _ = _arg(args, kwargs, 1, ("normalized_shape",), None)
        if d >= x.dim() - len(shape):
            raise NotProvenError(f"{name} over the batch dimension")
        return d
    if name == "pad":
        pad, _ = _arg(args, kwargs, 1, ("pad",), None)
        if d >= x.dim() - len(pad) // 2:
            raise NotProvenError("pad of the batch dimension")
        return d
    if name == "embedding":  # F.embedding(ids, weight): rows looked up per id
        return d
    raise NotProvenError(f"no rule for {name}")


def _fill_fact(
    name: str, args: Sequence[Any], facts: Sequence[Fact], kwfacts: dict[str, Fact]
) -> Fact:
    """``zeros``/``randn``/``new_zeros``… whose size holds the batch size: equal slices."""
    start = 1 if name.startswith("new_") else 0
    rest = facts[start:]
    one = len(rest) >= 1 and isinstance(rest[0], tuple)
    sizes = list(rest[0]) if one else list(rest)
    if name.endswith("full"):  # the fill value follows the size
        sizes = sizes if one else sizes[:-1]
    if _contains_batch([*facts[start:], *kwfacts.values()]):
        raise NotProvenError(f"{name} with a value that depends on the batch")
    marked = [i for i, f in enumerate(sizes) if f == SIZE]
    if len(marked) != 1 or _contains_size(
        [f for i, f in enumerate(rest) if not one and i >= len(sizes)]
        + [kwfacts.get(k, CONST) for k in kwfacts]
    ):
        raise NotProvenError(f"{name} with the batch size twice or in a product")
    return marked[0]


def _const_result(out: Any) -> Fact:
    if isinstance(out, list | tuple):
        return tuple(_const_result(o) for o in out)
    return CONST


def _same(out: Any, d: int) -> Fact:
    if isinstance(out, list | tuple):
        return tuple(d for _ in out)
    return d


def _tensors_with_facts(
    args: Sequence[Any], kwargs: dict[str, Any], facts: Sequence[Fact], kwfacts: dict[str, Fact]
) -> list[tuple[Fact, Any]]:
    pairs = list(zip(facts, args, strict=True)) + [(kwfacts[k], v) for k, v in kwargs.items()]
    flat: list[tuple[Fact, Any]] = []
    for fact, value in pairs:
        flat.extend(zip(_flatten(fact), _flatten(value), strict=False))
    return flat


def _elementwise_fact(
    name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    facts: Sequence[Fact],
    kwfacts: dict[str, Fact],
    out: Any,
) -> Fact:
    pairs = _tensors_with_facts(args, kwargs, facts, kwfacts)
    if any(f == SIZE for f, _ in pairs):
        raise NotProvenError(f"{name} of the batch size (a number that depends on the batch)")
    if name in _METADATA_ONLY:
        pairs = pairs[:1]
    tensors = [(f, v) for f, v in pairs if isinstance(v, torch.Tensor)]
    if any(isinstance(f, int) for f, v in pairs if not isinstance(v, torch.Tensor)):
        raise NotProvenError(f"{name}: an argument with a batch is not a tensor")
    return _broadcast(tensors, out, name)


def _inplace_fact(
    name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    facts: Sequence[Fact],
    kwfacts: dict[str, Fact],
    out: Any,
) -> Fact:
    fact = _elementwise_fact(name[:-1], args, kwargs, facts, kwfacts, out)
    if fact != facts[0]:
        raise NotProvenError(f"{name} writes a value with a batch into a tensor without one")
    return fact


def _getattr_fact(x: Any, attribute: str, fact: Fact) -> Fact:
    if attribute in ("values", "indices") and isinstance(fact, tuple) and len(fact) == 2:
        return fact[0] if attribute == "values" else fact[1]  # max(dim), min(dim), sort…
    if attribute == "shape":
        return _size_fact(x, fact, None)
    if attribute in _ATTRIBUTES_CONST:
        return CONST
    raise NotProvenError(f"no rule for the attribute {attribute!r}")


def _size_fact(x: Any, fact: Fact, dim: Any) -> Fact:
    if not isinstance(x, torch.Tensor):
        raise NotProvenError("size of a value that is not a tensor")
    sizes = tuple(SIZE if isinstance(fact, int) and i == fact else CONST for i in range(x.dim()))
    if dim is None:
        return sizes
    return sizes[_norm_dim(dim, x.dim(), "size")]


def _getitem_fact(x: Any, index: Any, fact: Fact, index_fact: Fact, out: Any) -> Fact:
    if not isinstance(x, torch.Tensor):  # a tuple, list or torch.Size: pick the facts
        if not isinstance(fact, tuple):
            raise NotProvenError("indexing of a value without known parts")
        if _contains_batch(index_fact) or _contains_size(index_fact):
            raise NotProvenError("an index that depends on the batch")
        if isinstance(index, int | slice):
            return fact[index]
        raise NotProvenError(f"index {index!r}")
    if not isinstance(fact, int):
        raise NotProvenError("no rule for indexing this value")
    if _contains_batch(index_fact) or _contains_size(index_fact):
        raise NotProvenError("an index that depends on the batch")
    items = list(index) if isinstance(index, tuple) else [index]
    if any(isinstance(i, (torch.Tensor | list, bool)) for i in items):
        raise NotProvenError("advanced indexing (tensors, lists or booleans as indices)")
    if not all(i is None or i is Ellipsis or isinstance(i, int | slice) for i in items):
        raise NotProvenError(f"index {index!r}")
    if items.count(Ellipsis) > 1:
        raise NotProvenError("two ellipses")
    consuming = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.dim() - consuming)
    i = o = 0
    for item in items:
        if item is None:
            o += 1
            continue
        if i == fact:
            if item != slice(None):
                raise NotProvenError(
                    "indexing along the batch dimension (only ':' keeps the examples)"
                )
            return o
        if isinstance(item, slice):
            o += 1
        i += 1
    return o + (fact - i)


def _reshape_fact(
    name: str, x: torch.Tensor, d: int, shape: list[Any], shape_facts: list[Fact], out: Any
) -> Fact:
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise NotProvenError(f"{name} to {shape!r}")
    sizes = [i for i, f in enumerate(shape_facts) if f == SIZE]
    if len(sizes) > 1 or any(isinstance(f, int | tuple) for f in shape_facts):
        raise NotProvenError(f"{name} with the batch size twice or in a product")
    if sizes:
        p = sizes[0]
    else:
        p = -1
        # -1 at the batch position keeps the examples when the other products match
        holes = [i for i, s in enumerate(shape) if s == -1]
        if len(holes) == 1:
            p = holes[0]
    if p < 0 or not isinstance(out, torch.Tensor):
        raise NotProvenError(f"{name} without the batch size (x.size({d})) or -1 where it goes")
    return _check_layout(name, x, d, out, p)


def _check_layout(name: str, x: torch.Tensor, d: int, out: torch.Tensor, p: int) -> int:
    """Whether ``out`` (a reshape of ``x``) keeps each example's values at index p."""
    if (
        p >= out.dim()
        or out.shape[p] != x.shape[d]
        or math.prod(x.shape[:d]) != math.prod(out.shape[:p])
        or math.prod(x.shape[d + 1 :]) != math.prod(out.shape[p + 1 :])
    ):
        raise NotProvenError(f"{name} moves the batch dimension")
    return p


def _flatten_fact(x: torch.Tensor, d: int, start: Any, end: Any, out: Any) -> Fact:
    s, e = _norm_dim(start, x.dim(), "flatten"), _norm_dim(end, x.dim(), "flatten")
    if s <= d <= e and s != e:
        raise NotProvenError("flatten of the batch dimension with others")
    p = d if d < s or s == e else d - (e - s)
    return _check_layout("flatten", x, d, out, p)


def _unflatten_fact(x: torch.Tensor, d: int, dim: Any, out: Any) -> Fact:
    u = _norm_dim(dim, x.dim(), "unflatten")
    if u == d:
        raise NotProvenError("unflatten of the batch dimension")
    p = d if d < u else d + out.dim() - x.dim()
    return _check_layout("unflatten", x, d, out, p)


def _expand_fact(
    name: str, x: Any, d: Fact, sizes: list[Any], size_facts: list[Fact], out: Any
) -> Fact:
    """``expand``/``repeat`` of a tensor with a batch, or of a constant to the batch size."""
    if any(isinstance(f, int | tuple) for f in size_facts):
        raise NotProvenError(f"{name} with sizes computed from the batch")
    shift = len(sizes) - x.dim()
    marked = [i for i, f in enumerate(size_facts) if f == SIZE]
    if isinstance(d, int):
        p = d + shift
        # A size that keeps the batch dimension must be a literal (-1 for expand, 1 for
        # repeat), never a value carrying the batch size: x.repeat(x.size(0), 1) keeps it
        # only at a batch of one. expand to x.size(d) keeps it at every batch size.
        literal = size_facts[p] == CONST
        keeps = literal and (sizes[p] == -1 if name == "expand" else sizes[p] == 1)
        if marked not in ([], [p]) or not (keeps or (name == "expand" and marked == [p])):
            raise NotProvenError(f"{name} along the batch dimension")
        return p
    if len(marked) != 1:
        raise NotProvenError(f"{name} with the batch size twice or in a product")
    (p,) = marked
    if p - shift >= 0 and x.shape[p - shift] != 1:
        raise NotProvenError(f"{name} of a constant of size {x.shape[p - shift]} to the batch size")
    return p


def _join_fact(
    name: str, args: Sequence[Any], kwargs: dict[str, Any], facts: Sequence[Fact], out: Any
) -> Fact:
    """``cat``/``stack`` of tensors that all have the batch along one dimension, not joined."""
    tensors, tensor_facts = args[0], facts[0]
    dim, _ = _arg(args, kwargs, 1, ("dim", "axis"), 0)
    if not isinstance(tensors, list | tuple) or not tensors:
        raise NotProvenError(f"{name} of a value that is not a list of tensors")
    ds = set(tensor_facts) if isinstance(tensor_facts, tuple) else {tensor_facts}
    ndims = {t.dim() for t in tensors if isinstance(t, torch.Tensor)}
    if len(ds) != 1 or len(ndims) != 1 or not isinstance(next(iter(ds)), int):
        raise NotProvenError(
            f"{name} of tensors that do not all have the batch along one dimension"
        )
    (d,), (ndim,) = ds, ndims
    _const_args(facts[1:], name)
    if name == "stack":
        return d if _norm_dim(dim, ndim + 1, name) > d else d + 1
    if _norm_dim(dim, ndim, name) == d:
        raise NotProvenError(f"{name} along the batch dimension {d}")
    return d


def _matmul_fact(name: str, args: Sequence[Any], facts: Sequence[Fact], out: Any) -> Fact:
    (a, b), (fa, fb) = args[:2], facts[:2]
    if name == "linear":  # F.linear(x, weight, bias): x @ weight.T + bias
        if any(isinstance(f, int) for f in facts[1:]):
            raise NotProvenError("linear with a weight that depends on the batch")
        if not isinstance(fa, int) or fa >= a.dim() - 1:
            raise NotProvenError("linear over the batch dimension")
        return fa
    if isinstance(fa, int) and not isinstance(fb, int):
        if a.dim() < 2 or fa >= a.dim() - 1 or b.dim() > 2:
            raise NotProvenError(f"{name} contracts the batch dimension")
        return fa
    if isinstance(fa, int) and isinstance(fb, int):
        if a.dim() != b.dim() or fa != fb or fa >= a.dim() - 2:
            raise NotProvenError(
                f"{name} of two tensors with batches not in a shared batch dimension"
            )
        return fa
    raise NotProvenError(f"{name} with the batch in its second operand only")


def _attention_fact(
    args: Sequence[Any], kwargs: dict[str, Any], facts: Sequence[Fact], kwfacts: dict[str, Fact]
) -> Fact:
    names = ("query", "key", "value")
    qkv = [_arg(args, kwargs, i, (n,), None)[0] for i, n in enumerate(names)]
    fs = [facts[i] if i < len(facts) else kwfacts.get(n, CONST) for i, n in enumerate(names)]
    if not all(isinstance(f, int) for f in fs) or len({f for f in fs}) != 1:
        raise NotProvenError("attention whose query, key and value do not share a batch dimension")
    if len({t.dim() for t in qkv}) != 1 or fs[0] >= qkv[0].dim() - 2:
        raise NotProvenError("attention over the batch dimension")
    mask, _ = _arg(args, kwargs, 3, ("attn_mask",), None)
    mask_fact = facts[3] if len(facts) > 3 else kwfacts.get("attn_mask", CONST)
    if mask is not None:
        _broadcast([(fs[0], qkv[0]), (mask_fact, mask)], qkv[0], "attention mask")
    return fs[0]


_ACTIVATIONS = (nnf.relu, nnf.gelu)


def _module_fact(
    module: nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    facts: Sequence[Fact],
    kwfacts: dict[str, Fact],
    out: Any,
) -> Fact:
    """The fact of a leaf module's call (see :data:`LEAVES`)."""
    kind = type(module)
    if kind is nn.MultiheadAttention:
        assert isinstance(module, nn.MultiheadAttention)
        return _mha_fact(module, args, kwargs, facts, kwfacts, out)
    if kind is nn.TransformerEncoderLayer:
        assert isinstance(module, nn.TransformerEncoderLayer)
        return _encoder_fact(module, args, kwargs, facts, kwfacts)
    if len(args) != 1 or kwargs:
        raise NotProvenError(f"{kind.__name__} called with other arguments than one tensor")
    x, d = args[0], facts[0]
    if not isinstance(x, torch.Tensor) or not isinstance(d, int):
        if not _contains_batch(d):
            return CONST
        raise NotProvenError(f"{kind.__name__} of a value that is not a tensor")
    if kind in _ELEMENTWISE_MODULES:
        return d
    if kind in _POOLS:
        if getattr(module, "return_indices", False) or d >= x.dim() - _POOLS[kind]:
            raise NotProvenError(f"{kind.__name__} over the batch dimension")
        return d
    if kind is nn.Linear:
        if d >= x.dim() - 1:
            raise NotProvenError("Linear over the batch dimension (an input of one dimension)")
        return d
    if kind in (nn.Conv1d, nn.Conv2d, nn.Conv3d):
        assert isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d)
        if d != 0 or x.dim() != 2 + len(module.kernel_size):
            raise NotProvenError(f"{kind.__name__} without the examples first")
        return 0
    if kind is nn.Embedding:
        return d
    if kind is nn.LayerNorm:
        assert isinstance(module, nn.LayerNorm)
        if d >= x.dim() - len(module.normalized_shape):
            raise NotProvenError("LayerNorm over the batch dimension")
        return d
    if kind is nn.GroupNorm:
        if d != 0 or x.dim() < 2:
            raise NotProvenError("GroupNorm without the examples first")
        return 0
    if kind is nn.Flatten:
        assert isinstance(module, nn.Flatten)
        return _flatten_fact(x, d, module.start_dim, module.end_dim, out)
    if kind is nn.Unflatten:
        assert isinstance(module, nn.Unflatten)
        return _unflatten_fact(x, d, module.dim, out)
    if kind in (nn.Softmax, nn.LogSoftmax):
        dim = getattr(module, "dim", None)
        if d in _dims(dim, x.dim(), kind.__name__):
            raise NotProvenError(f"{kind.__name__} along the batch dimension")
        return d
    raise NotProvenError(f"no rule for {kind.__name__}")  # pragma: no cover


def _mha_fact(
    module: nn.MultiheadAttention,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    facts: Sequence[Fact],
    kwfacts: dict[str, Fact],
    out: Any,
) -> Fact:
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    call = bound.arguments
    fact_of = dict(zip(call, [*facts, *(CONST for _ in range(len(call)))], strict=False))
    fact_of.update(kwfacts)
    dim = 0 if module.batch_first else 1
    for k in ("query", "key", "value"):
        if fact_of[k] != dim or not isinstance(call[k], torch.Tensor) or call[k].dim() != 3:
            raise NotProvenError(
                f"MultiheadAttention {k} without the examples along dimension {dim}"
            )
    mask, padding = call["attn_mask"], call["key_padding_mask"]
    if mask is not None and (fact_of["attn_mask"] != CONST or mask.dim() != 2):
        raise NotProvenError("MultiheadAttention with a mask other than one 2-D constant")
    if padding is not None and (fact_of["key_padding_mask"] != 0 or padding.dim() != 2):
        raise NotProvenError("MultiheadAttention key_padding_mask without the examples first")
    weights = out[1]
    return (dim, CONST if weights is None else 0)


def _encoder_fact(
    module: nn.TransformerEncoderLayer,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    facts: Sequence[Fact],
    kwfacts: dict[str, Fact],
) -> Fact:
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    call = bound.arguments
    fact_of = dict(zip(call, [*facts, *(CONST for _ in range(len(call)))], strict=False))
    fact_of.update(kwfacts)
    activation = module.activation
    if not module.self_attn.batch_first:
        raise NotProvenError(
            "TransformerEncoderLayer with batch_first=False (its layers would see the "
            "examples along the second dimension)"
        )
    if not (
        activation in _ACTIVATIONS
        or (type(activation) in _ELEMENTWISE_MODULES and "forward" not in vars(activation))
    ):
        raise NotProvenError(f"TransformerEncoderLayer with the activation {activation!r}")
    src = call["src"]
    if fact_of["src"] != 0 or not isinstance(src, torch.Tensor) or src.dim() != 3:
        raise NotProvenError("TransformerEncoderLayer src without the examples first")
    mask, padding = call["src_mask"], call["src_key_padding_mask"]
    if mask is not None and (fact_of["src_mask"] != CONST or mask.dim() != 2):
        raise NotProvenError("TransformerEncoderLayer with a mask other than one 2-D constant")
    if padding is not None and (fact_of["src_key_padding_mask"] != 0 or padding.dim() != 2):
        raise NotProvenError(
            "TransformerEncoderLayer src_key_padding_mask without the examples first"
        )
    return 0


# -- the trace ---------------------------------------------------------------------------------
class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return _stock_leaf(m)


def _state(model: nn.Module) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (m.__dict__, {k: (v.copy() if isinstance(v, dict) else v) for k, v in vars(m).items()})
        for m in model.modules()
    ]


def _restore(state: list[tuple[dict[str, Any], dict[str, Any]]], constants: dict[str, Any]) -> bool:
    """Put back attributes the trace changed; whether any had changed.

    The tensors fx stores on the root (``_tensor_constant0``…: constants the forward
    created) are moved into ``constants`` and are no change.
    """
    changed = False
    for index, (live, saved) in enumerate(state):
        for key in set(live) | set(saved):
            if index == 0 and key not in saved and key.startswith("_tensor_constant"):
                constants[key] = live.pop(key)
                continue
            old, new = saved.get(key), live.get(key)
            same = (
                old.keys() == new.keys() and all(old[k] is new[k] for k in old)
                if isinstance(old, dict) and isinstance(new, dict)
                else old is new
            )
            if not same or (key in live) != (key in saved):
                changed = True
                if key in saved:
                    live[key] = saved[key]
                else:
                    del live[key]
    return changed


def _has_hooks(model: nn.Module, allowed: Callable[[nn.Module, Any], bool]) -> str | None:
    """A module with hooks other than those ``allowed``, by name, or None."""
    from torch.nn.modules import module as torch_module

    hooks = ("forward_hooks", "forward_pre_hooks", "backward_hooks", "backward_pre_hooks")
    if any(getattr(torch_module, f"_global_{h}", None) for h in hooks):
        return "global module hooks"
    for name, m in model.named_modules():
        for table in hooks:
            if any(not allowed(m, h) for h in getattr(m, f"_{table}").values()):
                return f"model.{name or 'self'} has hooks"
    return None


class Proven:
    """The traced graph of a proven call structure, run in place of ``model.forward``.

    :attr:`module` is an ``fx.GraphModule`` of the graph the proof covered. Its
    kept-whole modules (every ghost layer among them, since no trainable parameter
    may be read outside one), parameters, buffers and constants are the model's own
    objects, not copies: forward hooks on the layers fire, and
    ``functional_call(proven.module, …)`` with the names of :attr:`parameters` swaps
    the model's parameters. Python control flow, and every non-tensor argument, is
    the one of the trace (fx asserts numbers and None at each call); a module's
    training flag is read live by the kept-whole ones (``Dropout``) and was fixed
    at the trace in traced code (the engine's proof key holds every flag).
    """

    def __init__(self, module: fx.GraphModule, signature: inspect.Signature) -> None:
        self.module = module
        self.signature = signature
        #: Every name under which the graph reaches a parameter (tied ones each time).
        self.parameters = list(module.named_parameters(remove_duplicate=False))

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """A call's arguments, defaults filled, in the order of the graph's inputs."""
        if not kwargs and len(args) == len(self.signature.parameters):
            return args
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*self.arguments(args, kwargs))


def _attribute(root: nn.Module, target: str) -> Any:
    value: Any = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def prove(
    model: nn.Module,
    expected: dict[int, int],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    allowed_hook: Callable[[nn.Module, Any], bool] = lambda m, h: False,
) -> Proven | str:
    """The graph of ``model(*args, **kwargs)`` if it provably processes each example on its own.

    The :class:`Proven` graph is what the proof covers: run it, not ``model.forward``
    (whose Python control flow may later differ). Otherwise the reason, naming the
    node or layer that could not be proven (see the module notes for the rules).
    ``expected`` maps ``id(layer)`` of each layer ghost clipping reads to the
    dimension its formulas take the examples along.
    ``allowed_hook(module, hook)`` says which hooks are the caller's own.
    """
    hooked = _has_hooks(model, allowed_hook)
    if hooked is not None:
        return f"{hooked} (a hook could change a layer's output unseen by the proof)"
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as error:
        return f"the call does not match forward's signature: {error}"
    bound.apply_defaults()
    concrete: dict[str, Any] = {}
    inputs: dict[str, Any] = {}
    for key, value in bound.arguments.items():
        kind = bound.signature.parameters[key].kind
        if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            return "forward takes *args or **kwargs"
        if isinstance(value, torch.Tensor):
            inputs[key] = value.detach().clone()
        elif any(isinstance(v, torch.Tensor) for v in _flatten(value)):
            return f"argument {key!r} holds tensors inside a container"
        else:
            concrete[key] = value
    state = _state(model)
    root = model
    if type(model) in LEAVES:  # fx traces the root's forward: wrap a lone layer
        if len(inputs) != 1 or concrete:
            return f"a lone {type(model).__name__} called with other arguments than one tensor"
        root, concrete = nn.Sequential(model), {}
    try:
        tracer = _Tracer()
        tracer.record_stack_traces = True
        # The answer must not depend on the caller's warning filters (under "error",
        # fx's warning that it cannot assert a numpy argument's value at each call
        # once made every such model unproven). That warning is moot here: the
        # engine keys proofs by every non-tensor argument (dpsgd._call_key), so the
        # graph never runs with another value; a warning the forward itself gives
        # is given again by the training call, which runs it.
        # Not thread-safe before Python 3.14: catch_warnings swaps the process-wide
        # filters, so while a trace runs another thread's warnings are ignored too, and
        # a catch_warnings of another thread that overlaps it can restore the wrong
        # filters. A lock here would order only gaussdp's own traces, not other code's
        # warnings, so none is taken (the proof below swaps the filters the same way).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = tracer.trace(root, concrete_args=concrete)
    except Exception as error:
        _restore(state, {})
        return f"torch.fx cannot trace the model ({type(error).__name__}: {error})"
    constants: dict[str, Any] = {}
    if _restore(state, constants):
        return "the traced forward changes the model's attributes"
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(bound.arguments):
        return "the trace's inputs do not match forward's parameters"
    values = {
        str(node.target): inputs.get(key, concrete.get(key))
        for node, key in zip(placeholders, bound.arguments, strict=True)
    }
    prover = _Prover(root, expected, constants)
    # The proof runs each operation before its rule: one writing into the model (batch
    # statistics of F.batch_norm(training=True), an in-place update of a buffer) must
    # leave no trace, so parameters and buffers a run changed are put back (only those:
    # a copy into a tensor a pending backward saved would break that backward).
    tensors = [*model.parameters(), *model.buffers()]
    saved = [(t, t._version, t.detach().clone()) for t in tensors]
    try:
        with (
            torch.no_grad(),
            torch.random.fork_rng(devices=_cuda_devices(args, kwargs)),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")  # the training call itself will warn, if at all
            prover.run(graph, values)
    except NotProvenError as reason:
        return str(reason)
    except Exception as error:
        return f"the proof could not run the traced model ({type(error).__name__}: {error})"
    finally:
        with torch.no_grad():
            for t, version, copy in saved:
                same = torch.allclose(t, copy, rtol=0.0, atol=0.0, equal_nan=True)
                if t._version != version or not same:  # batch_norm's update keeps _version
                    t.copy_(copy)
    # The graph's modules and attributes are the model's own objects (a dict root:
    # fx would otherwise copy the modules above the kept-whole ones).
    owned = {
        str(n.target): constants[str(n.target)]
        if str(n.target) in constants
        else _attribute(root, str(n.target))
        for n in graph.nodes
        if n.op in ("get_attr", "call_module")
    }
    return Proven(fx.GraphModule(owned, graph), bound.signature)


def _cuda_devices(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.device]:
    devices = {t.device for t in _flatten([list(args), kwargs]) if isinstance(t, torch.Tensor)}
    return [d for d in devices if d.type == "cuda"]
