"""Ghost clipping on tied weights, in-place activations and layer subclasses.

Each model is checked against the per-example path (``torch.func``) and by brute
force: with no noise, the clipped gradient sum of a batch against the sum of the batch
without example i, for every i, must differ by at most C.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from brute_force import keep_loader, sensitivity, step_sum  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp.accounting import Subsampled  # noqa: E402
from gaussdp.ml import SumNoiser, make_private  # noqa: E402
from gaussdp.ml import _ghost as ghost_module  # noqa: E402
from gaussdp.ml import dpsgd as dpsgd_module  # noqa: E402
from gaussdp.ml._ghost import GHOST_MARGIN, ghost_clipped_sums, ghost_layers  # noqa: E402
from gaussdp.ml.dpsgd import (  # noqa: E402
    CLIP_MARGIN,
    _factors_from_squared,
    _squared_norm_upper,
    _squared_norms_upper,
    _step_event,
    clip_gradients,
    per_example_gradients,
)

CLIP = 1.0
VOCAB, WIDTH, TOKENS = 11, 6, 5


class TiedSequence(nn.Module):
    """Embedding → tanh → Linear sharing the embedding's weight, on every token."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(ids))).mean(1)


class TiedPooled(nn.Module):
    """Embedding → mean over tokens → Linear (with a bias) sharing the embedding's weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).mean(1))


def in_place_relu() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 7), nn.ReLU(inplace=True), nn.Linear(7, 3))


class Doubled(nn.Linear):
    """A Linear subclass whose forward is not a Linear's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(x) ** 2


def subclassed() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), Doubled(5, 3))


def _tokens(n: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n, TOKENS), generator=gen), torch.randint(
        0, VOCAB, (n,), generator=gen
    )


def _features(n: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(n, 4, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def _private(
    make: Callable[[], nn.Module], data: tuple[torch.Tensor, torch.Tensor], mode: str
) -> tuple[nn.Module, object, object]:
    torch.manual_seed(0)
    net = make()
    with pytest.warns(UserWarning, match="NOT differentially private"):
        model, optimizer, _ = keep_loader(  # sample rate 1: each batch holds all the data
            make_private(
                net,
                torch.optim.SGD(net.parameters(), lr=0.0),
                DataLoader(TensorDataset(*data), batch_size=data[0].shape[0]),
                loss_fn=nnf.cross_entropy,
                noise_multiplier=0.0,
                max_grad_norm=CLIP,
                delta=1e-5,
                grad_sample_mode=mode,  # type: ignore[arg-type]
            )
        )
    return net, model, optimizer


def _clipped_sum_fn(
    make: Callable[[], nn.Module],
    data: tuple[torch.Tensor, torch.Tensor],
    mode: str,
    api: str,
) -> tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], object]:
    net, model, optimizer = _private(make, data, mode)
    return step_sum(net, model, optimizer, api), model


