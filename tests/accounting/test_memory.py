"""The PLD's memory model against the memory a fresh process actually uses (issue 10:
peak RSS ≤ 500 MB on the sweep)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from gaussdp.accounting._adaptive import MAX_GRID_POINTS, VALUES_PER_POINT

# What a process may hold beyond the arrays the model counts (see
# _adaptive.MAX_GRID_POINTS): glibc's trim threshold, 64 MB once a 32 MB block was freed.
SLACK = 72 << 20

# The sweep's widest case: q = 0.1, 10⁴ steps, σ = 0.6, δ = 1e-5 (windows of 5.4 and
# 2.9 million points at h = 9e-5). dp_accounting 0.6's PLD at h = 1e-4 gives
# 461.26637251670064 with 495 MB; the memory bound coarsened gaussdp's step to 2.2e-4
# (upper 461.2664078) before the power was made in place.
CHILD = textwrap.dedent(
    """
    import json, sys
    STEPS = int(sys.argv[1])
    import scipy.optimize  # noqa: F401  (imported by the lower hull on wide grids)
    from gaussdp.accounting import PLDAccountant, Subsampled, pld
    from gaussdp.mechanisms import Gaussian

    def hwm():
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM"))

    counts = []
    check = pld.check_grid_points

    def counted(points, extended=False):
        check(points, extended)  # raises where the grid does not fit (then coarsened)
        counts.append(points * (2 if extended else 1))

    pld.check_grid_points = counted
    base = hwm()
    acc = PLDAccountant().compose(Subsampled(Gaussian(0.6), 0.1), STEPS)
    b = acc.epsilon(1e-5)
    print(json.dumps({"base": base, "peak": hwm(), "counts": counts, "upper": b.upper,
                      "lower": b.lower, "note": b.note, "h": acc.value_discretization}))
    """
)


def _run(steps: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(steps)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    counted = max(got["counts"])
    assert counted <= MAX_GRID_POINTS
    # The model counts what this process allocated, up to the slack ...
    assert got["peak"] - got["base"] <= counted * VALUES_PER_POINT * 8 + SLACK
    # ... and the process stays under issue 10's bound.
    assert got["peak"] <= 500 << 20
    return got


def test_widest_sweep_case_fits_a_fine_grid_and_the_model_covers_its_peak() -> None:
    got = _run(10_000)
    assert got["h"] <= 1e-4
    assert got["note"] == ""
    assert got["lower"] <= got["upper"] <= 461.26637251670064


def test_a_grid_coarsened_to_the_memory_bound_stays_under_it() -> None:
    # 10⁶ steps of the same event: coarsened to fit, the largest count of the sweep.
    got = _run(1_000_000)
    assert got["h"] > 1e-4
    assert 33600 < got["lower"] <= got["upper"] < 33700
