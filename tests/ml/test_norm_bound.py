"""The certified float32 norm bounds of clipping, against exact rational arithmetic.

``_squared_norm_upper`` bounds each example's squared L2 norm from float32 dot
products (docs/ml.md, "Certified norms in float32"). Here every bound is compared
with the exact squared norm, computed with ``fractions.Fraction`` from the float32
values, on inputs chosen to break a careless bound: float32 sums that lose every
small term, products that underflow (also with denormals flushed to zero), entries
near float32 overflow, and ghost clipping's product ‖a‖²‖δ‖². The clipping itself is
then checked exactly: every clipped vector has norm ≤ C. ``_squared_norms_upper``, which
bounds several blocks at once, must give each block's bounds bit for bit.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

from gaussdp.ml import dpsgd as dpsgd_module  # noqa: E402
from gaussdp.ml.dpsgd import (  # noqa: E402
    _factors_from_squared,
    _squared_norm_upper,
    _squared_norms_upper,
    clip_gradients,
)

TINY = float(torch.finfo(torch.float32).tiny)  # 2**-126, the smallest normal float32


def _exact_squared(rows: torch.Tensor) -> list[Fraction]:
    """Each row's squared norm, exactly (float32 values are exact Python floats)."""
    return [sum((Fraction(x) ** 2 for x in row.tolist()), Fraction(0)) for row in rows]


