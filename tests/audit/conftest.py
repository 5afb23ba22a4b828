"""Fixtures for the audit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Train small models on one intra-op thread (restored after the test).

    On a busy machine torch's worker threads spin: 30 epochs of a 64-64-10 MLP took
    12.3 s on two threads and 0.8 s on one.
    """
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
