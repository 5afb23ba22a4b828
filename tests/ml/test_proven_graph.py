"""The batched (ghost) path runs the graph its independence proof covered, not ``forward``.

The proof (``gaussdp.ml._independence``) traces the model once per call structure and
model state; Python control flow on other state (a global dict, a list, a module-level
variable) is fixed in that trace. Were ``model.forward`` run on the batched path, a
flag flipped after the proof would switch on a centring over the batch that no proof
covered (before the graph was run: the clipped sum moved by 1.55 C here with the
runtime checks off). Here the brute-force sensitivity stays ≤ C on every path and both
APIs, or the call is refused.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

from brute_force import draw, sensitivity, step_sum, zero_noise_private  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402

from gaussdp.ml import dpsgd as dpsgd_module  # noqa: E402
from gaussdp.ml._ghost import GHOST_MARGIN  # noqa: E402
from gaussdp.ml.dpsgd import _Engine  # noqa: E402
from gaussdp.ml.noise import CLIP_MARGIN  # noqa: E402

SHRINK = GHOST_MARGIN / CLIP_MARGIN  # ghost clipping's margin for its float error

CLIP = 1.0
APIS = ["backward", "idiom"]
STATES = ["global dict", "list attribute", "module variable"]

CONFIG = {"mix": False}  # a global dict
MIX = False  # a module-level variable
FORWARD_CALLS: list[int] = []


class Branching(nn.Module):
    """Linear → (h − h.mean(0) if some Python state says so) → Linear."""

    def __init__(self, state: str) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(6, 3)
        self.state = state
        self.flags = [False]  # a list: not part of the proof's key

    def mixing(self) -> bool:
        if self.state == "global dict":
            return CONFIG["mix"]
        if self.state == "list attribute":
            return self.flags[0]
        return MIX

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        FORWARD_CALLS.append(1)
        h = self.a(x)
        if self.mixing():
            h = h - h.mean(0)
        return self.b(h)


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    module = sys.modules[__name__]
    CONFIG["mix"] = False
    module.MIX = False  # type: ignore[attr-defined]
    FORWARD_CALLS.clear()
    yield
    CONFIG["mix"] = False
    module.MIX = False  # type: ignore[attr-defined]


def _flip(net: Branching) -> None:
    if net.state == "global dict":
        CONFIG["mix"] = True
    elif net.state == "list attribute":
        net.flags[0] = True
    else:
        sys.modules[__name__].MIX = True  # type: ignore[attr-defined]


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return 5 * torch.randn(8, 4, generator=gen), torch.randint(0, 3, (8,), generator=gen)


def _private(net: nn.Module, mode: str) -> tuple:  # type: ignore[type-arg]
    return zero_noise_private(net, *_data(), mode, CLIP)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["auto", "ghost"])
@pytest.mark.parametrize("state", STATES)
def test_the_proven_graph_alone_keeps_sensitivity_c(
    state: str, mode: str, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime checks off: only the graph stands between the flag and the batch.
    monkeypatch.setattr(_Engine, "_verify_now", lambda self, shapes: False)
    torch.manual_seed(0)
    net = Branching(state)
    model, optimizer, _ = _private(net, mode)
    clipped_sum = step_sum(net, model, optimizer, api)
    x, y = _data()
    clipped_sum(x[:4], y[:4])  # proven and cached, state not mixing
    _flip(net)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # stays on the batched path: no fallback warning
        worst = sensitivity(clipped_sum, x, y)
    assert worst <= CLIP * (1 + 1e-6)
    assert len(FORWARD_CALLS) == 1  # the trace; the batched calls ran the graph


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["auto", "functorch", "ghost"])
def test_a_flag_flipped_after_the_proof_keeps_sensitivity_c_or_is_refused(
    mode: str, api: str
) -> None:
    torch.manual_seed(0)
    net = Branching("global dict")  # the three kinds of state: the test above
    model, optimizer, _ = _private(net, mode)
    clipped_sum = step_sum(net, model, optimizer, api)
    x, y = _data()
    clipped_sum(x[:4], y[:4])
    _flip(net)
    if mode == "ghost":  # the runtime check sees forward differ from the graph
        with pytest.raises(ValueError, match="no longer takes the path traced"):
            sensitivity(clipped_sum, x, y)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worst = sensitivity(clipped_sum, x, y)
    assert worst <= CLIP * (1 + 1e-6)
    fallbacks = [w for w in caught if "switched off" in str(w.message)]
    assert len(fallbacks) == (1 if mode == "auto" else 0)


def test_evaluation_runs_forward_and_training_runs_the_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_Engine, "_verify_now", lambda self, shapes: False)
    net = Branching("global dict")
    model, optimizer, _ = _private(net, "ghost")
    x, _ = _data()
    model(x).sum().backward()  # traced once; the batched pass runs the graph
    model(x[:7]).sum().backward()
    assert len(FORWARD_CALLS) == 1
    CONFIG["mix"] = True
    trained = model(x)
    with torch.no_grad():
        evaluated = model(x)  # the model's own forward, now centring
    assert len(FORWARD_CALLS) == 2
    torch.testing.assert_close(trained.detach(), net.b(net.a(x)).detach())
    torch.testing.assert_close(evaluated, net.b(net.a(x) - net.a(x).mean(0)))
    optimizer.zero_grad()


class TwoInputs(nn.Module):
    """Two tensor inputs, a number and an optional mask, passed by keyword."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.e = nn.Embedding(5, 6)
        self.b = nn.Linear(6, 3)

    def forward(
        self,
        x: torch.Tensor,
        ids: torch.Tensor,
        scale: float = 1.0,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.a(x) * scale + self.e(ids)
        if mask is not None:
            h = h * mask
        return self.b(h), h.sum(1)


def test_keyword_and_several_inputs_reach_the_graph() -> None:
    gen = torch.Generator().manual_seed(1)
    x, ids = torch.randn(6, 4, generator=gen), torch.randint(0, 5, (6,), generator=gen)
    mask, y = (torch.rand(6, 6, generator=gen) > 0.3).float(), torch.randint(0, 3, (6,))
    sums = []
    for mode in ("ghost", "functorch"):  # the graph against each example on its own
        torch.manual_seed(0)
        net = TwoInputs()
        model, optimizer, _ = _private(net, mode)
        for _ in range(2):  # the first call proven and checked, the second unchecked
            optimizer.zero_grad()
            draw(optimizer)
            logits, aux = model(x, ids=ids, mask=mask, scale=2.0)
            (nnf.cross_entropy(logits, y) + aux.square().mean()).backward()
            optimizer.step()
        sums.append(torch.cat([p.grad.reshape(-1) for p in net.parameters()]))
    torch.testing.assert_close(sums[0], sums[1] * SHRINK, rtol=1e-4, atol=1e-6)


class Scaled(nn.Module):
    """Reads what the proof's key holds: the training flag, a float attribute, a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(6, 3)
        self.temperature = 1.0
        self.register_buffer("shift", torch.zeros(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        FORWARD_CALLS.append(1)
        h = self.a(x) / self.temperature + self.shift
        return self.b(h * 2 if self.training else h)


def test_a_change_the_key_holds_is_traced_again_and_old_graphs_are_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_Engine, "_verify_now", lambda self, shapes: False)
    monkeypatch.setattr(dpsgd_module, "_MAX_PROOFS", 3)
    net = Scaled()
    model, optimizer, _ = _private(net, "ghost")
    x, _ = _data()
    expected = net.b(net.a(x) * 2).detach()
    torch.testing.assert_close(model(x).detach(), expected)
    model.eval()  # the wrapper's eval reaches the model: a new key, a new trace
    torch.testing.assert_close(model(x).detach(), net.b(net.a(x)).detach())
    assert len(FORWARD_CALLS) == 2
    for step in range(2, 6):
        net.temperature = float(step)
        torch.testing.assert_close(model(x).detach(), net.b(net.a(x) / step).detach())
    net.shift = torch.ones(6)  # a buffer assigned anew: the graph held the old one
    torch.testing.assert_close(model(x).detach(), net.b(net.a(x) / 5 + 1).detach())
    assert len(FORWARD_CALLS) == 7
    assert len(model._engine.proofs) == 3  # type: ignore[attr-defined]
    optimizer.zero_grad()


# -- the runtime check's memory: per-example gradients in ranges, or the whole dropout batch ---
class DroppingBranching(Branching):
    """Branching with dropout after the first layer: the batched pass draws random numbers."""

    def __init__(self) -> None:
        super().__init__("global dict")
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        FORWARD_CALLS.append(1)
        h = self.drop(self.a(x))
        if self.mixing():
            h = h - h.mean(0)
        return self.b(h)


def _formed_at_most(rows: int, net: nn.Module, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Per-example ranges of ``rows`` examples; the numbers of examples whose norms were taken."""
    dim = sum(p.numel() for p in net.parameters())
    monkeypatch.setattr(dpsgd_module, "PER_EXAMPLE_LIMIT", rows * dim)
    seen: list[int] = []
    norms = dpsgd_module._total_squared_norms

    def counted(grads: dict[str, torch.Tensor], batch: int) -> torch.Tensor:
        seen.append(batch)
        return norms(grads, batch)

    monkeypatch.setattr(dpsgd_module, "_total_squared_norms", counted)
    return seen


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["auto", "ghost"])
@pytest.mark.parametrize("dropout", [False, True])
def test_the_check_holds_a_range_of_per_example_gradients_and_still_sees_mixing(
    dropout: bool, mode: str, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once: the check formed the whole batch's per-example gradients at once (up to
    # 65,533 examples). Now ranges of _rows() examples; a batch that drew dropout masks
    # is checked at once (the masks depend on how many examples one pass draws them for).
    torch.manual_seed(0)
    net = DroppingBranching() if dropout else Branching("global dict")
    seen = _formed_at_most(3, net, monkeypatch)
    model, optimizer, _ = _private(net, mode)
    clipped_sum = step_sum(net, model, optimizer, api)
    x, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # independent: no false alarm, in ranges or at once
        clipped_sum(x, y)
    # 8 examples: ranges of 3, 3 and 2; or the 8 at once (the first call is checked)
    assert seen == ([8] if dropout else [3, 3, 2])
    assert model._engine.ghost_layers is not None  # type: ignore[attr-defined]
    _flip(net)
    if mode == "ghost":
        with pytest.raises(ValueError, match="no longer takes the path traced"):
            clipped_sum(x, y)
        return
    with pytest.warns(UserWarning, match="switched off"):
        clipped_sum(x, y)
    assert model._engine.ghost_layers is None  # type: ignore[attr-defined]
    assert max(seen) <= (8 if dropout else 3)
    if not dropout:  # dropout masks move when an example is removed
        assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)