def _reference(
    make: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    shrink: float = GHOST_MARGIN / CLIP_MARGIN,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped sum from per-example gradients (torch.func), and the squared norms.

    ``shrink``: the ghost path's extra margin (1 for a sum of the per-example path).
    """
    torch.manual_seed(0)
    net = make()
    grads, _ = per_example_gradients(net, nnf.cross_entropy, x, y)
    names = [n for n, p in net.named_parameters() if p.requires_grad]
    squared = sum(g.reshape(x.shape[0], -1).double().pow(2).sum(1) for g in grads.values())
    clipped = clip_gradients(grads, CLIP)
    return torch.cat([clipped[n].sum(0).reshape(-1).double() for n in names]) * shrink, squared


APIS = ["backward", "idiom"]
TIED = [TiedSequence, TiedPooled]


# -- tied weights -----------------------------------------------------------------------------
@pytest.mark.parametrize("make", TIED)
def test_tied_weights_get_the_norm_of_the_sum_of_both_uses(make: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    net = make()
    layers = ghost_layers(net)
    assert layers is not None
    assert len(layers) == 2
    x, y = _tokens()
    result = ghost_clipped_sums(
        net,
        layers,
        nnf.cross_entropy,
        x,
        y,
        _squared_norms_upper,
        lambda s: _factors_from_squared(s, CLIP, GHOST_MARGIN),
    )
    assert result is not None
    sums, _, squared, _ = result
    reference, exact_squared = _reference(make, x, y)
    # Upper bounds on the squared norms of the summed gradients, tight to float32 rounding.
    assert bool((squared >= exact_squared * (1 - 1e-6)).all())
    torch.testing.assert_close(squared, exact_squared, rtol=1e-3, atol=0)
    assert len(sums) == len(list(net.parameters()))  # the tied weight once
    ghost = torch.cat([sums[id(p)].reshape(-1) for p in net.parameters()])
    torch.testing.assert_close(ghost, reference, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("make", TIED)
def test_tied_weights_stay_on_the_ghost_path_with_sensitivity_c(
    make: Callable[[], nn.Module], api: str
) -> None:
    x, y = _tokens()
    clipped_sum, _ = _clipped_sum_fn(make, (x, y), "ghost", api)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)
    reference, _ = _reference(make, x, y)
    torch.testing.assert_close(clipped_sum(x, y), reference, rtol=1e-4, atol=1e-6)


# -- an in-place activation after a covered layer ---------------------------------------------
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["auto", "ghost"])
def test_in_place_relu_after_a_layer_is_handled(mode: str, api: str) -> None:
    x, y = _features()
    clipped_sum, model = _clipped_sum_fn(in_place_relu, (x, y), mode, api)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mixes examples" fallback
        assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)
        got = clipped_sum(x, y)
    engine = model._engine  # type: ignore[attr-defined]
    assert engine.ghost_layers is not None
    assert engine.copy_outputs == {"0"}  # the first Linear's output is copied
    reference, _ = _reference(in_place_relu, x, y)
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-6)


# -- subclasses of covered layers -------------------------------------------------------------
def test_subclasses_of_covered_layers_do_not_count() -> None:
    assert ghost_layers(subclassed()) is None
    x, y = _features()
    with pytest.raises(ValueError, match="grad_sample_mode must be 'auto' or 'functorch'"):
        _private(subclassed, (x, y), "ghost")


@pytest.mark.parametrize("api", APIS)
def test_subclassed_model_goes_through_torch_func(api: str) -> None:
    x, y = _features()
    clipped_sum, model = _clipped_sum_fn(subclassed, (x, y), "auto", api)
    assert model._engine.ghost_layers is None  # type: ignore[attr-defined]
    assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)
    reference, _ = _reference(subclassed, x, y, shrink=1.0)
    torch.testing.assert_close(clipped_sum(x, y), reference, rtol=1e-4, atol=1e-6)


# -- an uncovered configuration is not retried every step ---------------------------------------
def reflect_conv() -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(1, 2, 3, padding=1, padding_mode="reflect"), nn.Flatten(), nn.Linear(8, 3)
    )


@pytest.mark.parametrize("api", APIS)
def test_uncovered_configuration_is_decided_once(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = torch.randn(10, 1, 4), torch.randint(0, 3, (10,))
    clipped_sum, model = _clipped_sum_fn(reflect_conv, (x, y), "auto", api)
    assert model._engine.ghost_layers is not None  # type: ignore[attr-defined]
    target = "ghost_clipped_sums" if api == "backward" else "recorded_forward"
    original = getattr(dpsgd_module, target)
    calls: list[int] = []

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(dpsgd_module, target, counting)
    assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)  # 11 steps of 2 batch sizes
    assert len(calls) == 1
    reference, _ = _reference(reflect_conv, x, y, shrink=1.0)
    torch.testing.assert_close(clipped_sum(x, y), reference, rtol=1e-4, atol=1e-6)


# -- one lattice for the noise and the accounting ---------------------------------------------
def test_calibration_event_uses_the_noisers_lattice() -> None:
    noiser = SumNoiser(1.3, 0.7, 1234)
    event = _step_event(1.3, 0.7, 1234, 0.01, "secure")
    assert event == Subsampled(noiser.lattice, sample_rate=0.01)


# -- large layers: per-example gradients formed a few examples at a time -----------------------
class SequenceConv(nn.Module):
    """A Conv2d and a Linear on [batch, tokens, features], both forming dense gradients."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.mix = nn.Linear(4, 5)
        self.head = nn.Linear(3 * 4 * 5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.mix(self.conv(x.reshape(-1, 1, 4, 4))))
        return self.head(h.flatten(1))


def _image_data(n: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(n, 16, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def _ghost_sums(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    layers = ghost_layers(net)
    assert layers is not None
    result = ghost_clipped_sums(
        net, layers, nnf.cross_entropy, x, y, _squared_norms_upper,
        lambda s: _factors_from_squared(s, CLIP, GHOST_MARGIN),
    )  # fmt: skip
    assert result is not None
    sums, _, squared, _ = result
    return torch.cat([sums[id(p)].reshape(-1) for p in net.parameters()]), squared


def test_chunked_per_example_gradients_give_the_same_sums(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x, y = _image_data()
    torch.manual_seed(0)
    net = SequenceConv()
    whole, whole_squared = _ghost_sums(net, x, y)
    formed: list[int] = []
    original = ghost_module._weight_part

    def spy(parts: list[object], param: torch.Tensor, batch: int, form: object) -> None:
        original(parts, param, batch, form)  # type: ignore[arg-type]
        formed.append(type(parts[-1]).__name__ == "_Chunked")

    monkeypatch.setattr(ghost_module, "FORM_LIMIT", 3 * 27)  # conv: 3 examples at a time
    monkeypatch.setattr(ghost_module, "_weight_part", spy)
    chunked, chunked_squared = _ghost_sums(net, x, y)
    assert formed == [True, True]  # the conv and the sequence Linear were chunked
    torch.testing.assert_close(chunked_squared, whole_squared, rtol=1e-6, atol=0)
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-9)
    reference, _ = _reference(SequenceConv, x, y)
    torch.testing.assert_close(chunked, reference, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("api", APIS)
def test_chunked_path_keeps_sensitivity_c(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ghost_module, "FORM_LIMIT", 2 * 27)
    x, y = _image_data()
    clipped_sum, _ = _clipped_sum_fn(SequenceConv, (x, y), "ghost", api)
    assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)


def _chunked_sum(
    base: torch.Tensor, growth: float, monkeypatch: pytest.MonkeyPatch
) -> torch.Tensor:
    """clipped_sums of one chunked parameter whose second formation is ``growth`` times larger."""
    param = torch.zeros(base.shape[1:])
    batch = base.shape[0]
    calls: list[int] = []

    def form(start: int, stop: int) -> torch.Tensor:
        calls.append(start)
        return base[start:stop] * (1.0 if len(calls) <= batch else growth)

    part = ghost_module._Chunked(param, batch, form)
    record = ghost_module.LayerRecord(nn.Identity(), (), {}, [torch.zeros(batch)], [0])
    monkeypatch.setattr(ghost_module, "_parts", lambda _record: [part])
    monkeypatch.setattr(ghost_module, "FORM_LIMIT", param.numel())  # one example at a time
    sums, _ = ghost_module.clipped_sums(
        [record], (None,), batch, _squared_norms_upper, lambda s: _factors_from_squared(s, CLIP)
    )
    assert len(calls) == 2 * batch
    return sums[id(param)]


def test_a_second_formation_with_larger_values_is_scaled_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A kernel that does not give the same values twice (non-deterministic GPU kernels):
    # an example whose gradient comes out 1 % larger the second time still contributes
    # norm ≤ C.
    base = torch.randn(1, 4, 5, generator=torch.Generator().manual_seed(2)) * 10
    norm = float(torch.linalg.vector_norm(_chunked_sum(base, 1.01, monkeypatch)))
    assert CLIP * (1 - 1e-4) <= norm <= CLIP
    several = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(3)) * 10
    factors = _factors_from_squared(_squared_norm_upper(several), CLIP)
    expected = (factors[:, None, None] * several.double()).sum(0)
    torch.testing.assert_close(
        _chunked_sum(several, 1.01, monkeypatch), expected, rtol=1e-5, atol=1e-8
    )
    torch.testing.assert_close(
        _chunked_sum(several, 1.0, monkeypatch), expected, rtol=1e-12, atol=1e-14
    )


def test_a_non_finite_second_formation_counts_as_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    # NaN > bound is false: the row used to keep its factor (a NaN sum); an infinite row
    # got factor 0 and 0·inf = NaN. Either way the example now contributes nothing.
    several = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(3)) * 10
    for growth in (float("nan"), float("inf")):
        sums = _chunked_sum(several, growth, monkeypatch)
        assert bool(torch.isfinite(sums).all())
        assert float(torch.linalg.vector_norm(sums)) == 0.0


# -- a model that modifies its input in place -------------------------------------------------
class Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(2)


def scaled_input() -> nn.Module:
    return nn.Sequential(Scale(), nn.Linear(4, 7), nn.ReLU(inplace=True), nn.Linear(7, 3))


def test_a_repeat_after_an_in_place_activation_sees_the_inputs_unchanged() -> None:
    # The repeat (the ReLU changed the first Linear's output) used to run on inputs the
    # first run had already doubled: activations 4x.
    x, y = _features()
    results = []
    for copy in (set(), {"1", "3"}):  # found by a repeat; known up front
        torch.manual_seed(0)
        net = scaled_input()
        layers = ghost_layers(net)
        assert layers is not None
        inputs = x.clone()
        result = ghost_clipped_sums(
            net,
            layers,
            nnf.cross_entropy,
            inputs,
            y,
            _squared_norms_upper,
            lambda s: _factors_from_squared(s, CLIP, GHOST_MARGIN),
            copy=copy,
        )
        assert result is not None
        torch.testing.assert_close(inputs, 2 * x, rtol=0, atol=0)  # doubled once
        sums, losses, squared, _ = result
        flat = torch.cat([sums[id(p)].reshape(-1) for p in net.parameters()])
        results.append((flat, losses, squared))
    for found, known in zip(*results, strict=True):
        torch.testing.assert_close(found, known, rtol=0, atol=0)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["auto", "ghost"])
def test_a_model_modifying_its_input_in_place_is_run_on_it_once(mode: str, api: str) -> None:
    # The check against the per-example path (and that path) run the model again: they
    # see the inputs as the first run did, so no false "mixes examples" alarm.
    x, y = _features()
    clipped_sum, model = _clipped_sum_fn(scaled_input, (x, y), mode, api)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mixes examples" fallback
        assert sensitivity(lambda a, b: clipped_sum(a.clone(), b), x, y) <= CLIP * (1 + 1e-6)
        inputs = x.clone()
        got = clipped_sum(inputs, y)
    torch.testing.assert_close(inputs, 2 * x, rtol=0, atol=0)
    assert model._engine.ghost_layers is not None  # type: ignore[attr-defined]
    reference, _ = _reference(lambda: scaled_input()[1:], 2 * x, y)
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-6)


