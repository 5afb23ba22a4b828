"""Domain compression: rare cells merged from the noisy 1-way marginal, mapped back on output."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.synth import Categorical, Synthesizer
from gaussdp.synth.compress import compress, compressed_sizes, expand, recode
from gaussdp.synth.model import Measurement, estimate_total


def test_recode_and_expand_are_inverse_up_to_the_merged_cell() -> None:
    sizes = {"a": 6, "b": 2}
    merged = {"a": (1, 4, 5)}
    assert compressed_sizes(sizes, merged) == {"a": 4, "b": 2}
    coded = pd.DataFrame({"a": [0, 1, 2, 3, 4, 5], "b": [0, 1, 0, 1, 0, 1]})
    model = recode(coded, sizes, merged)
    assert model["a"].tolist() == [0, 3, 1, 2, 3, 3]
    assert model["b"].tolist() == coded["b"].tolist()
    gen = np.random.default_rng(0)
    codes = {"a": np.repeat(np.arange(4), 3000), "b": np.zeros(12000, np.int64)}
    back = expand(codes, sizes, merged, rng=gen)
    assert back["a"][:9000:3000].tolist() == [0, 2, 3]  # kept cells map back one to one
    assert (back["a"][:9000] == np.repeat([0, 2, 3], 3000)).all()
    rare = back["a"][9000:]
    # The merged cell becomes each of its 3 cells uniformly: 3000 draws, each ≈ 1000 ± 26.
    counts = np.bincount(rare, minlength=6)[[1, 4, 5]]
    assert counts.sum() == 3000
    assert np.all(np.abs(counts - 1000) < 6 * np.sqrt(3000 * (1 / 3) * (2 / 3)))


def test_a_single_rare_cell_is_not_merged_and_the_total_counts_every_cell() -> None:
    one = Measurement(("a",), np.array([50.0, 1.0, 90.0]), 2.0)
    merged, (same,) = compress([one], 3.0)
    assert merged == {}
    assert same is one
    many = Measurement(("b",), np.array([50.0, 1.0, 90.0, 2.0, -1.0]), 2.0)
    merged, (c,) = compress([many], 3.0)
    assert c.values.tolist() == [50.0, 90.0, 2.0]
    assert c.cells is not None
    assert c.cells.tolist() == [1, 1, 3]
    # Inverse-variance weighting: Σ = 141 with variance 4·3, and Σ = 142 with variance 4·5
    # (the compressed one still sums 5 domain cells) → (141/12 + 142/20)/(1/12 + 1/20).
    assert estimate_total([one, c]) == pytest.approx((141 / 12 + 142 / 20) / (1 / 12 + 1 / 20))


@pytest.mark.slow
def test_a_high_cardinality_column_is_compressed_and_mapped_back() -> None:
    # 300 categories, 3 of them common: the rest are merged into one model cell.
    rng = np.random.default_rng(5)
    n = 3000
    common = rng.choice([0, 1, 2], n, p=[0.5, 0.3, 0.2])
    rare = rng.integers(3, 300, n)
    k = np.where(rng.random(n) < 0.9, common, rare)
    flag = (k < 2).astype(int) ^ (rng.random(n) < 0.1)
    data = pd.DataFrame({"unit": np.arange(n), "k": k, "flag": flag})
    synth = Synthesizer(
        data,
        columns=[Categorical("k", list(range(300))), Categorical("flag", [0, 1])],
        privacy_unit="unit",
        budget=Budget(rho=1.0),
        max_groups_per_unit=1,
        max_rows_per_group=1,
        iters=200,
    )
    result = synth.run(rng=ChaCha20Random(2), rows=4000)
    assert set(result.merged) == {"k"}
    kept = 300 - len(result.merged["k"])
    assert {0, 1, 2} <= set(range(300)) - set(result.merged["k"])
    assert 3 <= kept <= 20  # 297 rare cells of ≈ 1 row each vs 3σ ≈ 5 rows
    assert result.model.domain["k"] == kept + 1
    frame = result.frame
    assert frame["k"].isin(range(300)).all()
    share = frame["k"].value_counts(normalize=True)
    assert share[0] == pytest.approx(0.45, abs=0.04)
    # The rare mass (≈ 10 %) is spread over the merged categories.
    assert frame["k"].isin(result.merged["k"]).mean() == pytest.approx(0.1, abs=0.04)
    assert frame.loc[frame["k"] < 2, "flag"].mean() > 0.8  # the pair is measured