class MixingTheTail(nn.Module):
    """Draws random numbers (value unchanged) and centres the examples from index 4 on."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        h = h + 0.0 * torch.rand_like(h)  # like dropout: the generator moves
        tail = h[4:]
        return self.b(torch.cat([h[:4], tail - tail.mean(0)]))


@pytest.mark.parametrize("api", APIS)
def test_a_dropout_batch_larger_than_a_range_is_checked_on_every_example(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once: a batch that drew random numbers and had more than _rows() examples was
    # checked on a probe of its first _rows() examples while the clipped sum of the
    # whole batch was used: a model mixing only examples 4.. (a prover made to accept
    # it, ranges of 4) moved the clipped sum by 1.50 C unseen.
    from gaussdp.ml import _independence

    monkeypatch.setattr(
        _independence,
        "prove",
        lambda model, *_args, **_kw: _independence.Proven(
            torch.fx.symbolic_trace(model), inspect.signature(model.forward)
        ),
    )
    torch.manual_seed(0)
    net = MixingTheTail()
    monkeypatch.setattr(
        dpsgd_module, "PER_EXAMPLE_LIMIT", 4 * sum(p.numel() for p in net.parameters())
    )
    gen = torch.Generator().manual_seed(1)
    x, y = 3 * torch.randn(12, 4, generator=gen), torch.randint(0, 3, (12,), generator=gen)
    model, optimizer, _ = zero_noise_private(net, x, y, "auto", CLIP)
    clipped_sum = step_sum(net, model, optimizer, api)
    with pytest.warns(UserWarning, match="switched off"):
        clipped_sum(x, y)
    assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)