# -- layers whose trainable parameters are not the ones the formulas read ------------------------
def _weight_normed(kind: str) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
        utils = nn.utils
        wrap = {
            "weight_norm": utils.weight_norm,
            "spectral_norm": utils.spectral_norm,
            "parametrized weight_norm": utils.parametrizations.weight_norm,
            "parametrized spectral_norm": utils.parametrizations.spectral_norm,
        }[kind]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # legacy weight_norm is deprecated
            net[2] = wrap(net[2])
        return net

    return make


NORMED = ["weight_norm", "spectral_norm", "parametrized weight_norm", "parametrized spectral_norm"]


@pytest.mark.parametrize("kind", NORMED)
def test_normalised_weights_are_not_ghost_layers(kind: str) -> None:
    # The legacy wrappers keep the type nn.Linear but train weight_g/weight_v
    # (weight_orig): the formulas, keyed by module.weight, raised KeyError.
    make = _weight_normed(kind)
    net = make()
    assert ghost_layers(net) is None
    assert ghost_layers(net[0]) is not None
    x, y = _features()
    with pytest.raises(ValueError, match="grad_sample_mode must be 'auto' or 'functorch'"):
        _private(make, (x, y), "ghost")


@pytest.mark.parametrize("api", APIS)
def test_weight_norm_goes_through_torch_func(api: str) -> None:
    make = _weight_normed("weight_norm")
    x, y = _features()
    clipped_sum, model = _clipped_sum_fn(make, (x, y), "auto", api)
    assert model._engine.ghost_layers is None  # type: ignore[attr-defined]
    assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)
    reference, _ = _reference(make, x, y, shrink=1.0)
    torch.testing.assert_close(clipped_sum(x, y), reference, rtol=1e-4, atol=1e-6)


