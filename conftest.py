"""Collection rules for the whole suite (tests and doctests in src/)."""

from __future__ import annotations

import importlib.util

# gaussdp.ml and gaussdp.audit.mia need the `torch` extra, gaussdp.plot the `plot`
# extra; `make test` installs both, a bare `pytest` may not.
collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["src/gaussdp/ml/*"]
if not importlib.util.find_spec("torch"):
    collect_ignore_glob.append("src/gaussdp/audit/mia.py")
if not importlib.util.find_spec("matplotlib"):
    collect_ignore_glob.append("src/gaussdp/plot.py")
