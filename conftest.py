"""Collection rules for the whole suite (tests and doctests in src/)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

# gaussdp.ml and gaussdp.audit.mia need the `torch` extra, gaussdp.plot the `plot`
# extra; `make test` installs both, a bare `pytest` may not.
collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["src/gaussdp/ml/*"]
if not importlib.util.find_spec("torch"):
    collect_ignore_glob.append("src/gaussdp/audit/mia.py")
if not importlib.util.find_spec("matplotlib"):
    collect_ignore_glob.append("src/gaussdp/plot.py")


@pytest.fixture(autouse=True)
def _mpmath_precision(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run each test at its module's mpmath precision (``MPMATH_DPS``, default 15).

    mpmath's precision is one global: a module that set it at import, or a test that
    set it and returned, changed it for whatever ran next in the same worker, so
    results depended on the order xdist handed out the tests.
    """
    import mpmath

    module = getattr(request.node, "module", None)
    with mpmath.workdps(getattr(module, "MPMATH_DPS", 15)):
        yield
