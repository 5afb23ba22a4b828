"""The float32 Linear products of ghost clipping: their error bound and the sensitivity.

``gaussdp.ml._ghost`` computes Σᵢ cᵢδᵢaᵢᵀ of a Linear layer in float32 for small
batches, in n ranges of at most k examples, and pays for the float error with a
constant clip margin (module notes): per batch the error is at most γ_{k+n+1}·B·C
< 2⁻¹⁰·C, so neighbouring batches' sums differ by at most C. Checked here: the rule
that picks n, the entrywise error bound on values chosen to make float error large
(all terms of an entry of one sign, mantissas full), the brute-force sensitivity of
the whole clipped sum in lattice units (and that the float32 error of a neighbour
pair's difference exceeds what the per-example path's 2⁻²⁰ margin covers), and that
other settings and values take the float64 product.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402

from gaussdp.ml import _ghost as ghost_module  # noqa: E402
from gaussdp.ml._ghost import (  # noqa: E402
    GHOST_MARGIN,
    _outer_sum,
    float32_chunks,
    ghost_clipped_sums,
    ghost_layers,
)
from gaussdp.ml.dpsgd import _factors_from_squared, _squared_norms_upper  # noqa: E402
from gaussdp.ml.noise import sum_lattice  # noqa: E402

U32 = Fraction(1, 2**24)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One torch thread: the brute force makes ~800 small products, which a second
    OpenMP thread on a busy machine slows a hundredfold."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _gamma(n: int) -> Fraction:
    """Higham's γ_n for float32: nu / (1 − nu)."""
    return n * U32 / (1 - n * U32)