def _adversarial_rows(k: int) -> torch.Tensor:
    """Rows of k float32 values (k a multiple of 4096, so the chunked path is taken)."""
    gen = torch.Generator().manual_seed(7)
    rows = []
    # 1 first, then terms each below half an ulp of 1 in float32: a float32 running sum
    # stays at 1 and loses all of them (the worst case of recursive summation).
    lost = torch.full((k,), 2.0**-12.6)
    lost[0] = 1.0
    rows.append(lost)
    # Equal values whose squares round: every addition rounds the same way.
    rows.append(torch.full((k,), 1.0 + 2.0**-12))
    # Random values over 40 orders of magnitude, many with squares below 2**-126.
    for low, high in ((-30, -15), (-22, -18), (-5, 5), (15, 19)):
        exponents = torch.empty(k).uniform_(low, high, generator=gen)
        rows.append(torch.randn(k, generator=gen) * torch.pow(10.0, exponents))
    # Subnormal entries only, and subnormal entries next to one normal entry.
    sub = torch.full((k,), 1e-40)
    rows.append(sub)
    mixed = torch.full((k,), 3e-39)
    mixed[k // 2] = 1e-19
    rows.append(mixed)
    # Near overflow: squares above float32's range (the float64 recomputation).
    huge = torch.randn(k, generator=gen) * 1e30
    huge[1] = 3.0e38
    rows.append(huge)
    rows.append(torch.zeros(k))
    return torch.stack(rows).to(torch.float32)


@pytest.mark.parametrize("k", [8192, 300])  # chunks of 4096, and one chunk of k
def test_squared_norm_bound_is_above_the_exact_value_and_tight(k: int) -> None:
    rows = _adversarial_rows(8192)[:, :k].contiguous()
    exact = _exact_squared(rows)
    bounds = [_squared_norm_upper(rows)]
    # Again with denormals flushed to zero, where the CPU can (x86 and ARM can).
    if torch.set_flush_denormal(True):
        try:
            bounds.append(_squared_norm_upper(rows))
        finally:
            torch.set_flush_denormal(False)
    for bound in bounds:
        assert bound.dtype == torch.float64
        for b, e in zip(bound.tolist(), exact, strict=True):
            assert Fraction(b) >= e
            # Not vacuous: within γ_m (m ≤ 4096 float32 terms) plus the underflow allowance.
            slack = e * (1 + Fraction(1, 2**10)) + 4 * k * Fraction(TINY)
            assert Fraction(b) <= slack * (1 + Fraction(1, 2**30))


@pytest.mark.parametrize("at_once", [None, 3 * 4096])
def test_several_blocks_at_once_give_each_rows_bounds_bit_for_bit(
    at_once: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stacked float64 steps of ``_squared_norms_upper`` change no bound: each block's
    bounds equal those of its rows bounded one at a time (batches of one, nothing stacked),
    on blocks that take every path — chunks of 4096, one chunk, faint and overflowing rows,
    float64 and float16 blocks, an empty block and another batch size among them. Also
    when the squares are written out a few rows at a time (``at_once``: 1 or 3 rows)."""
    if at_once is not None:
        monkeypatch.setattr(dpsgd_module, "_SQUARES_AT_ONCE", at_once)
    gen = torch.Generator().manual_seed(5)
    adversarial = _adversarial_rows(8192)
    batch = adversarial.shape[0]
    blocks = [
        adversarial,
        adversarial[:, :300].contiguous(),
        (torch.randn(batch, 7, 3, generator=gen) * 1e-25).to(torch.float32),
        (torch.randn(batch, 40, generator=gen) * 1e200).to(torch.float64),
        torch.randn(batch, 64, generator=gen).to(torch.float16),
        torch.zeros(batch, 0),
        torch.randn(3, 5, generator=gen),
        adversarial[:, :4096].contiguous() * 1e10,
    ]
    blocks[2][1, 0, 0] = float("inf")  # a non-finite bound, as for a dropped example
    blocks[2][2, 1, 1] = float("nan")
    settings = [False, True] if torch.set_flush_denormal(False) else [False]
    for flush in settings:
        torch.set_flush_denormal(flush)
        try:
            together = _squared_norms_upper(blocks)
            assert len(together) == len(blocks)
            for block, bound in zip(blocks, together, strict=True):
                alone = torch.cat([_squared_norm_upper(row[None]) for row in block])
                assert bound.dtype == torch.float64
                assert bound.shape == (block.shape[0],)
                assert torch.equal(bound.view(torch.int64), alone.view(torch.int64))
        finally:
            torch.set_flush_denormal(False)


def test_ghost_outer_product_bound_covers_the_exact_weight_gradient_norm() -> None:
    """‖δ aᵀ‖_F² = ‖a‖²‖δ‖²: the product of the two float64 bounds stays above it."""
    gen = torch.Generator().manual_seed(3)
    scales = torch.pow(10.0, torch.linspace(-25, 18, 12))
    act = (torch.randn(12, 50, generator=gen) * scales[:, None]).to(torch.float32)
    delta = (torch.randn(12, 9, generator=gen) / scales.flip(0)[:, None]).to(torch.float32)
    product = _squared_norm_upper(act) * _squared_norm_upper(delta)
    exact = [a * d for a, d in zip(_exact_squared(act), _exact_squared(delta), strict=True)]
    for b, e in zip(product.tolist(), exact, strict=True):
        assert Fraction(b) >= e


@pytest.mark.parametrize("clip", [1e-3, 1.0, 37.0])
def test_clipped_vectors_have_norm_at_most_c_exactly(clip: float) -> None:
    """Factors from the bounds, applied exactly: ‖cᵢgᵢ‖ ≤ C(1 − 2⁻²⁰) in rational arithmetic."""
    rows = _adversarial_rows(4096)
    factors = _factors_from_squared(_squared_norm_upper(rows), clip)
    limit = Fraction(clip) * (1 - Fraction(1, 2**20))
    for c, exact in zip(factors.tolist(), _exact_squared(rows), strict=True):
        assert math.isfinite(c)
        assert 0 < c <= 1
        assert Fraction(c) ** 2 * exact <= limit**2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_clip_gradients_output_has_norm_at_most_c_in_every_dtype(dtype: torch.dtype) -> None:
    """clip_gradients' returned rows, read exactly, have norm ≤ C: half-precision inputs
    come back in float32 (rounding a clipped row to float16 could exceed C by ~0.5 %)."""
    gen = torch.Generator().manual_seed(3)
    grads = {
        "w": (torch.randn(64, 7, 5, generator=gen) * 10).to(dtype),
        "b": (torch.randn(64, 5, generator=gen) * 10).to(dtype),
    }
    clip = 1.0
    out = clip_gradients(grads, clip)
    assert out["w"].dtype == torch.promote_types(dtype, torch.float32)
    flat = torch.cat([out["w"].reshape(64, -1), out["b"]], dim=1).to(torch.float64)
    for row in flat:
        assert sum((Fraction(x) ** 2 for x in row.tolist()), Fraction(0)) <= Fraction(clip) ** 2
