"""Collection rules for the whole suite (tests and doctests in src/)."""

from __future__ import annotations

import importlib.util

# gaussdp.ml needs the `torch` extra; `make test` installs it, a bare `pytest` may not.
collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["src/gaussdp/ml/*"]
