"""examples/one_ledger.py: one ledger spent on a release, a DP-SGD run and a federated round."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from gaussdp.accounting import PLDAccountant, SelfComposed, Subsampled  # noqa: E402
from gaussdp.cli import app  # noqa: E402
from gaussdp.cli._output import ceil_text  # noqa: E402
from gaussdp.mechanisms import LatticeGaussian  # noqa: E402

EXAMPLE = Path(__file__).parents[2] / "examples" / "one_ledger.py"


def test_one_ledger_holds_all_three_and_its_total_is_the_pld_of_their_events(
    tmp_path: Path,
) -> None:
    spec = importlib.util.spec_from_file_location("one_ledger", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    path = tmp_path / "budget.db"
    ledger = example.main(path)

    entries = ledger.entries()
    assert [e.label for e in entries] == ["visits per page", "DP-SGD", "DP-SGD", "federated round"]
    assert all(e.status == "committed" for e in entries)
    step = entries[1].event
    assert isinstance(step, SelfComposed)
    assert step.count == 10
    assert isinstance(step.event, Subsampled)
    assert isinstance(step.event.mechanism, LatticeGaussian)
    assert step.event.sample_rate == 0.1

    # The ledger's total is the PLD accountant composed on the same events.
    reference = PLDAccountant()
    for entry in entries:
        reference.compose(entry.event)
    bounds = reference.epsilon(example.DELTA)
    summary = ledger.summary()
    assert summary.spent == bounds.upper
    assert summary.spent_lower == bounds.lower
    alone = [PLDAccountant().compose(e.event).epsilon(example.DELTA).upper for e in entries]
    assert [r.cost for r in summary.rows] == alone
    assert summary.spent < sum(alone)  # composed together, not added

    runner = CliRunner()
    shown = runner.invoke(app, ["ledger", "show", str(path), "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert [(r["what"], r["cost"]) for r in data["entries"]] == [
        (e.label, c) for e, c in zip(entries, alone, strict=True)
    ]
    assert data["spent"] == bounds.upper
    table = runner.invoke(app, ["ledger", "show", str(path)], env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    # Rounded up, as the table prints it (ceil_text): .6g of 2.63549… gave 2.6355 before.
    assert f"spent ε = {ceil_text(bounds.upper)} at δ = 1e-06" in table.output
    for label in ("visits per page", "DP-SGD", "federated round"):
        assert label in table.output
