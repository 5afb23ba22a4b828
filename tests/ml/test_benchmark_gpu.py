"""benchmarks/dpsgd_gpu.py runs on the CPU for a few steps (its GPU run is a separate job)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dpsgd_gpu.py"


def test_gpu_benchmark_smoke_run_on_cpu(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("dpsgd_gpu", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "results.json"
    # One timed step, no warm-up, batch 2: every method still builds and steps its
    # model once. Three ResNet-18 steps on CPU (3x fewer than before) are the least that
    # runs the script end to end; that can take over 15 s on a loaded machine.
    argv = ["--device", "cpu", "--steps", "1", "--warmup", "0", "--batch", "2", "--width", "4"]
    results = module.main([*argv, "--no-opacus", "--json", str(out)])
    assert [r["method"] for r in results] == [
        "non-private",
        "gaussdp secure",
        "gaussdp insecure-float",
    ]
    assert all(r["ms_per_step"] > 0 and r["peak_mib"] is None for r in results)
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert saved["setup"]["params"] == sum(p.numel() for p in module.resnet18(4).parameters())
    # The full-width model is ResNet-18-sized.
    assert 11_000_000 < sum(p.numel() for p in module.resnet18(64).parameters()) < 11_300_000
