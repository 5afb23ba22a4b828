"""The test data: a Bayesian network's exact marginals, and the discretised wine table."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gaussdp.random import ChaCha20Random
from gaussdp.synth.data import BayesNet, wine


def test_exact_marginals_are_consistent_distributions() -> None:
    net = BayesNet.example()
    assert net.joint().sum() == pytest.approx(1.0, abs=1e-12)
    # A 2-way marginal sums to its 1-way marginals; a root's marginal is its CPT.
    ab = net.marginal(("a", "b")).reshape(3, 3)
    assert np.allclose(ab.sum(axis=1), net.marginal(("a",)))
    assert np.allclose(ab.sum(axis=0), net.marginal(("b",)))
    assert np.allclose(net.marginal(("a",)), [0.5, 0.3, 0.2])
    # Order of the clique is respected: (b, a) is the transpose.
    assert np.allclose(net.marginal(("b", "a")).reshape(3, 3), ab.T)
    # Exact conditional: P(b | a) is the CPT.
    assert np.allclose(ab / ab.sum(axis=1, keepdims=True), net.cpts["b"])


def test_samples_follow_the_exact_marginals() -> None:
    net = BayesNet.example()
    n = 20000
    data = net.sample(n, rng=ChaCha20Random(1), rows_per_unit=4)
    assert data["unit"].nunique() == n // 4
    for a, b in [("b", "d"), ("c", "e")]:
        observed = (
            pd.crosstab(data[a], data[b])
            .reindex(index=range(net.sizes[a]), columns=range(net.sizes[b]), fill_value=0)
            .to_numpy()
            .ravel()
        )
        expected = n * net.marginal((a, b))
        keep = expected >= 10
        tail = observed[~keep].sum(), expected[~keep].sum()
        chi2 = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
        if tail[1] > 0:
            chi2 += (tail[0] - tail[1]) ** 2 / tail[1]
        dof = int(keep.sum()) + (tail[1] > 0) - 1
        assert chi2 < stats.chi2.isf(1e-6, dof)  # α = 1e-6


def test_bad_networks_are_refused() -> None:
    with pytest.raises(ValueError, match="parents of 'b' must be earlier nodes"):
        BayesNet({"b": 2, "a": 2}, {"b": ("a",)}, {"a": np.full(2, 0.5), "b": np.full((2, 2), 0.5)})
    with pytest.raises(ValueError, match="cpt of 'a' must be a conditional table"):
        BayesNet({"a": 2}, {}, {"a": np.array([0.5, 0.6])})


def test_wine_has_public_domains_that_cover_it() -> None:
    frame, columns = wine()
    assert len(frame) == 178
    assert frame["id"].is_unique
    for col in columns:
        codes = col.encode(frame[col.name])
        assert codes.min() >= 0
        assert codes.max() < col.size
    # The declared bounds contain every value (no clamping needed on this table).
    for col in columns[:3]:
        lo, hi = col.bounds  # type: ignore[union-attr]
        assert frame[col.name].between(lo, hi).all()
    assert list(itertools.chain(columns[3].labels)) == [0, 1, 2]
