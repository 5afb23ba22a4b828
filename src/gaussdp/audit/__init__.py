"""Privacy you can test: attacks and empirical audits against the certified guarantees.

- :mod:`gaussdp.audit.floating`: the floating-point attack (Mironov 2012) against
  naive float noise, and the same attack against :meth:`gaussdp.Gaussian.release`.
- :mod:`gaussdp.audit.empirical`: ε lower bounds with Clopper–Pearson confidence from
  many runs (a table release with a unit added and removed; DP-SGD with a canary),
  reported next to the certified upper bound.
- :mod:`gaussdp.audit.one_run`: the one-run audit (Steinke, Nasr, Jagielski 2023): m
  random canaries, one run, an ε lower bound from the number of right guesses.
- :mod:`gaussdp.audit.mia`: membership-inference attacks on models trained with
  :mod:`gaussdp.ml` (needs the ``torch`` extra; not imported here).
- :mod:`gaussdp.audit.report`: a self-contained HTML report of a release or a ledger.

The trade-off curves these results are compared with live in
:mod:`gaussdp.privacy.tradeoff`.
"""

from __future__ import annotations

from gaussdp.audit.floating import (
    FloatAttackResult,
    attack_gaussdp_release,
    attack_naive_gaussian,
    attack_naive_laplace,
)
from gaussdp.audit.one_run import (
    OneRunAuditResult,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)
from gaussdp.audit.stats import AuditResult, clopper_pearson, epsilon_lower_bound
from gaussdp.privacy.tradeoff import PrivacyExplanation, TradeoffCurve, explain

__all__ = [
    "AuditResult",
    "FloatAttackResult",
    "OneRunAuditResult",
    "PrivacyExplanation",
    "TradeoffCurve",
    "attack_gaussdp_release",
    "attack_naive_gaussian",
    "attack_naive_laplace",
    "clopper_pearson",
    "epsilon_lower_bound",
    "explain",
    "one_run_epsilon_lower_bound",
    "one_run_p_value",
]
