"""A forked process never repeats its parent's noise unless the run is seeded.

Objects that keep randomness across calls (derived streams, NoiseStream, DPAggregator,
make_private) are built in the parent; parent and child then draw the same request
and compare. Under the default source the two must differ; under a seeded
ChaCha20Random the child continues the parent's stream, as the seed says.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

from forking import in_child
from gaussdp.accounting import PrivacyFilter
from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError
from gaussdp.random import (
    ChaCha20Random,
    RandomSource,
    SystemRandom,
    _DerivedStream,
    check_rng,
)
from gaussdp.release import Ledger, Release
from gaussdp.sampling.background import NoiseStream
from gaussdp.synth import Categorical, Synthesizer

if TYPE_CHECKING:
    from gaussdp.ml.noise import SumNoiser

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="os.fork is POSIX only"),
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


def test_derived_stream_words_are_those_of_chacha20_under_the_parent_bytes() -> None:
    derived = _DerivedStream(ChaCha20Random(5))
    keys = ChaCha20Random(5)
    np.testing.assert_array_equal(
        derived.words(600), ChaCha20Random(keys.random_bytes(32)).words(600)
    )


@pytest.mark.parametrize("parent", [None, "system", "derived"])
def test_derived_stream_of_a_system_source_is_rekeyed_in_a_forked_child(parent: str) -> None:
    source = {
        None: check_rng(None),
        "system": SystemRandom(),
        "derived": _DerivedStream(SystemRandom()),
    }[parent]
    stream = _DerivedStream(source)
    stream.words(1)  # the parent has buffered bytes under its key
    child = np.frombuffer(in_child(lambda: stream.words(8).tobytes()), np.uint64)
    assert child.size == 8
    assert not np.array_equal(child, stream.words(8))


def test_derived_stream_of_a_seeded_source_continues_in_a_forked_child() -> None:
    stream = _DerivedStream(_DerivedStream(ChaCha20Random(3)))
    stream.words(1)
    child = np.frombuffer(in_child(lambda: stream.words(8).tobytes()), np.uint64)
    np.testing.assert_array_equal(child, stream.words(8))


class _Deterministic(RandomSource):
    """A user-defined source that is deterministic but not marked reproducible."""

    def __init__(self, seed: int) -> None:
        self._generator = np.random.default_rng(seed)

    def random_bytes(self, n: int) -> bytes:
        return self._generator.bytes(n)


def test_sibling_children_of_a_deterministic_user_source_draw_different_noise() -> None:
    # Once: siblings re-keyed from the same state of the user's source (and the parent's
    # next key was theirs too): identical noise in every child.
    stream = _DerivedStream(_Deterministic(1))
    stream.words(1)
    children = [
        np.frombuffer(in_child(lambda: stream.words(8).tobytes()), np.uint64) for _ in range(2)
    ]
    assert children[0].size == children[1].size == 8
    assert not np.array_equal(children[0], children[1])
    parent_next = _DerivedStream(stream._parent).words(8)
    assert not any(np.array_equal(child, parent_next) for child in children)
    noise = NoiseStream(10**6, 6, rng=_Deterministic(2), background=False)
    noise.next()
    vectors = [np.frombuffer(in_child(lambda: noise.next().tobytes()), np.int64) for _ in range(2)]
    assert vectors[0].size == vectors[1].size == 6
    assert not np.array_equal(vectors[0], vectors[1])
    assert not any(np.array_equal(v, noise.next()) for v in vectors)


def _noise_stream_child(stream: NoiseStream) -> bytes:
    # The child's stream left the parent's worker at the fork and starts its own on use.
    assert stream._worker is None
    first = stream.next().copy()
    assert stream.background
    return first.tobytes()


def test_noise_stream_in_a_forked_child_has_its_own_keys_and_worker() -> None:
    with NoiseStream(10**6, 6) as stream:  # rng=None: the key of vector 1 is read already
        assert stream.background
        child = np.frombuffer(in_child(lambda: _noise_stream_child(stream)), np.int64)
        assert child.size == 6
        parent = stream.next().copy()
        assert not np.array_equal(child, parent)
        # The parent's worker was not disturbed by the child.
        assert stream.background
        assert stream.next().shape == (6,)


def test_noise_stream_under_a_seed_continues_in_a_forked_child() -> None:
    with NoiseStream(10**6, 6, rng=ChaCha20Random(8)) as stream:
        child = np.frombuffer(in_child(lambda: _noise_stream_child(stream)), np.int64)
        reference = NoiseStream(10**6, 6, rng=ChaCha20Random(8), background=False)
        want = reference.next()
        np.testing.assert_array_equal(child, want)
        np.testing.assert_array_equal(stream.next(), want)


@pytest.mark.parametrize("seeded", [False, True])
def test_aggregator_in_a_forked_child_draws_fresh_noise_unless_seeded(seeded: bool) -> None:
    torch = pytest.importorskip("torch")
    from gaussdp.ml import DPAggregator

    agg = DPAggregator(1.0, 1.0, dim=8, rng=ChaCha20Random(1) if seeded else None)
    agg.aggregate([torch.zeros(8)])
    updates = [torch.full((8,), 0.1)]
    child = np.frombuffer(in_child(lambda: agg.aggregate(updates).numpy().tobytes()), np.float32)
    assert child.size == 8
    parent = agg.aggregate(updates).numpy()
    assert np.array_equal(child, parent) == seeded


def test_make_private_in_a_forked_child_draws_fresh_noise() -> None:
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from gaussdp.ml import make_private

    torch.manual_seed(0)
    model = nn.Linear(4, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    data = TensorDataset(torch.zeros(8, 4), torch.zeros(8, 1))
    private, opt, loader = make_private(
        model,
        optimizer,
        DataLoader(data, batch_size=8),
        max_grad_norm=1.0,
        delta=1e-5,
        noise_multiplier=1.0,
        loss_fn=nn.functional.mse_loss,
    )

    def step() -> bytes:  # zero gradients: the update is the noise alone
        opt.zero_grad()
        x, y = next(iter(loader))  # its own Poisson batch (rate 1: all 8 examples)
        private.backward(x, y)
        opt.step()
        return next(private.parameters()).detach().numpy().tobytes()

    before = next(private.parameters()).detach().clone().numpy()
    child = np.frombuffer(in_child(step), np.float32)
    assert child.size == 4
    parent = np.frombuffer(step(), np.float32)
    assert not np.array_equal(child - before.ravel(), parent - before.ravel())


@pytest.mark.parametrize("owner", ["NoiseStream", "SumNoiser"])
def test_a_forked_child_that_never_draws_does_not_hold_the_parents_worker(owner: str) -> None:
    # Once: the child kept its copies of the worker's pipes until it exited, so the
    # worker never saw end of input and the parent's close() killed it after 5 s
    # (fixed first for SumNoiser alone; a bare NoiseStream still waited).
    noiser: NoiseStream | SumNoiser
    if owner == "SumNoiser":
        pytest.importorskip("torch")
        from gaussdp.ml.noise import SumNoiser

        noiser = SumNoiser(1.0, 1.0, dim=8, rng=ChaCha20Random(2), prefetch=True)
        assert noiser._stream is not None
        stream = noiser._stream
    else:
        noiser = stream = NoiseStream(10**6, 8, rng=ChaCha20Random(2))
    assert stream._worker is not None
    proc = stream._worker._proc
    hold, release = os.pipe()
    pid = os.fork()
    if pid == 0:  # alive, never touching the noiser, until the parent is done
        os.close(release)
        os.read(hold, 1)
        os._exit(0)
    os.close(hold)
    try:
        noiser.close()
    finally:
        os.close(release)
        os.waitpid(pid, 0)
    assert proc.returncode >= 0  # it ended by itself on end of input (killed: -9)


def _in_child_refusal(run: Callable[[], object]) -> str:
    """Run ``run`` in a forked child: "ran", or the message of the RuntimeError it raised."""

    def action() -> bytes:
        try:
            run()
        except RuntimeError as error:
            return str(error).encode()
        return b"ran"

    return in_child(action).decode()


def _count_release(data: pd.DataFrame) -> Release:
    return Release(
        data,
        privacy_unit="id",
        budget=Budget(epsilon=1.0, delta=1e-6),
        max_groups_per_unit=1,
        max_rows_per_group=1,
    ).count(by="k", keys=["a"])


def _one_way_synth(data: pd.DataFrame) -> Synthesizer:
    return Synthesizer(
        data,
        columns=[Categorical("k", ["a", "b"])],
        privacy_unit="id",
        budget=Budget(epsilon=1.0, delta=1e-6),
        max_groups_per_unit=1,
        max_rows_per_group=1,
        iters=5,
        compress=False,
    )


@pytest.mark.parametrize("kind", ["release", "synth"])
def test_a_seeded_release_or_synthesis_with_a_ledger_is_refused_in_a_forked_child(
    kind: str, tmp_path: Path
) -> None:
    # Once (priv25 #1): parent and child drew the same L0 salt and noise from one
    # ChaCha20Random on neighbouring tables, both charged as independent; the difference
    # of the two counts was exactly the person (true ε = ∞). The ML objects refused it.
    path, total = tmp_path / "budget.db", Budget(epsilon=100.0, delta=1e-5)
    ledger = Ledger(path, total=total)
    data = pd.DataFrame({"id": range(30), "k": ["a"] * 30})
    rng = ChaCha20Random(b"replayable seed")

    def run() -> object:
        if kind == "release":
            return _count_release(data).run(rng=rng, ledger=Ledger(path))
        return _one_way_synth(data).run(rng=rng, ledger=Ledger(path))

    got = _in_child_refusal(run)
    what = "release" if kind == "release" else "synthesizer run"
    assert re.fullmatch(
        rf"rng must be unseeded \(None, the operating system's source\) for a charged {what} "
        r"outside the process that made the seeded stream "
        r"\(a forked process repeats that process's noise, which the budget would pay for "
        r"again\), got ChaCha20Random\(b'replayable seed'\)",
        got,
    ), got
    assert ledger.spent == 0  # nothing charged by the refusal
    run()  # the process that made the stream releases
    assert ledger.spent > 0


@pytest.mark.parametrize("which", ["own", "shared"])
def test_an_in_memory_filter_spends_nothing_in_a_forked_child(which: str) -> None:
    # Once (priv25 #3): a release whose budget paid for one run answered in the parent
    # and in each of 4 forked children, each spending its own copy of the filter.
    data = pd.DataFrame({"id": range(30), "k": ["a"] * 30})
    release = _count_release(data)
    shared = PrivacyFilter(release.budget)
    spend_to = release.filter if which == "own" else shared

    def run() -> object:
        return release.run(filter=None if which == "own" else shared)

    got = [_in_child_refusal(run) for _ in range(2)]
    assert all(g.startswith("filter must be the original, in the process") for g in got), got
    assert spend_to.spent == 0
    run()  # the filter's own process runs it, once
    assert spend_to.spent > 0
    with pytest.raises(BudgetExceededError):
        run()