# -- tied weights above FORM_LIMIT --------------------------------------------------------------
@pytest.mark.parametrize("make", TIED)
def test_tied_weights_are_summed_a_few_examples_at_a_time(
    make: Callable[[], nn.Module], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sum of a tied weight's uses was formed for the whole batch at once, whatever
    # FORM_LIMIT said.
    x, y = _tokens()
    torch.manual_seed(0)
    net = make()
    whole, whole_squared = _ghost_sums(net, x, y)
    tied = net.embed.weight  # type: ignore[union-attr]
    kinds: list[str] = []
    original = ghost_module._one_per_param

    def spy(parts: list[object], batch: int) -> list[object]:
        out = original(parts, batch)  # type: ignore[arg-type]
        kinds.extend(
            type(p).__name__ for p in out if any(q is tied for q in ghost_module._params_of(p))
        )
        return out  # type: ignore[return-value]

    monkeypatch.setattr(ghost_module, "FORM_LIMIT", 3 * tied.numel())  # 3 examples at a time
    monkeypatch.setattr(ghost_module, "_one_per_param", spy)
    chunked, chunked_squared = _ghost_sums(net, x, y)
    assert kinds == ["_Chunked"]
    torch.testing.assert_close(chunked_squared, whole_squared, rtol=1e-6, atol=0)
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-9)
    reference, _ = _reference(make, x, y)
    torch.testing.assert_close(chunked, reference, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("make", TIED)
def test_chunked_tied_weights_keep_sensitivity_c(
    make: Callable[[], nn.Module], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ghost_module, "FORM_LIMIT", 2 * VOCAB * WIDTH)
    x, y = _tokens()
    clipped_sum, _ = _clipped_sum_fn(make, (x, y), "ghost", "backward")
    assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)


