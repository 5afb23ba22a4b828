"""examples/dpsgd_digits.py, dpsgd_digits_cnn.py and dpsgd_transformer.py run (small sizes),
meet ε and learn (private test accuracy well above chance)."""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spent(output: str) -> tuple[float, float]:
    match = re.search(r"epsilon spent ([0-9.]+) \(target ([0-9.]+)\)", output)
    assert match is not None, output
    return float(match.group(1)), float(match.group(2))


def _accuracy(output: str, pattern: str) -> float:
    match = re.search(pattern, output)
    assert match is not None, output
    return float(match.group(1))


def _run(module: ModuleType, argv: list[str]) -> None:
    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            # a small dataset: delta is not below 1/len(dataset)
            warnings.filterwarnings("ignore", message="delta=.* is not below 1/len")
            module.main(argv)
    finally:
        torch.set_num_threads(threads)


def test_cnn_on_digits_runs_and_spends_at_most_its_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _run(_load("dpsgd_digits_cnn"), ["--epochs", "3", "--epsilon", "2"])
    out = capsys.readouterr().out
    spent, target = _spent(out)
    assert target == 2.0
    assert 1.5 < spent <= 2.0
    assert "non-private test accuracy" in out
    # Ten classes (chance 0.1 on 360 test images, std 0.016); the seeded run gives 0.66,
    # seeds 1 and 2 gave 0.67 and 0.61.
    assert _accuracy(out, r"test accuracy ([0-9.]+), epsilon spent") > 0.4


def test_transformer_runs_and_spends_at_most_its_target(capsys: pytest.CaptureFixture[str]) -> None:
    example = _load("dpsgd_transformer")
    _run(example, ["--examples", "300", "--epochs", "1", "--batch-size", "50"])
    out = capsys.readouterr().out
    spent, target = _spent(out)
    assert 2.0 < spent <= target == 3.0
    # Three classes (chance 1/3 on 2,000 test sequences, std 0.011); the seeded run gives
    # 0.63, seeds 1 and 2 gave 0.42 and 0.46.
    assert _accuracy(out, r"epoch 1: test accuracy ([0-9.]+)") > 0.4


def test_transformer_task_labels_the_most_frequent_marker() -> None:
    example = _load("dpsgd_transformer")
    tokens, labels = example.synthetic(200, seed=5).tensors
    counts = torch.stack([(tokens == m + 1).sum(1) for m in range(example.MARKERS)], 1)
    assert bool((counts.argmax(1) == labels).all())
    # Distinct counts in 1..5: no ties, every marker present.
    assert bool((counts >= 1).all())
    assert bool((counts.sort(1).values.diff(dim=1) > 0).all())


def test_mlp_on_digits_runs_and_spends_at_most_each_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # About 50 s on a loaded 2-core machine: three calibrations and three private epochs at
    # the example's own sizes (its smallest run).
    _run(_load("dpsgd_digits"), ["--epochs", "1", "--seeds", "1", "--reference-epochs", "1"])
    out = capsys.readouterr().out
    rows = re.findall(r"^ +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)$", out, re.M)
    assert [float(r[0]) for r in rows] == [1.0, 3.0, 8.0]
    for target, _, lower, upper, _ in rows:
        assert float(lower) <= float(upper) <= float(target)
    assert "non-private" in out
