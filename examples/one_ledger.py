"""One privacy budget for a table release, a DP-SGD run and a federated round.

Run with ``python examples/one_ledger.py [LEDGER]`` (needs the ``torch`` extra),
then ``gaussdp ledger show LEDGER`` (default ``one_ledger.db``, created here; an
existing ledger must have the same total). Everything spent on the dataset goes
through one :class:`gaussdp.Ledger`, a SQLite file holding each spend as a
privacy event; the ledger refuses whatever would take the whole history past its
total, before any data is read or noise drawn:

1. a table release over ``examples/visits.csv`` (``Release.run(ledger=...)``);
2. 20 DP-SGD steps of a small classifier (``make_private(..., ledger=...)``:
   each pass of 10 steps is reserved before its first step and committed after
   its last);
3. one round of federated averaging with central noise
   (``DPAggregator(..., ledger=...)``).

The ledger's total is the PLD accountant's ε of all the events together, which
is less than the sum of the parts' ε.

The noise comes from the operating system's CSPRNG (no ``rng=``): a release
charged to a real ledger must not be seeded. A seeded ``rng=`` is for tests and
replays only: anyone who knows the seed regenerates the noise and subtracts it,
whatever the ledger says was spent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as nnf
from torch.utils.data import DataLoader, TensorDataset

from gaussdp import Budget, Ledger, Release
from gaussdp.accounting import format_bound
from gaussdp.ml import DPAggregator, make_private

EXAMPLES = Path(__file__).resolve().parent
DELTA = 1e-6
TOTAL = Budget(epsilon=10.0, delta=DELTA)


def table_release(ledger: Ledger) -> None:
    """Visits per page, one noisy count per page (ε = 1 at δ = 1e-6 on its own)."""
    pages = ["home", "search", "product", "cart", "checkout", "help", "account", "blog", "careers"]
    release = Release(
        str(EXAMPLES / "visits.csv"),
        privacy_unit="user_id",
        budget=Budget(epsilon=1.0, delta=DELTA),
        max_groups_per_unit=3,
        max_rows_per_group=2,
    ).count(by="page", keys=pages)
    result = release.run(ledger=ledger, label="visits per page")
    print(result.frame[["page", "value"]].to_string(index=False))


def dpsgd_run(ledger: Ledger) -> None:
    """20 steps (2 passes) of DP-SGD on 200 synthetic examples, q = 0.1, σ = 1.5."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 4, generator=gen)
    data = TensorDataset(x, (x[:, 0] > 0).long())
    torch.manual_seed(0)
    net = nn.Linear(4, 2)
    model, optimizer, loader = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.5),
        DataLoader(data, batch_size=20),
        max_grad_norm=1.0,
        noise_multiplier=1.5,
        delta=DELTA,
        ledger=ledger,  # each pass of 10 steps is one ledger entry
    )
    for _ in range(2):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nnf.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
    optimizer.close()
    spent = format_bound(optimizer.privacy_spent(DELTA).upper, up=True, digits=4)
    print(f"DP-SGD: {optimizer.steps} steps, ε ≤ {spent}")


def federated_round(ledger: Ledger) -> None:
    """One round of 50 clients sampled at q = 0.5, central noise σ = 2 on the sum."""
    aggregator = DPAggregator(1.0, 2.0, dim=2, client_rate=0.5, ledger=ledger)
    gen = torch.Generator().manual_seed(1)
    updates = [0.1 * torch.randn(2, generator=gen) for _ in range(50)]
    chosen = aggregator.sample_clients(len(updates))
    total = aggregator.aggregate([updates[i] for i in chosen])
    print(f"federated round: {len(chosen)} clients, noisy mean {(total / 25).tolist()}")


def main(path: Path) -> Ledger:
    """Spend one ledger at ``path`` on the three; return it."""
    ledger = Ledger(path, total=TOTAL)
    table_release(ledger)
    dpsgd_run(ledger)
    federated_round(ledger)
    summary = ledger.summary()
    for row in summary.rows:
        print(f"  {row.what:<40} ε alone = {row.cost:.3f}")
    print(
        f"total ε = {summary.spent:.3f} at δ = {DELTA:g} (PLD, all events together) "
        f"of a budget of ε = {TOTAL.epsilon:g}"
    )
    return ledger


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "one_ledger.db"))