def scaled_input_with_dropout() -> nn.Module:
    return nn.Sequential(Scale(), nn.Linear(4, 7), nn.Dropout(0.3), nn.Linear(7, 3))


@pytest.mark.parametrize("api", APIS)
def test_the_dropout_check_leaves_inputs_changed_in_place_once(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Dropout and ranges of 3 of 10 examples: the check runs on all ten at once, which
    # must see them as the first run did and leave them as that run left them.
    dim = sum(p.numel() for p in scaled_input_with_dropout().parameters())
    monkeypatch.setattr(dpsgd_module, "PER_EXAMPLE_LIMIT", 3 * dim)
    x, y = _features()
    clipped_sum, model = _clipped_sum_fn(scaled_input_with_dropout, (x, y), "ghost", api)
    inputs = x.clone()
    clipped_sum(inputs, y)  # the first call: checked, at once (no false alarm)
    torch.testing.assert_close(inputs, 2 * x, rtol=0, atol=0)
    assert model._engine.ghost_layers is not None  # type: ignore[attr-defined]


# -- a Poisson batch beyond the ghost bound -----------------------------------------------------
def _limit(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lower GHOST_MAX_BATCH (65,533 and more) to keep the batches of a test small."""
    monkeypatch.setattr(dpsgd_module, "GHOST_MAX_BATCH", limit)
    monkeypatch.setattr(ghost_module, "GHOST_MAX_BATCH", limit)


@pytest.mark.parametrize("api", APIS)
def test_a_large_expected_batch_takes_the_per_example_path_for_the_run(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches of 4 of 10 examples: P(B > 3) is far from negligible, so no batch of the
    # run takes the ghost path, whatever its size ("ghost" is refused before anything).
    _limit(3, monkeypatch)
    x, y = _features()
    with pytest.raises(ValueError, match="grad_sample_mode.*exceeds 3 with probability"):
        _private(in_place_relu, (x, y), "ghost")
    clipped_sum, model = _clipped_sum_fn(in_place_relu, (x, y), "auto", api)
    assert model._engine.ghost_layers is None  # type: ignore[attr-defined]
    reference, _ = _reference(in_place_relu, x, y, shrink=1.0)
    torch.testing.assert_close(clipped_sum(x, y), reference, rtol=1e-4, atol=1e-6)
    small, _ = _reference(in_place_relu, x[:2], y[:2], shrink=1.0)  # below the limit too
    torch.testing.assert_close(clipped_sum(x[:2], y[:2]), small, rtol=1e-4, atol=1e-6)


def _pending_sum(model: object, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The pre-noise clipped sum of model.backward, in lattice units (integers)."""
    engine = model._engine  # type: ignore[attr-defined]
    engine.pending = None
    model.backward(x, y)  # type: ignore[attr-defined]
    sums = torch.cat([s.reshape(-1) for s in engine.pending])
    engine.pending = None
    return sums


def test_neighbours_on_either_side_of_the_ghost_limit_keep_the_lattice_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Once, a batch of 21 took the per-example path (each example rounded to the
    # lattice, then summed) and its neighbour of 20 the ghost path (the float sum
    # rounded once): for equal examples the two differ by up to B/2 units per
    # coordinate, and the neighbours 2,118.5 units apart, above the bound of 2,056.
    # Which way a batch goes is now decided
    # for the run (expected batch 12 of 30), never by the realised batch size.
    _limit(20, monkeypatch)
    x = torch.full((21, 4), 3.7).add_(torch.arange(4.0))  # equal examples
    y = torch.zeros(21, dtype=torch.long)
    torch.manual_seed(0)
    net = in_place_relu()
    model, _, _ = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.0),
        DataLoader(TensorDataset(torch.zeros(30, 4), torch.zeros(30)), batch_size=12),
        loss_fn=nnf.cross_entropy,
        noise_multiplier=1.0,
        max_grad_norm=CLIP,
        delta=1e-5,
    )
    engine = model._engine  # type: ignore[attr-defined]
    assert engine.ghost_layers is None
    lattice = engine.noiser.lattice
    bound = float(lattice.sensitivity_bound(CLIP, lattice.gamma, engine.noiser.dim))
    full = _pending_sum(model, x, y)
    assert torch.equal(full, full.round())  # lattice units
    gap = float(torch.linalg.vector_norm(full - _pending_sum(model, x[1:], y[1:])))
    assert 0.5 * bound < gap <= bound


@pytest.mark.parametrize("limit", [3, 40])
def test_the_ghost_run_test_is_sound_against_the_exact_binomial_tail(
    limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ghost_run's Chernoff bound against the exact tail P(B > limit) of the sampler's
    # Binomial(N, q) (fractions), over rates across its True/False transition.
    from fractions import Fraction
    from math import comb

    _limit(limit, monkeypatch)
    size = 5 * limit
    answers = []
    for rate in (2.0**-k for k in range(1, 100, 2)):
        q = Fraction(rate)
        tail = sum(comb(size, b) * q**b * (1 - q) ** (size - b) for b in range(limit + 1, size + 1))
        allowed = ghost_module.ghost_run(rate, size)
        assert not allowed or tail <= Fraction(10) ** -100, rate
        assert allowed or tail > Fraction(10) ** -120, rate  # pessimistic, not absurdly so
        answers.append(allowed)
    assert answers == sorted(answers)
    assert answers[0] < answers[-1]
    assert ghost_module.ghost_run(0.5, limit)
    assert not ghost_module.ghost_run(1.0, limit + 1)


def test_a_batch_above_the_limit_of_a_ghost_run_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # A run with a negligible tail takes the ghost path; the batch that exceeds the limit
    # anyway (probability <= 1e-100) is refused before the mask stream moves.
    _limit(3, monkeypatch)
    monkeypatch.setattr(dpsgd_module, "ghost_run", lambda rate, size: True)
    x, y = _features()
    for api in APIS:
        clipped_sum, model = _clipped_sum_fn(in_place_relu, (x, y), "auto", api)
        engine = model._engine  # type: ignore[attr-defined]
        assert engine.ghost_layers is not None
        reference, _ = _reference(in_place_relu, x[:3], y[:3])
        torch.testing.assert_close(clipped_sum(x[:3], y[:3]), reference, rtol=1e-4, atol=1e-6)
        before = engine.masks.next  # the refusal draws no mask state
        monkeypatch.setattr(engine.masks, "next", lambda: pytest.fail("mask drawn"))
        with pytest.raises(ValueError, match="batch size.*at most 3 for ghost clipping"):
            clipped_sum(x[:4], y[:4])
        monkeypatch.setattr(engine.masks, "next", before)


@pytest.mark.parametrize("api", APIS)
def test_a_step_above_the_limit_in_micro_batches_is_refused(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The float bound of the ghost sums is for the step's whole batch; each call was
    # checked on its own, so a Poisson batch above the limit split into calls within it
    # was summed and released. Now the step refuses, drops the sums, draws nothing.
    _limit(3, monkeypatch)
    monkeypatch.setattr(dpsgd_module, "ghost_run", lambda rate, size: True)
    x, y = _features()
    torch.manual_seed(0)
    net = in_place_relu()
    model, optimizer, loader = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.1),
        DataLoader(TensorDataset(x, y), batch_size=10),  # q = 1: batches of all 10
        loss_fn=nnf.cross_entropy,
        noise_multiplier=1.0,
        max_grad_norm=CLIP,
        delta=1e-5,
    )
    engine = model._engine  # type: ignore[attr-defined]
    assert engine.ghost_layers is not None
    before = [p.detach().clone() for p in net.parameters()]
    xb, yb = next(iter(loader))

    def train(rows: slice) -> None:
        if api == "backward":
            model.backward(xb[rows], yb[rows])  # type: ignore[operator]
        else:
            nnf.cross_entropy(model(xb[rows]), yb[rows]).backward()

    for start in range(0, 10, 3):  # calls of 3, 3, 3 and 1 rows
        train(slice(start, start + 3))
    monkeypatch.setattr(engine.noiser, "release", lambda *a, **k: pytest.fail("noise drawn"))
    with pytest.raises(ValueError, match="the step's batch size must be at most 3 examples"):
        optimizer.step()
    assert not engine.held  # dropped
    assert not engine.records
    assert optimizer.steps == 0  # type: ignore[attr-defined]
    assert optimizer.privacy_spent(1e-5).upper == 0  # type: ignore[attr-defined]
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), before, strict=True))
    monkeypatch.undo()
    _limit(3, monkeypatch)
    train(slice(0, 3))  # within the limit: the step goes through
    optimizer.step()
    assert optimizer.steps == 1  # type: ignore[attr-defined]