def _rounds(batch: int, chunks: int) -> int:
    return -(-batch // chunks) + chunks + 1  # k + n + 1


def test_float32_chunks_keep_the_error_below_the_budget() -> None:
    assert float32_chunks(256) == 5  # the MLP of benchmarks/dpsgd.py
    limit = Fraction(1, 2**10) * (1 - Fraction(1, 2**9))
    largest = 0
    for batch in range(1, 700):
        chunks = float32_chunks(batch)
        # every n, for the least one that qualifies (or none)
        candidates = range(1, min(batch, 2 * math.isqrt(batch) + 2) + 1)  # k + n grows after
        fits = [n for n in candidates if _gamma(_rounds(batch, n)) * batch < limit]
        if chunks is None:
            assert fits == [] or min(_rounds(batch, n) for n in fits) * batch > 2**14 - 2**6
        else:
            assert chunks == min(n for n in candidates if _rounds(batch, n) * batch <= 2**14 - 2**6)
            assert _gamma(_rounds(batch, chunks)) * batch < limit  # the notes' claim, exactly
            largest = batch
    assert 300 < largest < 450
    assert float32_chunks(0) is None
    assert all(float32_chunks(b) is None for b in (largest + 1, 1000, 2**16 - 3))


def _adversarial(batch: int, out: int, features: int, seed: int) -> tuple[torch.Tensor, ...]:
    """δ and a with every term of an entry of one sign and full 24-bit mantissas."""
    gen = torch.Generator().manual_seed(seed)
    signs = torch.where(torch.rand(out, generator=gen) < 0.5, -1.0, 1.0)
    delta = (1 + torch.rand(batch, out, generator=gen)) * signs  # |δ| in [1, 2)
    act = 1 + torch.rand(batch, features, generator=gen)
    delta_sq = delta.double().pow(2).sum(1) * (1 + 2.0**-40)
    act_sq = act.double().pow(2).sum(1) * (1 + 2.0**-40)
    # clip factors of C = 2**14 lattice units: every example clipped to about C
    factors = 2.0**14 / torch.sqrt(delta_sq * act_sq) * GHOST_MARGIN
    return delta, act, factors, delta_sq, act_sq


def _gamma64(n: int) -> float:
    return n * 2.0**-53 / (1 - n * 2.0**-53)


@pytest.mark.parametrize("batch", [1, 7, 64, 255, 256, 300])
def test_float32_product_error_is_within_the_stated_bound(batch: int) -> None:
    delta, act, factors, delta_sq, act_sq = _adversarial(batch, 128, 130, batch)
    chunks = float32_chunks(batch)
    assert chunks is not None
    got = _outer_sum(delta, act, factors, delta_sq, act_sq)
    # The float64 product of the same values is within γ64_{B+2}·Σ|terms| of the exact
    # sum; the float32 one must be within γ32_{k+n+1}·Σ|terms| of it, so it is checked
    # against the float64 one with the float64 error taken off its bound.
    reference = _float64_product(delta, act, factors)
    absolute = (delta.double().abs() * factors[:, None]).T @ act.double().abs()
    rounds = _rounds(batch, chunks)
    bound = (float(_gamma(rounds)) - 2 * _gamma64(batch + 2)) * absolute
    assert got.dtype == torch.float32  # no float64 copy: converted exactly where used
    error = (got.to(torch.float64) - reference).abs()
    assert bool((error <= bound).all())
    assert float(error.max()) > 0  # the float32 product was used
    # A few entries against an exactly rounded sum (math.fsum) as well.
    for i, j in [(0, 0), (17, 129), (127, 64)]:
        terms = (delta[:, i].double() * factors * act[:, j].double()).tolist()
        assert abs(float(got[i, j]) - math.fsum(terms)) <= float(_gamma(rounds)) * float(
            absolute[i, j]
        )
    # and the whole error against the L2 bound γ_{k+n+1}·Σᵢ cᵢ‖gᵢ‖ < 2⁻¹⁰·B·C
    norm_error = float(torch.linalg.vector_norm(got - reference))
    contributions = float((factors * torch.sqrt(delta_sq * act_sq)).sum())
    assert norm_error <= float(_gamma(rounds)) * contributions <= 2.0**-10 * 2.0**14


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(48, 24)
        self.out = nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


def _lattice_sums(net: nn.Module, x: torch.Tensor, y: torch.Tensor, unit: float) -> torch.Tensor:
    """The ghost path's clipped sums (C = 1) in lattice units, as DP-SGD's secure path has them."""
    layers = ghost_layers(net)
    assert layers is not None
    result = ghost_clipped_sums(
        net,
        layers,
        nnf.cross_entropy,
        x,
        y,
        _squared_norms_upper,
        lambda squared: _factors_from_squared(squared, 1.0, GHOST_MARGIN) / unit,
    )
    assert result is not None
    return torch.cat([result[0][id(p)].reshape(-1) for p in net.parameters()])


def _neighbours(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """S(batch) and S(batch without i) for every i, over C (C = 1; computed in lattice units)."""
    unit = sum_lattice(1.0, 1.0, sum(p.numel() for p in net.parameters())).gamma
    full = _lattice_sums(net, x, y, unit) * unit
    rows = torch.arange(x.shape[0])
    return full, [_lattice_sums(net, x[rows != i], y[rows != i], unit) * unit for i in rows]


def _aligned_batch(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive inputs near one direction, one label: per-example gradients of one sign
    pattern (the float error of their sum adds up), each clipped, mantissas full."""
    gen = torch.Generator().manual_seed(5)
    x = 40 * (1 + 0.01 * torch.rand(batch, 48, generator=gen))
    return x, torch.zeros(batch, dtype=torch.long)


def test_neighbouring_clipped_sums_differ_by_at_most_c(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both layers' products in float32 (small layers keep float64 for speed only).
    monkeypatch.setattr(ghost_module, "_FLOAT32_MIN_SIZE", 1)
    torch.manual_seed(3)
    net = _MLP()
    x, y = _aligned_batch(256)
    full, parts = _neighbours(net, x, y)
    changes = [float(torch.linalg.vector_norm(full - part)) for part in parts]
    assert 1 - 2.0**-8 < max(changes) <= 1.0  # every example clipped, and within C
    # The same sums with float64 products (error below 2⁻³⁷·C at this batch): the float32
    # error of a neighbour pair's difference is more than the 2⁻²⁰·C that the per-example
    # path's margin covers (so that margin would not do), and within the 2·2⁻¹⁰·C paid for.
    monkeypatch.setattr(ghost_module, "_ieee_float32_products", lambda: False)
    full64, parts64 = _neighbours(net, x, y)
    errors = [
        float(torch.linalg.vector_norm((full - part) - (full64 - part64)))
        for part, part64 in zip(parts, parts64, strict=True)
    ]
    assert 2.0**-20 < max(errors) <= 2.0**-9


def _float64_product(delta: torch.Tensor, act: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    return (delta.double() * factors[:, None]).T @ act.double()


def test_reduced_precision_settings_take_the_float64_product() -> None:
    delta, act, factors, delta_sq, act_sq = _adversarial(64, 128, 128, 0)
    expected = _float64_product(delta, act, factors)
    assert not torch.equal(_outer_sum(delta, act, factors, delta_sq, act_sq), expected)
    before = torch.get_float32_matmul_precision()
    try:
        for precision in ("medium", "high"):
            torch.set_float32_matmul_precision(precision)
            got = _outer_sum(delta, act, factors, delta_sq, act_sq)
            assert torch.equal(got, expected), precision
    finally:
        torch.set_float32_matmul_precision(before)
    assert not torch.equal(_outer_sum(delta, act, factors, delta_sq, act_sq), expected)


def test_new_style_precision_settings_take_the_float64_product() -> None:
    delta, act, factors, delta_sq, act_sq = _adversarial(64, 128, 128, 1)
    expected = _float64_product(delta, act, factors)
    settings = [torch.backends, torch.backends.mkldnn, torch.backends.mkldnn.matmul]
    if not all(hasattr(s, "fp32_precision") for s in settings):
        pytest.skip("this torch has no fp32_precision settings")
    for setting, value in zip(settings, ("tf32", "bf16", "bf16"), strict=True):
        before = setting.fp32_precision
        try:
            setting.fp32_precision = value
            got = _outer_sum(delta, act, factors, delta_sq, act_sq)
        finally:
            setting.fp32_precision = before
        assert torch.equal(got, expected), (setting, value)
    assert not torch.equal(_outer_sum(delta, act, factors, delta_sq, act_sq), expected)


@pytest.mark.parametrize("name", ["ONEDNN_DEFAULT_FPMATH_MODE", "DNNL_DEFAULT_FPMATH_MODE"])
def test_onednn_reduced_precision_takes_the_float64_product(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    delta, act, factors, delta_sq, act_sq = _adversarial(64, 128, 128, 4)
    expected = _float64_product(delta, act, factors)
    monkeypatch.setenv(name, "strict")
    assert not torch.equal(_outer_sum(delta, act, factors, delta_sq, act_sq), expected)
    monkeypatch.setenv(name, "BF16")
    assert torch.equal(_outer_sum(delta, act, factors, delta_sq, act_sq), expected)


@pytest.mark.parametrize(
    "case", ["tiny factor", "huge activation", "huge delta", "float64", "small weight"]
)
def test_values_out_of_the_float32_range_take_the_float64_product(case: str) -> None:
    delta, act, factors, delta_sq, act_sq = _adversarial(32, 128, 128, 2)
    if case == "small weight":  # 128 × 127 entries: below the float32 products' 2¹⁴
        act, act_sq = act[:, :127], act[:, :127].double().pow(2).sum(1)
    elif case == "tiny factor":
        factors = factors.clone()
        factors[3] = 2.0**-110
    elif case == "huge activation":
        act = act.clone()
        act[5] *= 2.0**45
        act_sq = act.double().pow(2).sum(1)
    elif case == "huge delta":
        delta = delta.clone()
        delta[7] *= 2.0**45
        delta_sq = delta.double().pow(2).sum(1)
    else:
        delta, act = delta.double(), act.double()
    expected = _float64_product(delta, act, factors)
    assert torch.equal(_outer_sum(delta, act, factors, delta_sq, act_sq), expected)


def test_dropped_rows_do_not_block_the_float32_product() -> None:
    delta, act, factors, delta_sq, act_sq = _adversarial(32, 128, 128, 3)
    factors = factors.clone()
    factors[4] = 0.0  # a dropped example: its rows are zero, its bounds may be inf
    delta, act = delta.clone(), act.clone()
    delta[4], act[4] = 0.0, 0.0
    delta_sq, act_sq = delta_sq.clone(), act_sq.clone()
    delta_sq[4] = act_sq[4] = float("inf")
    got = _outer_sum(delta, act, factors, delta_sq, act_sq)
    expected = _float64_product(delta, act, factors)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.to(torch.float64), expected, rtol=2.0**-12, atol=0)


def test_a_step_of_several_calls_keeps_the_float_error_within_the_budget() -> None:
    # Module notes, "Several calls for one step": the first call's float32 error (every
    # batch float32_chunks allows, then m − 1 float64 additions) plus every other term's
    # float64 error, for a step of up to 2¹⁶ − 3 examples, in exact rationals.
    u64 = Fraction(1, 2**53)
    step = 2**16 - 3
    rest = (step + 2) * u64 / (1 - (step + 2) * u64) * step  # γ_{B+2}·B in float64
    assert rest < Fraction(99994, 100000) * Fraction(1, 2**21)
    worst = Fraction(0)
    for batch in range(1, 700):
        chunks = float32_chunks(batch)
        if chunks is not None:
            first = _gamma(_rounds(batch, chunks))
            worst = max(worst, first * batch + (1 + first) * rest)
    assert worst < Fraction(1, 2**10) - Fraction(25, 10) * Fraction(1, 2**20)
    assert worst + Fraction(1, 2**36) < Fraction(1, 2**10)  # underflows too
    assert _gamma(2**14 - 2**6) < Fraction(99707, 100000) * Fraction(1, 2**10)


def test_later_calls_of_a_step_take_the_float64_product(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the call that finds no ghost sum of the step held may compute in float32.
    from torch.utils.data import DataLoader, TensorDataset

    from gaussdp.ml import make_private
    from gaussdp.random import ChaCha20Random

    monkeypatch.setattr(ghost_module, "_FLOAT32_MIN_SIZE", 1)
    flags: list[bool] = []

    def recording(*args: torch.Tensor, float32: bool = True) -> torch.Tensor:
        flags.append(float32)
        return _outer_sum(*args, float32=float32)

    monkeypatch.setattr(ghost_module, "_outer_sum", recording)
    torch.manual_seed(3)
    net = _MLP()
    model, optimizer, loader = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.0),
        DataLoader(TensorDataset(*_aligned_batch(64)), batch_size=16),
        loss_fn=nnf.cross_entropy,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        delta=1e-5,
        rng=ChaCha20Random(2),
    )
    batches = iter(loader)
    for api in ("backward", "idiom"):
        x, y = next(batches)
        calls = len(x.split(4))
        assert calls > 1
        flags.clear()
        for xs, ys in zip(x.split(4), y.split(4), strict=True):
            if api == "backward":
                model.backward(xs, ys)
            else:
                nnf.cross_entropy(model(xs), ys).backward()
        optimizer.step()
        assert flags == [True] * 2 + [False] * 2 * (calls - 1), api  # two Linear layers a call
        optimizer.zero_grad()
