"""The model fit: Private-PGM's loss grouped by clique, and the compiled programs it reuses."""

from __future__ import annotations

import numpy as np

from gaussdp.synth.model import Measurement, _mbi, estimate_total, fit_model, model_marginal

SIZES = {"a": 3, "b": 4, "c": 2, "d": 5}


def _measurements() -> list[Measurement]:
    rng = np.random.default_rng(0)
    ones = [Measurement((c,), rng.normal(100, 5, k), 5.0) for c, k in SIZES.items()]
    return [
        *ones,
        Measurement(("a", "b"), rng.normal(30, 5, 12), 3.0),
        Measurement(("a", "b"), rng.normal(30, 5, 12), 2.0),  # a repeat: combined
        Measurement(("b", "c", "d"), rng.normal(10, 5, 40), 4.0),
        Measurement(("c",), rng.normal(200, 5, 2), 1.0, cells=np.array([1, 3])),  # merged cells
    ]


def _mbi_fit(ms: list[Measurement], iters: int) -> object:
    """``mbi``'s own loss: one LinearMeasurement per measurement (a merged cell scaled)."""
    mbi = _mbi()
    domain = mbi.Domain(tuple(SIZES), tuple(SIZES.values()))
    linear = []
    for m in ms:
        if m.cells is None:
            linear.append(mbi.LinearMeasurement(m.values, m.clique, stddev=m.sigma))
        else:
            w = 1.0 / np.sqrt(m.cells)
            query = mbi.WeightedQuery(w)
            linear.append(
                mbi.LinearMeasurement(m.values * w, m.clique, stddev=m.sigma, query=query)
            )
    return mbi.estimation.MirrorDescent().estimate(
        domain, linear, known_total=estimate_total(ms), iters=iters
    )


def test_the_grouped_loss_fits_the_model_mbi_fits() -> None:
    ms = _measurements()
    ours, theirs = fit_model(SIZES, ms, iters=3000), _mbi_fit(ms, 3000)
    for clique in [("a", "b"), ("b", "c", "d"), ("a", "d"), ("c",)]:
        a, b = model_marginal(ours, clique), model_marginal(theirs, clique)
        assert np.abs(a - b).max() < 1e-3 * b.sum()  # both converged: the same minimiser
    assert sorted(ours.cliques) == sorted(theirs.cliques)


def test_a_clique_the_model_covers_reuses_the_compiled_program() -> None:
    mbi = _mbi()
    ms = _measurements()
    first = fit_model(SIZES, ms, iters=50)
    compiled = mbi.estimation.Estimator._multi_step._cache_size()
    rng = np.random.default_rng(1)
    # (b, d) is inside the model's clique (b, c, d): same structure, new data.
    more = [*ms, Measurement(("b", "d"), rng.normal(20, 5, 20), 2.0)]
    fit_model(SIZES, more, iters=50, warm_start=first)
    assert mbi.estimation.Estimator._multi_step._cache_size() == compiled
    # (a, c) is not covered: a new model structure, compiled once.
    fit_model(SIZES, [*more, Measurement(("a", "c"), rng.normal(20, 5, 6), 2.0)], iters=50)
    assert mbi.estimation.Estimator._multi_step._cache_size() == compiled + 1


def test_lipschitz_routes_each_slot_as_mbi_does() -> None:
    # A slot contained in two model cliques goes to the one with the smaller domain
    # (mbi's clique_mapping): here (a,) to (a, c) with 6 cells, not (a, b) with 20, so the
    # bound is mbi's 4 (blocks (a, b): 1, (a, c): 1 + 6/2), not 11.
    from gaussdp.synth.model import _lipschitz, _slots

    mbi = _mbi()
    sizes = {"a": 2, "b": 10, "c": 3}
    stds = {("a",): 1.0, ("a", "b"): 1.0, ("a", "c"): 1.0}
    maximal, slots = _slots(list(stds), tuple(sizes))
    weight = {
        r: np.full(int(np.prod([sizes[a] for a in r])), 1 / stds[r] ** 2 if r in stds else 0.0)
        for r in slots
    }
    domain = mbi.Domain(tuple(sizes), tuple(sizes.values()))
    linear = [
        mbi.LinearMeasurement(np.zeros(int(np.prod([sizes[a] for a in r]))), r, stddev=s)
        for r, s in stds.items()
    ]
    want = mbi.marginal_loss.calculate_l2_lipschitz_from_metadata(domain, linear)
    assert want == 4.0
    assert _lipschitz(sizes, maximal, weight) == want