def _in_ranges_of(rows: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the per-example path take ``rows`` examples at a time; the ranges' sizes seen."""
    net = in_place_relu()
    dim = sum(p.numel() for p in net.parameters())
    monkeypatch.setattr(dpsgd_module, "PER_EXAMPLE_LIMIT", rows * dim)
    seen: list[int] = []
    add = dpsgd_module._Engine._add

    def counted(self: object, total: list[torch.Tensor], grads: dict[str, torch.Tensor]) -> None:
        seen.append(next(iter(grads.values())).shape[0])
        add(self, total, grads)  # type: ignore[arg-type]

    monkeypatch.setattr(dpsgd_module._Engine, "_add", counted)
    return seen


@pytest.mark.parametrize("api", APIS)
def test_a_batch_beyond_the_ghost_bound_is_clipped_in_ranges(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once: the per-example path held every example's gradient at once (a Poisson batch
    # above GHOST_MAX_BATCH on a large model). Bounds lowered to keep the test small.
    _limit(3, monkeypatch)
    seen = _in_ranges_of(3, monkeypatch)
    x, y = _features()
    clipped_sum, _ = _clipped_sum_fn(in_place_relu, (x, y), "auto", api)
    got = clipped_sum(x, y)
    assert seen == [3, 3, 3, 1]
    reference, _ = _reference(in_place_relu, x, y, shrink=1.0)
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-6)
    # Every example's contribution ≤ C, whichever range it falls in as others leave.
    assert sensitivity(clipped_sum, x, y) <= CLIP * (1 + 1e-6)


@pytest.mark.parametrize("api", APIS)
def test_the_per_example_path_in_ranges_gives_the_same_noisy_step(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaussdp.random import ChaCha20Random

    x, y = _features()

    def step() -> torch.Tensor:
        torch.manual_seed(0)
        net = in_place_relu()
        model, optimizer, _ = keep_loader(  # sample rate 1: each batch holds all of x
            make_private(
                net,
                torch.optim.SGD(net.parameters(), lr=1.0),
                DataLoader(TensorDataset(x, y), batch_size=x.shape[0]),
                loss_fn=nnf.cross_entropy,
                noise_multiplier=1.0,
                max_grad_norm=CLIP,
                delta=1e-5,
                grad_sample_mode="functorch",
                rng=ChaCha20Random(4),
            )
        )
        step_sum(net, model, optimizer, api)(x, y)
        return torch.cat([p.detach().reshape(-1) for p in net.parameters()])

    whole = step()
    seen = _in_ranges_of(4, monkeypatch)
    in_ranges = step()
    assert seen == [4, 4, 2]
    # The lattice sums are integers, added exactly: the same noisy step, bit for bit.
    assert torch.equal(in_ranges, whole)


class _Weighted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 1200)
        self.b = nn.Linear(1200, 3)

    def forward(self, x: torch.Tensor, w: object) -> torch.Tensor:
        return self.b(self.a(x) * torch.from_numpy(w))  # type: ignore[arg-type]


def test_a_numpy_argument_is_keyed_by_its_contents(monkeypatch: pytest.MonkeyPatch) -> None:
    # Once: numpy abbreviates the repr of > 1000 elements, so two such arrays shared a
    # call key and the second call ran the graph traced with the first baked in.
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(dpsgd_module._Engine, "_verify_now", lambda self, shapes: False)
    first = np.ones((1, 1200), dtype=np.float32)
    second = np.zeros((1, 1200), dtype=np.float32)
    second[0, :3] = second[0, -3:] = 1
    assert repr(first) == repr(second)
    x, y = _features()
    net, model, optimizer = _private(_Weighted, (x, y), "ghost")
    model(x[:4], first).sum().backward()
    optimizer.zero_grad()  # type: ignore[attr-defined]
    with torch.no_grad():
        want = net(x[:4], second)
    torch.testing.assert_close(model(x[:4], second).detach(), want, rtol=0, atol=0)
    key = dpsgd_module._call_key
    assert key([first], None) != key([second], None)
    assert key([first], None) == key([first.copy()], None)


# -- one step's batch in several calls (micro-batches) ------------------------------------------
def _micro_batch_sums(model: object, x: torch.Tensor, y: torch.Tensor, api: str) -> torch.Tensor:
    """The pre-noise lattice sums of one step whose batch goes in calls of two examples."""
    engine = model._engine  # type: ignore[attr-defined]
    engine.pending = None
    for xs, ys in zip(x.split(2), y.split(2), strict=True):
        if api == "backward":
            model.backward(xs, ys)  # type: ignore[attr-defined]
        else:
            nnf.mse_loss(model(xs), ys).backward()  # type: ignore[operator]
    engine.take_records()
    sums = torch.cat([s.reshape(-1) for s in engine.pending])
    engine.pending = None
    return sums


@pytest.mark.parametrize("api", APIS)
def test_micro_batches_of_a_step_keep_the_lattice_bound_for_every_neighbour(api: str) -> None:
    # A bias-free Linear at zero with the squared error against -1: example k's gradient
    # is 2·x_k, clipped to C·GHOST_MARGIN along x_k, i.e. v_k (lattice units) below. The
    # fractional parts make each call (x_2j, x_2j+1) sum to .5 - ε per coordinate and each
    # call of the neighbour without x_0, (x_2j+1, x_2j+2), to .5 + ε: rounding call by call
    # moved the neighbours (1 - 2ε) apart per later call and coordinate, beyond the
    # sensitivity bound (ghost sums were once rounded per call). Rounded once per step,
    # they differ by x_i plus at most one unit per coordinate, for every i.
    dim, calls, eps = 4, 8, 0.02
    torch.manual_seed(0)
    net = nn.Linear(dim, 1, bias=False)
    nn.init.zeros_(net.weight)
    model, _, _ = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.0),
        DataLoader(TensorDataset(torch.zeros(64, dim), torch.zeros(64, 1)), batch_size=16),
        loss_fn=nnf.mse_loss,
        noise_multiplier=1.0,
        max_grad_norm=CLIP,
        delta=1e-5,
    )
    engine = model._engine  # type: ignore[attr-defined]
    assert engine.ghost_layers is not None
    lattice = engine.noiser.lattice
    units = CLIP / lattice.gamma * GHOST_MARGIN  # each example's clipped norm, lattice units
    base = -math.floor(units / math.sqrt(dim))  # every example points to -(1, …, 1)
    rows = []
    for k in range(2 * calls):
        j = k // 2
        frac = 0.1 + 2 * eps * j if k % 2 == 0 else 0.4 - eps - 2 * eps * j
        head = [base + frac] * (dim - 1)
        rows.append([*head, -math.sqrt(units**2 - sum(h * h for h in head))])
    x = torch.tensor(rows, dtype=torch.float32)
    y = torch.full((2 * calls, 1), -1.0)
    bound = float(lattice.sensitivity_bound(CLIP, lattice.gamma, engine.noiser.dim))
    full = _micro_batch_sums(model, x, y, api)
    assert torch.equal(full, full.round())  # lattice units
    gaps = []
    for i in range(2 * calls):
        keep = [k for k in range(2 * calls) if k != i]
        gaps.append(
            float(torch.linalg.vector_norm(full - _micro_batch_sums(model, x[keep], y[keep], api)))
        )
    assert max(gaps) <= bound, (gaps, bound)
    assert max(gaps) > units - 1  # the removed example's contribution is there
