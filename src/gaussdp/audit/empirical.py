r"""Empirical privacy auditing: an ε lower bound with confidence, next to the certified ε.

The classic many-run audit (Jagielski, Ullman, Oprea 2020; Nasr, Song, Thakurta,
Papernot, Carlini 2021): run the mechanism many times in two neighbouring worlds —
with and without one privacy unit (a person's rows, or a canary example) — and
record one statistic per run. Half of the runs choose a threshold test; on the
other half the test's true- and false-positive counts give, through
:func:`~gaussdp.audit.stats.epsilon_lower_bound`, an ε below which the mechanism is
*not* (ε, δ)-DP with confidence 1 − α. If it ever exceeded the certified ε, either
the accounting or the implementation would be wrong; a lower bound near the
certified ε says the analysis is tight for this attack.

* :func:`audit_table_release`: a :class:`gaussdp.release.Release` on a table with
  and without one privacy unit; the statistic is one released value.
* :func:`audit_dpsgd`: DP-SGD (:func:`gaussdp.ml.make_private`) with and without a
  canary example whose clipped gradient lies on a coordinate no other example
  touches; the statistic is the final weight on that coordinate (white box).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gaussdp._validation import (
    check_count,
    check_delta,
    check_int,
    check_positive,
    check_probability,
)
from gaussdp.audit.stats import AuditResult, epsilon_lower_bound
from gaussdp.errors import invalid
from gaussdp.random import RandomSource, check_rng

if TYPE_CHECKING:
    import pandas as pd

    from gaussdp.release import Release

__all__ = ["audit_dpsgd", "audit_outputs", "audit_table_release"]

FloatArray = npt.NDArray[np.float64]


def _counts(inside: FloatArray, outside: FloatArray, sign: float, t: float) -> tuple[int, int]:
    """(true positives, false positives) of the test "sign·statistic > sign·t"."""
    return int(np.sum(sign * inside > sign * t)), int(np.sum(sign * outside > sign * t))


def audit_outputs(
    inside: npt.ArrayLike,
    outside: npt.ArrayLike,
    *,
    epsilon_certified: float,
    delta: float,
    alpha: float = 0.05,
    method: str = "threshold test",
) -> AuditResult:
    r"""An ε lower bound from statistics of runs with (``inside``) and without the unit.

    The first half of each array chooses the direction and threshold that maximise
    the bound; the second half, untouched by that choice, gives the reported bound
    (so the selection does not bias it).
    """
    a = np.asarray(inside, dtype=np.float64)
    b = np.asarray(outside, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1 or min(a.size, b.size) < 4:
        raise ValueError(
            invalid("inside, outside", "1-d arrays of at least 4 runs", (a.size, b.size))
        )
    delta = check_probability("delta", delta)
    alpha = check_probability("alpha", alpha, open_interval=True)
    ha, hb = a.size // 2, b.size // 2
    train_a, test_a, train_b, test_b = a[:ha], a[ha:], b[:hb], b[hb:]
    candidates = np.quantile(np.concatenate([train_a, train_b]), np.linspace(0.01, 0.99, 99))
    best = (-1.0, 1.0, float(candidates[0]))
    for sign in (1.0, -1.0):
        for t in candidates:
            tp, fp = _counts(train_a, train_b, sign, float(t))
            eps = epsilon_lower_bound(tp, train_a.size, fp, train_b.size, delta=delta, alpha=alpha)
            if eps > best[0]:
                best = (eps, sign, float(t))
    _, sign, t = best
    tp, fp = _counts(test_a, test_b, sign, t)
    eps = epsilon_lower_bound(tp, test_a.size, fp, test_b.size, delta=delta, alpha=alpha)
    return AuditResult(
        epsilon_lower=eps,
        epsilon_certified=float(epsilon_certified),
        delta=delta,
        confidence=1 - alpha,
        runs=min(test_a.size, test_b.size),
        true_positives=tp,
        false_positives=fp,
        method=method,
    )


def audit_table_release(
    data: pd.DataFrame,
    build: Callable[[pd.DataFrame], Release],
    *,
    privacy_unit: str,
    unit: object,
    runs: int,
    row: int = 0,
    rng: RandomSource | None = None,
    alpha: float = 0.05,
) -> AuditResult:
    r"""Audit a table release: ``runs`` runs with and without the rows of ``unit``.

    The ``2·runs`` releases are charged nowhere (each gets a fresh filter, not your
    ledger): run audits on a test table, never on data whose budget matters.

    Parameters
    ----------
    data : pandas.DataFrame
        The table D (containing ``unit``).
    build : callable
        ``build(frame) -> Release``, the release to audit, on D or on D minus the unit.
    privacy_unit : str
        The privacy-unit column.
    unit : object
        The unit added and removed.
    runs : int
        Runs per world, ≥ 8 (half choose the test, half bound ε).
    row : int
        Which row of the released frame is the statistic.
    rng : RandomSource, optional
        Noise source of the runs (``None``: the OS CSPRNG).
    alpha : float
        1 − confidence.

    Returns
    -------
    AuditResult
        With ``epsilon_certified`` = the release's reported ε at its budget's δ.
    """
    runs = check_int("runs", runs, minimum=8)
    source = check_rng(rng)
    if privacy_unit not in data.columns:
        raise ValueError(invalid("privacy_unit", "a column of data", privacy_unit))
    without = data[data[privacy_unit] != unit]
    if len(without) == len(data):
        raise ValueError(invalid("unit", f"a value of column {privacy_unit!r}", unit))
    release = build(data)
    report = release.report
    if report.epsilon is None or report.delta is None:
        raise ValueError(invalid("build", "a release with an (ε, δ) budget", report.budget))

    def one(frame: pd.DataFrame) -> float:
        return float(build(frame).run(rng=source).frame["value"].iloc[row])

    inside = np.array([one(data) for _ in range(runs)])
    outside = np.array([one(without) for _ in range(runs)])
    return audit_outputs(
        inside,
        outside,
        epsilon_certified=report.epsilon,
        delta=report.delta,
        alpha=alpha,
        method=f"table release, unit {unit!r} added/removed, row {row}",
    )


def audit_dpsgd(
    *,
    runs: int,
    noise_multiplier: float = 1.0,
    steps: int = 4,
    examples: int = 20,
    batch_size: int = 10,
    features: int = 4,
    max_grad_norm: float = 1.0,
    delta: float = 1e-5,
    alpha: float = 0.05,
    rng: RandomSource | None = None,
) -> AuditResult:
    r"""Many-run audit of DP-SGD with a canary gradient (white box).

    Each run trains ``nn.Linear(features + 1, 2)`` from zero weights with
    :func:`gaussdp.ml.make_private` (secure noise, Poisson sampling at
    ``batch_size/examples``, SGD at learning rate 1) for ``steps`` steps on random
    data whose last feature is 0; the canary's only non-zero feature is the last one
    (10⁴), so its clipped gradient lies on the last column and no other example's
    gradient touches it. The statistic is the difference of the two classes' weights
    on that feature after training: in the world without the canary it is pure
    noise, with it every step that samples the canary adds ≈ C√2.
    ``rng`` (``None``: the OS CSPRNG) draws the random data, the batches and the
    noise of every run; pass ``ChaCha20Random(seed)`` to replay an audit.
    Needs the ``torch`` extra.
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from gaussdp.ml import make_private

    runs = check_int("runs", runs, minimum=8)
    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    steps = check_count("steps", steps)
    examples = check_int("examples", examples, minimum=2)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    features = check_int("features", features, minimum=1)
    delta = check_delta("delta", delta)
    source = check_rng(rng)
    generator = torch.Generator().manual_seed(source.randbits(63))
    x = torch.cat(
        [torch.randn(examples, features, generator=generator), torch.zeros(examples, 1)], 1
    )
    y = torch.randint(0, 2, (examples,), generator=generator)
    canary_x = torch.zeros(1, features + 1)
    canary_x[0, -1] = 1e4
    canary_y = torch.zeros(1, dtype=torch.long)
    certified: list[float] = []

    def train(with_canary: bool) -> float:
        data_x = torch.cat([x, canary_x]) if with_canary else x
        data_y = torch.cat([y, canary_y]) if with_canary else y
        model = nn.Linear(features + 1, 2)
        with torch.no_grad():
            model.weight.zero_()
            model.bias.zero_()
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        loader = DataLoader(TensorDataset(data_x, data_y), batch_size=batch_size)
        private: Any = make_private(
            model,
            optimizer,
            loader,
            loss_fn=nn.functional.cross_entropy,
            max_grad_norm=max_grad_norm,
            delta=delta,
            noise_multiplier=noise_multiplier,
            rng=source,
        )
        wrapped, opt, data_loader = private
        done = 0
        while done < steps:
            for bx, by in data_loader:
                opt.zero_grad()
                wrapped.backward(bx, by)
                opt.step()
                done += 1
                if done == steps:
                    break
        if with_canary and not certified:
            certified.append(opt.privacy_spent(delta).upper)
        weight = model.weight.detach()
        return float(weight[0, -1] - weight[1, -1])

    inside = np.array([train(True) for _ in range(runs)])
    outside = np.array([train(False) for _ in range(runs)])
    return audit_outputs(
        inside,
        outside,
        epsilon_certified=certified[0],
        delta=delta,
        alpha=alpha,
        method=(
            f"DP-SGD canary gradient, σ = {noise_multiplier:g}, q = "
            f"{batch_size / (examples + 1):.3g}, {steps} steps, many-run"
        ),
    )
