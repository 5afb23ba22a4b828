"""Private statistics from tables: declarative queries, bounding in the engine, exact noise.

:class:`Release` states the privacy unit, the budget and the contribution
bounds, collects queries (count, sum, mean, histogram, vector sum/mean, each
optionally grouped) and runs them: one portable SQL template
(:mod:`gaussdp.release.sql`) bounds each unit's contribution and aggregates
inside the engine — DuckDB by default, Spark with the ``spark`` extra — and
gaussdp adds exact discrete Gaussian noise to the small per-group result.
:class:`Ledger` keeps a persistent budget in SQLite that cannot be overspent.
"""

from __future__ import annotations

from gaussdp.budget import Budget
from gaussdp.release.core import PrivacyReport, QueryCost, Release, ReleaseResult
from gaussdp.release.ledger import Ledger, LedgerEntry, Reservation
from gaussdp.release.queries import Query
from gaussdp.release.spec import load_spec, release_from_spec

__all__ = [
    "Budget",
    "Ledger",
    "LedgerEntry",
    "PrivacyReport",
    "Query",
    "QueryCost",
    "Release",
    "ReleaseResult",
    "Reservation",
    "load_spec",
    "release_from_spec",
]
