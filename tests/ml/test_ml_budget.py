"""DP-SGD steps and federated rounds are charged to a filter or a ledger before their noise."""

from __future__ import annotations

import contextlib
import io
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp import Budget, Ledger  # noqa: E402
from gaussdp.accounting import (  # noqa: E402
    PLDAccountant,
    PrivacyFilter,
    RecordedCost,
    SelfComposed,
    ZCDPAccountant,
)
from gaussdp.errors import BudgetExceededError  # noqa: E402
from gaussdp.ml import DistributedDiscreteGaussian, DPAggregator, make_private  # noqa: E402
from gaussdp.ml._budget import Charger  # noqa: E402
from gaussdp.random import (  # noqa: E402
    ChaCha20Random,
    RandomSource,
    _BufferedSource,
    _chacha20,
    _chacha_key,
    _DerivedStream,
    _process_identity,
)

DELTA = 1e-5


def _setup(seed: int = 0, **kwargs: object):  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(100, 4, generator=gen), torch.randint(0, 2, (100,)))
    net = nn.Linear(4, 2)
    options: dict[str, object] = {"noise_multiplier": 1.0, "rng": ChaCha20Random(seed)}
    options.update(kwargs)
    return make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.1),
        DataLoader(data, batch_size=10),  # q = 0.1, 10 steps per pass
        loss_fn=nnf.cross_entropy,
        max_grad_norm=1.0,
        delta=DELTA,
        **options,  # type: ignore[arg-type]
    )


def _steps(model, optimizer, loader, n: int) -> None:  # type: ignore[no-untyped-def]
    batches = iter(loader)
    for _ in range(n):
        x, y = next(batches)
        optimizer.zero_grad()
        model.backward(x, y)
        optimizer.step()


def _fits(event: object, epsilon: float) -> int:
    """The most runs of ``event`` within ε at DELTA, by the PLD accountant (independent loop)."""
    k = 0
    while PLDAccountant().compose(event, k + 1).epsilon(DELTA).upper <= epsilon:  # type: ignore[arg-type]
        k += 1
    return k


def test_filter_refuses_exactly_the_step_that_would_exceed() -> None:
    budget = Budget(epsilon=2.2, delta=DELTA)
    probe = _setup()[1].step_event
    fits = _fits(probe, 2.2)  # 4 steps of σ = 1, q = 0.1
    assert 1 <= fits < 10
    spend = PrivacyFilter(budget)
    model, optimizer, loader = _setup(filter=spend)  # blocks of 10 steps, halved on refusal
    _steps(model, optimizer, loader, fits)
    assert optimizer.steps == fits
    params = [p.detach().clone() for p in model.module.parameters()]
    batches = iter(loader)
    x, y = next(batches)
    optimizer.zero_grad()
    model.backward(x, y)
    with pytest.raises(BudgetExceededError, match="the next DP-SGD step costs ε = "):
        optimizer.step()
    # Refused before the noise: nothing moved, nothing more was charged.
    assert optimizer.steps == fits
    for before, after in zip(params, model.module.parameters(), strict=True):
        assert torch.equal(before, after)
    assert spend.spent == PLDAccountant().compose(probe, fits).epsilon(DELTA).upper
    assert spend.spent == optimizer.privacy_spent(DELTA).upper <= 2.2


def test_ledger_is_charged_in_blocks_and_committed(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    model, optimizer, loader = _setup(ledger=ledger, reserve_steps=4)
    _steps(model, optimizer, loader, 6)  # a block of 4 committed, a block of 4 open
    entries = ledger.entries()
    assert [(e.status, e.event) for e in entries] == [
        ("committed", SelfComposed(optimizer.step_event, 4)),
        ("reserved", SelfComposed(optimizer.step_event, 4)),
    ]
    assert entries[0].label == "DP-SGD"
    assert entries[0].detail is not None
    assert entries[0].detail["noise_multiplier"] == 1.0
    assert entries[0].detail["runs"] == 4
    # The open block counts (a crash here over-counts, never under-counts).
    assert ledger.spent == PLDAccountant().compose(optimizer.step_event, 8).epsilon(DELTA).upper
    optimizer.close()  # the 2 steps of the open block never taken are given back
    assert [(e.status, e.event) for e in ledger.entries()] == [
        ("committed", SelfComposed(optimizer.step_event, 4)),
        ("committed", SelfComposed(optimizer.step_event, 2)),
    ]
    assert ledger.spent == optimizer.privacy_spent(DELTA).upper
    assert ledger.spent == PLDAccountant().compose(optimizer.step_event, 6).epsilon(DELTA).upper


def test_resuming_with_a_ledger_does_not_charge_the_history_again(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    model, optimizer, loader = _setup(1, ledger=ledger, reserve_steps=5)
    _steps(model, optimizer, loader, 5)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    fresh_model, fresh_optimizer, fresh_loader = _setup(2, ledger=ledger, reserve_steps=5)
    fresh_model.load_state_dict(checkpoint["model"])
    fresh_optimizer.load_state_dict(checkpoint["optimizer"])
    assert len(ledger.entries()) == 1  # loading charged nothing
    _steps(fresh_model, fresh_optimizer, fresh_loader, 5)
    assert len(ledger.entries()) == 2
    ten = PLDAccountant().compose(optimizer.step_event, 10).epsilon(DELTA)
    assert fresh_optimizer.privacy_spent(DELTA) == ten
    assert ledger.spent == ten.upper


def test_bad_ledger_or_filter_arguments_are_refused(tmp_path: Path) -> None:
    spend = PrivacyFilter(Budget(epsilon=1.0, delta=DELTA))
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=1.0, delta=DELTA))
    with pytest.raises(ValueError, match="ledger, filter must be at most one given"):
        _setup(ledger=ledger, filter=spend)
    with pytest.raises(TypeError, match="ledger must be a gaussdp.Ledger"):
        _setup(ledger=str(tmp_path / "budget.db"))
    with pytest.raises(ValueError, match="noise_multiplier must be > 0 with a ledger"):
        _setup(noise_multiplier=0.0, filter=spend)
    with pytest.raises(ValueError, match="reserve_steps must be"):
        _setup(filter=spend, reserve_steps=0)
    assert spend.spent == 0
    assert ledger.entries() == []


def test_aggregator_round_is_charged_and_refused_before_noise() -> None:
    agg = DPAggregator(1.0, 1.5, dim=4, rng=ChaCha20Random(0), filter=PrivacyFilter(rho=0.5))
    agg.aggregate([torch.ones(4)])  # ρ ≈ 0.222 (the lattice's ρ, below the Gaussian's)
    agg.aggregate([torch.ones(4)])
    with pytest.raises(BudgetExceededError, match="the next federated round costs ρ = "):
        agg.aggregate([torch.ones(4)])
    assert agg.rounds == 2


def test_a_bad_update_is_refused_before_the_round_is_charged(tmp_path: Path) -> None:
    spend = PrivacyFilter(Budget(epsilon=5.0, delta=DELTA))
    agg = DPAggregator(1.0, 2.0, dim=4, rng=ChaCha20Random(0), filter=spend)
    with pytest.raises(ValueError, match=r"updates\[1\].numel\(\) must be 4, got 5"):
        agg.aggregate([torch.zeros(4), torch.zeros(5)])
    with pytest.raises(TypeError, match=r"updates\[0\] must be a torch.Tensor"):
        agg.aggregate([[0.0] * 4])
    assert (spend.spent, agg.rounds) == (0, 0)
    # A NaN update is a data value, not bad input: the round runs (and is charged).
    agg.aggregate([torch.tensor([math.nan, 0.0, 0.0, 0.0])])
    assert agg.rounds == 1
    assert spend.spent == agg.privacy_spent(DELTA).upper > 0
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=1.0))
    ddg = DistributedDiscreteGaussian(
        1.0, 2.0, num_clients=2, dim=8, rng=ChaCha20Random(0), ledger=ledger
    )
    with pytest.raises(ValueError, match=r"updates\[1\].numel\(\) must be 8, got 3"):
        ddg.aggregate([torch.zeros(8), torch.zeros(3)])
    assert ledger.entries() == []
    assert ddg.rounds == 0


def test_a_complex_update_is_refused_before_the_round_is_charged(tmp_path: Path) -> None:
    # Once: DPAggregator charged the round, then cast the update to real inside it
    # (a warning, an error under filterwarnings=error, after the charge).
    spend = PrivacyFilter(Budget(epsilon=5.0, delta=DELTA))
    agg = DPAggregator(1.0, 2.0, dim=4, rng=ChaCha20Random(0), filter=spend)
    complex_update = torch.ones(4, dtype=torch.complex64)
    refused = r"updates\[1\].dtype must be real \(floating point, integer or bool\), got "
    with pytest.raises(TypeError, match=refused + "torch.complex64"):
        agg.aggregate([torch.zeros(4), complex_update])
    assert (spend.spent, agg.rounds) == (0, 0)
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=1.0))
    ddg = DistributedDiscreteGaussian(
        1.0, 2.0, num_clients=2, dim=8, rng=ChaCha20Random(0), ledger=ledger
    )
    with pytest.raises(TypeError, match=refused + "torch.complex128"):
        ddg.aggregate([torch.zeros(8), torch.zeros(8, dtype=torch.complex128)])
    assert ledger.entries() == []
    assert ddg.rounds == 0


@pytest.mark.parametrize("kind", ["central", "distributed"])
def test_a_meta_or_sparse_update_is_refused_before_the_round_is_charged(kind: str) -> None:
    # Once: a meta tensor passed the checks, the round was charged (ε 4.4 or ρ 0.5),
    # then torch.stack (central) or .numpy() (distributed) raised inside it.
    spend = PrivacyFilter(Budget(epsilon=10.0, delta=DELTA))
    agg: DPAggregator | DistributedDiscreteGaussian
    if kind == "central":
        agg = DPAggregator(1.0, 1.0, dim=8, rng=ChaCha20Random(0), filter=spend)
    else:
        agg = DistributedDiscreteGaussian(
            1.0, 1.0, num_clients=2, dim=8, rng=ChaCha20Random(0), filter=spend
        )
    meta = r"updates\[1\].device must be a device holding data \(not meta\), got "
    with pytest.raises(ValueError, match=meta + r"device\(type='meta'\)"):
        agg.aggregate([torch.ones(8), torch.empty(8, device="meta")])
    sparse = r"updates\[0\] must be a dense, non-quantized tensor, got a torch.Tensor"
    with pytest.raises(TypeError, match=sparse):
        agg.aggregate([torch.ones(8).to_sparse(), torch.ones(8)])
    assert (spend.spent, agg.rounds) == (0, 0)
    agg.aggregate([torch.ones(8), torch.ones(8)])  # the next good round runs
    assert agg.rounds == 1
    assert spend.spent > 0


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.bool])
def test_integer_updates_are_taken_as_float64(dtype: torch.dtype) -> None:
    # Once: DPAggregator charged the round, then failed on an integer update.
    values = torch.tensor([1, 0, 1, 1]).to(dtype)
    agg = DPAggregator(10.0, 1e-6, dim=4, rng=ChaCha20Random(0))
    out = agg.aggregate([values, values])
    torch.testing.assert_close(out, 2 * values.to(torch.float32), rtol=0, atol=1e-3)
    ddg = DistributedDiscreteGaussian(1.0, 1.0, num_clients=2, dim=4, rng=ChaCha20Random(0))
    same = DistributedDiscreteGaussian(1.0, 1.0, num_clients=2, dim=4, rng=ChaCha20Random(0))
    as_float = values.to(torch.float64)
    assert torch.equal(ddg.aggregate([values, values]), same.aggregate([as_float, as_float]))


def test_distributed_discrete_gaussian_charges_its_rho(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=1.0))
    ddg = DistributedDiscreteGaussian(
        1.0, 2.0, num_clients=3, dim=8, rng=ChaCha20Random(0), ledger=ledger
    )
    assert ddg.round_event == RecordedCost(rho=ddg.rho, mu=None, slack=0.0, delta=0.0)
    ddg.aggregate([torch.full((8,), 0.1) for _ in range(3)])
    (entry,) = ledger.entries()
    assert entry.status == "committed"
    assert entry.event == ddg.round_event
    assert ledger.spent == ZCDPAccountant().compose(ddg.round_event).rho
    # An (ε, δ) budget takes it through zCDP (no PLD exists for a sum of discrete Gaussians).
    spend = PrivacyFilter(epsilon=5.0, delta=DELTA)
    other = DistributedDiscreteGaussian(
        1.0, 2.0, num_clients=3, dim=8, rng=ChaCha20Random(1), filter=spend
    )
    other.aggregate([torch.full((8,), 0.1) for _ in range(3)])
    assert spend.spent == ZCDPAccountant().compose(other.round_event).epsilon(DELTA).upper
    assert spend.spent == other.privacy_spent(DELTA).upper


def _in_threads(work, threads: int = 4) -> None:  # type: ignore[no-untyped-def]
    """Run ``work`` in several threads at once, switching between them as often as possible."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    finally:
        sys.setswitchinterval(interval)


def test_an_aggregator_shared_by_threads_charges_every_round() -> None:
    # Once: 4 threads x 200 rounds released 800 rounds and charged 790 (two threads
    # passed the check for the last paid round of a block).
    spend = PrivacyFilter(Budget(mu=1000.0))
    agg = DPAggregator(1.0, 5.0, dim=4, rng=ChaCha20Random(0), filter=spend)
    released: list[int] = []

    def work() -> None:
        for _ in range(100):
            agg.aggregate([torch.ones(4)])
            released.append(1)

    _in_threads(work)
    assert len(released) == agg.rounds == spend.accountant.count == 400


def _charger(ledger: Ledger | None, block: int) -> Charger:
    """A charger of runs of ρ = 0.01 each on ``ledger`` (None: nowhere), ``block`` at once."""
    event = RecordedCost(rho=0.01, mu=None, slack=0.0, delta=0.0)
    return Charger(
        event, ledger=ledger, filter=None, block=block, label="test", what="run", detail={}
    )


def test_a_charger_shared_by_threads_commits_every_run_to_the_ledger(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=1000.0))
    charger = _charger(ledger, block=3)
    taken: list[int] = []

    def work() -> None:
        for _ in range(50):
            with charger.run():
                taken.append(1)

    _in_threads(work)
    charger.close()
    entries = ledger.entries()
    assert all(e.status == "committed" for e in entries)
    assert sum(e.detail["runs"] if e.detail else 0 for e in entries) >= len(taken) == 200
    assert ledger.spent == pytest.approx(0.01 * 200, rel=1e-12)


class _FailingSGD(torch.optim.SGD):
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        raise RuntimeError("inner optimizer failed")


def test_a_step_whose_wrapped_optimizer_raises_after_the_noise_is_charged(tmp_path: Path) -> None:
    # Once: the noisy gradient was in param.grad when the wrapped optimizer raised, and the
    # step was neither counted by the charger nor accounted: 50 noisy gradients, ε = 0.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    model, optimizer, loader = _setup(ledger=ledger, reserve_steps=2)
    optimizer._optimizer = _FailingSGD(model.module.parameters(), lr=0.1)
    batches = iter(loader)
    for _ in range(3):
        optimizer.zero_grad()
        model.backward(*next(batches))  # each batch stepped on once
        with pytest.raises(RuntimeError, match="inner optimizer failed"):
            optimizer.step()
        assert model.module.weight.grad is not None  # the noisy gradient was released
    assert optimizer.steps == 3
    three = PLDAccountant().compose(optimizer.step_event, 3).epsilon(DELTA)
    assert optimizer.privacy_spent(DELTA) == three
    optimizer.close()
    assert [(e.status, e.event) for e in ledger.entries()] == [
        ("committed", SelfComposed(optimizer.step_event, 2)),
        ("committed", optimizer.step_event),
    ]
    assert ledger.spent == three.upper


def test_a_run_whose_body_raises_is_counted_and_a_refusal_is_not(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=0.025))
    charger = _charger(ledger, block=1)
    for _ in range(2):
        with pytest.raises(KeyError), charger.run():
            raise KeyError("after the draw")
    with pytest.raises(BudgetExceededError), charger.run():
        pytest.fail("a refused run has no body")
    assert [e.status for e in ledger.entries()] == ["committed", "committed"]
    assert ledger.spent == pytest.approx(0.02, rel=1e-12)


def test_close_inside_a_step_is_refused_and_the_step_counts(tmp_path: Path) -> None:
    # Once: close() from a step hook committed the block without the step in progress
    # (the charger's RLock let it in) and left -1 runs paid.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    model, optimizer, loader = _setup(ledger=ledger, reserve_steps=10)
    _steps(model, optimizer, loader, 2)
    hook = optimizer._optimizer.register_step_post_hook(lambda *_: optimizer.close())
    x, y = next(iter(loader))
    optimizer.zero_grad()
    model.backward(x, y)
    with pytest.raises(RuntimeError, match="close\\(\\) cannot be called during a DP-SGD step"):
        optimizer.step()
    hook.remove()
    assert optimizer.steps == 3
    optimizer.close()
    assert [(e.status, e.event) for e in ledger.entries()] == [
        ("committed", SelfComposed(optimizer.step_event, 3))
    ]
    assert ledger.spent == optimizer.privacy_spent(DELTA).upper


def test_a_reassigned_parameter_is_refused_before_the_step_is_charged() -> None:
    # Once: a bare KeyError from the clipped sum (the new parameter was never clipped).
    spend = PrivacyFilter(Budget(epsilon=5.0, delta=DELTA))
    model, optimizer, loader = _setup(filter=spend)
    x, y = next(iter(loader))
    optimizer.zero_grad()
    nnf.cross_entropy(model(x), y).backward()
    net = model.module
    net.weight = nn.Parameter(net.weight.detach().clone())
    message = "the model's parameters must be the trainable parameters given to make_private"
    with pytest.raises(ValueError, match=message):
        optimizer.step()
    with pytest.raises(ValueError, match=message):
        model.backward(x, y)
    with pytest.raises(ValueError, match=message):
        model(x)
    assert (spend.spent, optimizer.steps) == (0, 0)


def test_a_replaced_submodule_is_refused_and_a_moved_parameter_kept() -> None:
    # check_params looks each parameter up where make_private found it first: a layer
    # replaced whole (its old parameters still held by the old layer) is refused too,
    # and a parameter registered elsewhere in the model still counts, as before.
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model, optimizer, _ = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.1),
        DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        delta=DELTA,
        rng=ChaCha20Random(0),
    )
    engine = model._engine
    first = net[0]
    net[0] = nn.Linear(4, 3)
    with pytest.raises(ValueError, match="the model's parameters must be the trainable"):
        engine.check_params()
    net[0] = nn.Sequential(first)  # the same parameters, one level deeper
    engine.check_params()
    assert optimizer.steps == 0


def _in_child(work) -> int:  # type: ignore[no-untyped-def]
    """Run ``work`` in a forked child; its exit status: 0 if it returned, 1 if it raised."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        try:
            work()
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_reserves_its_own_block_not_the_parents(tmp_path: Path) -> None:
    # Once: the child took 5 runs on the parent's reserved block of 10 and committed it
    # (6 runs), the parent took 5 more on it and its close() failed: 11 runs, 6 charged.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=1000.0))
    charger = _charger(ledger, block=10)

    def runs(count: int) -> None:
        for _ in range(count):
            with charger.run():
                pass

    runs(1)
    assert _in_child(lambda: (runs(5), charger.close())) == 0
    runs(5)
    charger.close()
    entries = ledger.entries()
    assert all(e.status == "committed" for e in entries)
    assert sorted(e.event.count for e in entries if isinstance(e.event, SelfComposed)) == [5, 6]
    assert ledger.spent == pytest.approx(0.01 * 11, rel=1e-12)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_from_inside_a_run_can_close_after_it(tmp_path: Path) -> None:
    # Once: the at-fork hook cleared the count of runs in progress although the forking
    # thread was inside one; leaving it made the count -1 in the child, and close()
    # was refused there for good.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=1000.0))
    charger = _charger(ledger, block=4)
    pid = -1
    with charger.run():
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            try:
                with pytest.raises(RuntimeError, match="cannot be called during a run"):
                    charger.close()
            except BaseException:
                os._exit(1)
    if pid == 0:  # pragma: no cover
        try:
            charger.close()
            with charger.run():
                pass
            charger.close()
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    charger.close()
    assert ledger.spent == pytest.approx(0.01 * 2, rel=1e-12)  # the parent's run, the child's


def _fork_inside_runs(charger: Charger) -> list[int]:
    """Make ``charger``'s runs fork once paid for, before their body (their noise): the
    fork ids, 0 in the child. The child's runs are the charger's own again."""
    real, forks = charger.run, []

    @contextlib.contextmanager
    def forking() -> Iterator[None]:
        with real():
            forks.append(os.fork())
            if forks[-1] == 0:  # pragma: no cover - the child's coverage is not collected
                charger.run = real  # type: ignore[method-assign]
            yield

    charger.run = forking  # type: ignore[method-assign]
    return forks


def _child_checks(forks: list[int], error: BaseException | None, checks) -> int:  # type: ignore[no-untyped-def]
    """In the child (``forks[-1] == 0``): exit 0 if ``checks(error)`` passes, else 1. In
    the parent: the child's exit status."""
    if forks[-1] == 0:  # pragma: no cover - the child's coverage is not collected
        signal.alarm(60)  # the child dies of SIGALRM if it blocks
        try:
            checks(error)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(forks[-1], 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_inside_a_paid_step_cannot_draw_its_noise(tmp_path: Path) -> None:
    # Once (note 24): a thread forking from inside its own step under a non-seeded source
    # continued that step in the child, uncharged: parent and child each released noisy
    # gradients of one Poisson sample for one paid step. Now the child's draw is refused;
    # the child may take steps of its own, each charged to the shared ledger.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    model, optimizer, loader = _setup(rng=None, ledger=ledger, reserve_steps=1)
    forks = _fork_inside_runs(optimizer._charger)
    weights = model.module.weight.detach().clone()
    batches = iter(loader)
    x, y = next(batches)
    optimizer.zero_grad()
    model.backward(x, y)
    error: BaseException | None = None
    try:
        optimizer.step()
    except RuntimeError as caught:
        error = caught

    def child(error: BaseException | None) -> None:
        torch.set_num_threads(1)  # torch's OpenMP pool does not survive a fork (ml.md)
        assert error is not None
        assert str(error).startswith(
            "os.fork() must be called outside a DP-SGD step for the child to draw noise"
        )
        assert torch.equal(model.module.weight, weights)  # nothing released here
        with pytest.raises(RuntimeError, match="must follow loss.backward"):
            optimizer.step()  # the parent's sums are not released again either
        optimizer.zero_grad()
        model.backward(*next(batches))  # a batch of the child's own
        optimizer.step()  # the child's own step: paid by the child
        optimizer.close()

    assert _child_checks(forks, error, child) == 0
    assert error is None
    assert not torch.equal(model.module.weight, weights)
    optimizer.close()
    step = optimizer.step_event
    entries = ledger.entries()
    assert [(e.status, e.event) for e in entries] == [("committed", step)] * 2


FOREIGN_SUMS = (
    r"optimizer\.step\(\) must be called in the process that drew the batch and "
    r"computed its clipped sums \(.*\), got 'sums of process \d+ in process \d+'$"
)


def _backward(model, x, y, path: str) -> None:  # type: ignore[no-untyped-def]
    """The clipped sums of (x, y) for the next step, by ``path``."""
    if path == "idiom":
        nnf.cross_entropy(model(x), y).backward()
    else:
        model.backward(x, y)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("spender", ["ledger", "filter", "none"])
@pytest.mark.parametrize("path", ["idiom", "fast"])
def test_clipped_sums_forked_before_the_step_are_released_only_where_computed(
    tmp_path: Path, spender: str, path: str
) -> None:
    # Once (note 25): a process forked after backward but before step held the parent's
    # clipped sums; parent and child each released them and each charged one subsampled
    # step (two ledger entries, each Subsampled(..., q)), but two releases of one
    # Poisson sample are not two independently subsampled steps: the ledger under-counts
    # (under a seed the two releases even had the same noise). Now the child's step is
    # refused before any charge or draw and the sums are dropped there; a batch the
    # child draws itself, and its own backward, make a step of its own.
    total = Budget(epsilon=50.0, delta=DELTA)
    ledger = Ledger(tmp_path / "budget.db", total=total) if spender == "ledger" else None
    spend = PrivacyFilter(total) if spender == "filter" else None
    rng = ChaCha20Random(3) if spender == "none" else None  # the seeded case: same noise
    model, optimizer, loader = _setup(rng=rng, ledger=ledger, filter=spend, reserve_steps=1)
    batches = iter(loader)
    x, y = next(batches)
    optimizer.zero_grad()
    _backward(model, x, y, path)
    weights = model.module.weight.detach().clone()

    def child() -> None:
        torch.set_num_threads(1)  # torch's OpenMP pool does not survive a fork (ml.md)
        with pytest.raises(RuntimeError, match=FOREIGN_SUMS):
            optimizer.step()
        assert torch.equal(model.module.weight, weights)  # nothing released here
        assert optimizer.steps == 0
        assert spend is None or spend.spent == 0
        with pytest.raises(RuntimeError, match="must follow loss.backward"):
            optimizer.step()  # the sums were dropped, not kept for a later step
        _backward(model, x, y, path)  # the parent's batch again: still the parent's sample
        with pytest.raises(RuntimeError, match=FOREIGN_SUMS):
            optimizer.step()
        assert optimizer.steps == 0
        if spender == "filter":
            return  # an in-memory filter pays for nothing in a child (tested below)
        mine_x, mine_y = next(batches)  # a batch of the child's own
        optimizer.zero_grad()
        _backward(model, mine_x, mine_y, path)
        optimizer.step()
        optimizer.close()
        assert optimizer.steps == 1
        assert not torch.equal(model.module.weight, weights)

    assert _in_child(child) == 0
    if ledger is not None:  # the child's own step only
        assert [e.event for e in ledger.entries()] == [optimizer.step_event]
    assert (optimizer.steps, spend.spent if spend else 0) == (0, 0)
    optimizer.step()  # the parent releases its sums
    optimizer.close()
    assert optimizer.steps == 1
    assert not torch.equal(model.module.weight, weights)
    if ledger is not None:
        assert [e.event for e in ledger.entries()] == [optimizer.step_event] * 2
    if spend is not None:
        assert spend.accountant.count == 1


OTHER_BATCH = (
    r"optimizer\.step\(\) must be called once per batch, on the sums of the data loader's "
    r"last batch in this process \(.*\), got '{}'$"
)


def _forked(work) -> int:  # type: ignore[no-untyped-def]
    """Run ``work`` in a child of the multiprocessing 'fork' context; its exit code."""
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=work)
    child.start()
    child.join(120)
    return child.exitcode  # type: ignore[return-value]


@pytest.mark.skipif(sys.platform != "linux", reason="the 'fork' start method on Linux")
@pytest.mark.parametrize("path", ["idiom", "fast"])
@pytest.mark.parametrize("view", [False, True])
def test_a_child_that_draws_a_batch_cannot_step_on_its_parents_tensors(
    tmp_path: Path, path: str, view: bool
) -> None:
    # Once (note 26): the fork rule was "the last batch drawn in this process". A child
    # forked after its parent drew a batch that drew one of its own and ran backward on
    # the parent's tensors stepped on them: parent and child each released the
    # parent's Poisson sample, each charged as an independently subsampled step. The
    # loader now tags each batch's tensors; the step is refused before any charge or
    # draw, the sums dropped, and the child's own batch still makes a step.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    model, optimizer, loader = _setup(rng=None, ledger=ledger, reserve_steps=1)
    batches = iter(loader)
    x, y = next(batches)  # the parent's batch
    weights = model.module.weight.detach().clone()
    message = OTHER_BATCH.format(
        "sums of a batch other than the last the data loader handed out in this process"
    )

    def child() -> None:
        torch.set_num_threads(1)  # torch's OpenMP pool does not survive a fork (ml.md)
        mine = next(batches)  # the child's own batch
        optimizer.zero_grad()
        _backward(model, x[:7] if view else x, y[:7] if view else y, path)
        with pytest.raises(RuntimeError, match=message):
            optimizer.step()
        assert torch.equal(model.module.weight, weights)  # nothing released here
        assert optimizer.steps == 0
        assert ledger.entries() == []
        with pytest.raises(RuntimeError, match="must follow loss.backward"):
            optimizer.step()  # the sums were dropped
        optimizer.zero_grad()
        _backward(model, *mine, path)
        optimizer.step()  # the child's own batch: a step of its own
        optimizer.close()
        assert optimizer.steps == 1

    assert _forked(child) == 0
    assert [e.event for e in ledger.entries()] == [optimizer.step_event]  # the child's
    optimizer.zero_grad()
    _backward(model, x, y, path)
    optimizer.step()  # the parent releases its own batch
    optimizer.close()
    assert [e.event for e in ledger.entries()] == [optimizer.step_event] * 2


@pytest.mark.parametrize("path", ["idiom", "fast"])
def test_each_batch_is_stepped_on_once_in_the_order_drawn(path: str) -> None:
    """One process: a batch stepped on twice, or an earlier batch, would be released twice
    or outside its turn; two batches summed into one step would count one example twice."""
    model, optimizer, loader = _setup()
    batches = iter(loader)
    first, second = next(batches), next(batches)
    weights = model.module.weight.detach().clone()
    for data, got in [
        ([first], "sums of a batch other than the last the data loader handed out in this process"),
        ([first, second], "sums of 2 batches of the data loader"),
    ]:
        optimizer.zero_grad()
        for x, y in data:
            _backward(model, x, y, path)
        with pytest.raises(RuntimeError, match=OTHER_BATCH.format(got)):
            optimizer.step()
    assert optimizer.steps == 0
    assert torch.equal(model.module.weight, weights)
    optimizer.zero_grad()
    _backward(model, *second, path)
    optimizer.step()
    optimizer.zero_grad()
    _backward(model, *second, path)
    with pytest.raises(
        RuntimeError, match=OTHER_BATCH.format("sums of a batch a step already released")
    ):
        optimizer.step()
    assert optimizer.steps == 1
    x, y = next(batches)
    optimizer.zero_grad()
    for part in (slice(0, 3), slice(3, None)):  # accumulation over views of one batch
        _backward(model, x[part], y[part], path)
    optimizer.step()
    assert optimizer.steps == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_childs_own_sums_mixed_with_inherited_ones_are_refused(tmp_path: Path) -> None:
    # Gradient accumulation across the fork: the child's own batch added to the
    # parent's sums, or to a gradient captured in the child for the parent's forward
    # call, still releases the parent's sample.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    model, optimizer, loader = _setup(rng=None, ledger=ledger, reserve_steps=1)
    batches = iter(loader)
    x, y = next(batches)
    optimizer.zero_grad()
    model.backward(x, y)

    def own_batch_and(inherited) -> None:  # type: ignore[no-untyped-def]
        torch.set_num_threads(1)  # torch's OpenMP pool does not survive a fork (ml.md)
        mine_x, mine_y = next(batches)
        model.backward(mine_x, mine_y)
        inherited()
        with pytest.raises(RuntimeError, match=FOREIGN_SUMS):
            optimizer.step()
        optimizer.zero_grad()
        model.backward(mine_x, mine_y)
        optimizer.step()  # the child's own batch alone
        optimizer.close()

    assert _in_child(lambda: own_batch_and(lambda: None)) == 0
    optimizer.zero_grad()
    out = model(x)  # the parent's forward call, its backward in the child
    assert _in_child(lambda: own_batch_and(lambda: nnf.cross_entropy(out, y).backward())) == 0
    assert [e.event for e in ledger.entries()] == [optimizer.step_event] * 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_clients_sampled_before_a_fork_are_aggregated_only_where_sampled(tmp_path: Path) -> None:
    # The federated form of the gap above: parent and child each aggregated the
    # clients the parent sampled, each round charged as one subsampled round.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    agg = DPAggregator(1.0, 1.0, dim=4, client_rate=0.5, ledger=ledger)
    chosen = agg.sample_clients(10)
    updates = [torch.ones(4) for _ in chosen]
    refused = (
        r"aggregate\(\) must be called in the process that drew the round's clients "
        r"\(.*call sample_clients\(\) in the child first\), "
        r"got 'clients of process \d+ in process \d+'$"
    )

    def child() -> None:
        with pytest.raises(RuntimeError, match=refused):
            agg.aggregate(updates)
        assert agg.rounds == 0
        assert ledger.entries() == []
        mine = agg.sample_clients(10)  # the child's own sample: its own round
        agg.aggregate([torch.ones(4) for _ in mine])
        assert agg.rounds == 1

    assert _in_child(child) == 0
    agg.aggregate(updates)  # the parent's round of its sample
    assert [e.event for e in ledger.entries()] == [agg.round_event] * 2
    # With every client in every round there is no sample to repeat: not refused.
    full = DPAggregator(1.0, 1.0, dim=4, ledger=ledger)
    full.sample_clients(3)
    assert _in_child(lambda: full.aggregate([torch.ones(4)] * 3)) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["aggregator", "ddg"])
def test_a_child_forked_inside_a_paid_round_cannot_draw_its_noise(
    tmp_path: Path, kind: str
) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=1000.0))
    if kind == "aggregator":
        agg: DPAggregator | DistributedDiscreteGaussian = DPAggregator(
            1.0, 1.0, dim=4, ledger=ledger
        )
    else:
        agg = DistributedDiscreteGaussian(1.0, 1.0, num_clients=2, dim=4, ledger=ledger)
    forks = _fork_inside_runs(agg._charger)
    updates = [torch.ones(4), torch.ones(4)]
    error: BaseException | None = None
    try:
        agg.aggregate(updates)
    except RuntimeError as caught:
        error = caught

    def child(error: BaseException | None) -> None:
        assert error is not None
        assert str(error).startswith(
            "os.fork() must be called outside a federated round for the child to draw noise"
        )
        assert agg.aggregate(updates).shape == (4,)  # the child's own round: charged

    assert _child_checks(forks, error, child) == 0
    assert error is None
    agg._charger.close()
    entries = ledger.entries()
    assert [(e.status, e.event) for e in entries] == [("committed", agg.round_event)] * 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_childs_own_runs_inside_an_inherited_run_may_draw(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(rho=1000.0))
    charger = _charger(ledger, block=1)
    refused = r"os\.fork\(\) must be called outside a run for the child to draw noise"
    forks = _fork_inside_runs(charger)

    def child(_: object) -> None:
        with pytest.raises(RuntimeError, match=refused):
            charger.check_draw()
        with charger.run():  # a run the child begins, nested: its own, paid
            charger.check_draw()
        with pytest.raises(RuntimeError, match=refused):
            charger.check_draw()  # back in the parent's run

    with charger.run():
        assert _child_checks(forks, None, child) == 0
        charger.check_draw()  # the parent's own run
    charger.close()
    assert ledger.spent == pytest.approx(0.01 * 2, rel=1e-12)  # the parent's run, the child's
    # Without a ledger or filter nothing is charged anywhere, and nothing is refused.
    free = _charger(None, block=1)
    with free.run():
        assert _in_child(free.check_draw) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_an_in_memory_filter_refuses_in_a_forked_child() -> None:
    # A filter is process memory: a child's spends would not reach the parent's copy.
    spend = PrivacyFilter(Budget(mu=1000.0))
    # Not seeded: under a seed the seeded-stream refusal would come first.
    agg = DPAggregator(1.0, 5.0, dim=4, filter=spend)
    agg.aggregate([torch.ones(4)])

    def child() -> None:
        with pytest.raises(RuntimeError, match="PrivacyFilter cannot pay .* in a forked process"):
            agg.aggregate([torch.ones(4)])
        assert agg.rounds == 1

    assert _in_child(child) == 0
    agg.aggregate([torch.ones(4)])  # the parent's own filter still pays
    assert agg.rounds == spend.accountant.count == 2


def test_ddg_releases_only_through_aggregate_which_charges_every_round() -> None:
    # Once: the public encode / secure_sum / decode released 50 noisy sums with nothing
    # charged and rounds == 0, and secure_sum took a single client's message (1/n of
    # the noise variance the round's rho assumes).
    spend = PrivacyFilter(Budget(rho=1000.0))
    ddg = DistributedDiscreteGaussian(
        1.0, 1.0, num_clients=3, dim=8, rng=ChaCha20Random(0), filter=spend
    )
    assert not any(hasattr(ddg, name) for name in ("encode", "secure_sum", "decode"))
    for _ in range(4):
        ddg.aggregate([torch.full((8,), 0.1) for _ in range(3)])
    assert ddg.rounds == spend.accountant.count == 4
    with pytest.raises(ValueError, match="len\\(updates\\) must be at least num_clients = 3"):
        ddg.aggregate([torch.full((8,), 0.1)])
    assert ddg.rounds == spend.accountant.count == 4


class _Deterministic(RandomSource):
    """A user-defined source that is deterministic but not marked reproducible."""

    def __init__(self, seed: int) -> None:
        self._generator = np.random.default_rng(seed)

    def random_bytes(self, n: int) -> bytes:
        return self._generator.bytes(n)


def _child_output(work, path: Path) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The float32 vector ``work()`` returns in a forked child (written to ``path``)."""
    assert _in_child(lambda: path.write_bytes(work().numpy().tobytes())) == 0
    return np.frombuffer(path.read_bytes(), np.float32)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_ddg_siblings_forked_with_a_deterministic_user_source_draw_different_noise(
    tmp_path: Path,
) -> None:
    # Once: the clients' keys were read from the user's source itself, in the same
    # state in both children: the same noise, which cancels in their difference.
    ddg = DistributedDiscreteGaussian(
        1.0, 1.0, num_clients=2, dim=4, bits=16, rng=_Deterministic(1)
    )
    zeros = [torch.zeros(4), torch.zeros(4)]
    first, second = (
        _child_output(lambda: ddg.aggregate(zeros), tmp_path / f"{i}.bin") for i in range(2)
    )
    assert first.size == second.size == 4
    assert not np.array_equal(first, second)
    assert not np.array_equal(ddg.aggregate(zeros).numpy(), first)


def _seeded_runs(kind: str, ledger: Ledger):  # type: ignore[no-untyped-def]
    """Under ChaCha20Random(7): what to do before a release, a charged release, its count.

    The DP-SGD step's backward pass runs before it, on a batch drawn there (a forked
    child's step on its parent's batch or sums is refused before the seed is checked).
    """
    if kind == "central":
        agg = DPAggregator(1.0, 1.0, dim=4, rng=ChaCha20Random(7), ledger=ledger)
        return lambda: None, lambda: agg.aggregate([torch.ones(4)]), lambda: agg.rounds
    if kind == "distributed":
        ddg = DistributedDiscreteGaussian(
            1.0, 1.0, num_clients=2, dim=4, bits=16, rng=ChaCha20Random(7), ledger=ledger
        )
        return lambda: None, lambda: ddg.aggregate([torch.ones(4)] * 2), lambda: ddg.rounds
    model, optimizer, loader = _setup(seed=7, ledger=ledger, reserve_steps=1)
    batches = iter(loader)

    def backward() -> None:
        optimizer.zero_grad()
        model.backward(*next(batches))

    return backward, optimizer.step, lambda: optimizer.steps


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["central", "distributed", "dpsgd"])
def test_a_seeded_release_with_a_ledger_is_refused_in_a_forked_child(
    kind: str, tmp_path: Path
) -> None:
    # Once: parent and child each released one round of the same noise on different
    # data, and the ledger charged two independent rounds (their difference was exact).
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=1000.0, delta=DELTA))
    prepare, release, runs = _seeded_runs(kind, ledger)
    prepare()
    release()
    spent = ledger.spent
    prepare()

    def child() -> None:
        torch.set_num_threads(1)  # torch's OpenMP pool does not survive a fork (ml.md)
        prepare()  # the child's own batch and backward
        with pytest.raises(
            RuntimeError,
            match=r"rng must be unseeded \(None, the operating system's source\) for a "
            r"charged .* outside the process that made the seeded stream and the object "
            r"that charges \(a forked process repeats .*\), got _?\w*\(?ChaCha20Random\(7\)",
        ):
            release()
        assert runs() == 1
        assert ledger.spent == spent

    assert _in_child(child) == 0
    assert ledger.spent == spent
    release()  # the parent, which the seed belongs to, still releases
    assert runs() == 2


def _built_in_child(kind: str, rng: ChaCha20Random, ledger: Ledger):  # type: ignore[no-untyped-def]
    """A charged release of an object built now (in the child) on the parent's ``rng``.

    "dpsgd" is the charger make_private builds, on a stream derived from ``rng`` (a
    backward pass does not survive a fork after the parent's).
    """
    if kind == "central":
        agg = DPAggregator(1.0, 1.0, dim=4, rng=rng, ledger=ledger)
        return lambda: agg.aggregate([torch.ones(4)])
    if kind == "distributed":
        ddg = DistributedDiscreteGaussian(
            1.0, 1.0, num_clients=2, dim=4, bits=16, rng=rng, ledger=ledger
        )
        return lambda: ddg.aggregate([torch.ones(4)] * 2)
    event = RecordedCost(rho=0.01, mu=None, slack=0.0, delta=0.0)
    charger = Charger(
        event,
        ledger=ledger,
        filter=None,
        block=1,
        label="test",
        what="DP-SGD step",
        detail={},
        rng=_DerivedStream(rng),
    )

    def step() -> None:
        with charger.run():
            pass

    return step


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["central", "distributed", "dpsgd"])
def test_a_seeded_release_built_in_a_forked_child_on_the_parents_stream_is_refused(
    kind: str, tmp_path: Path
) -> None:
    # Once: only the process that built the aggregator was checked, so two children
    # forked from a parent holding ChaCha20Random(7) each built one on it and released
    # the same noise on neighbouring data, both charged (the difference was exact).
    path, total = tmp_path / "budget.db", Budget(epsilon=1000.0, delta=DELTA)
    ledger = Ledger(path, total=total)
    rng = ChaCha20Random(7)

    def child() -> None:
        release = _built_in_child(kind, rng, Ledger(path, total=total))
        with pytest.raises(
            RuntimeError,
            match="rng must be unseeded .* outside the process that made the seeded stream",
        ):
            release()

    assert [_in_child(child) for _ in range(2)] == [0, 0]
    assert ledger.spent == 0
    _built_in_child(kind, rng, ledger)()  # the process that made the stream releases
    assert ledger.spent > 0


class _NoHome(ChaCha20Random):
    """A seeded stream whose __init__ skips ChaCha20Random's: it records no home."""

    def __init__(self) -> None:
        _BufferedSource.__init__(self)
        self._seed = 7
        self._encryptor = _chacha20(_chacha_key(7))


@pytest.mark.parametrize("kind", ["central", "distributed", "dpsgd"])
def test_a_seeded_stream_of_unknown_or_reused_origin_is_refused(kind: str, tmp_path: Path) -> None:
    # A stream without a home fell back to the charger's process; a home compared by
    # process id alone passed in a later process that reused an exited ancestor's id.
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=1000.0, delta=DELTA))
    reused = ChaCha20Random(7)
    reused._home = (os.getpid(), b"an exited process")
    for rng, why in ((_NoHome(), "this stream does not record where"), (reused, "a forked")):
        with pytest.raises(RuntimeError, match=rf"^rng must be unseeded .* stream .*\({why}"):
            _built_in_child(kind, rng, ledger)()
    assert ledger.spent == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_another_process_even_with_its_parents_id() -> None:
    parent = _process_identity()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.write(write, _process_identity()[1])
        os._exit(0)
    os.waitpid(pid, 0)
    child_token = os.read(read, 64)
    os.close(read)
    os.close(write)
    assert child_token != parent[1]
    assert len(child_token) == len(parent[1])
    assert _process_identity() == parent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_a_thread_is_inside_a_round_can_aggregate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Once: the child inherited the charger's lock held by a thread that does not
    # exist in the child; its first aggregate() waited forever.
    import gaussdp.ml.federated as federated

    agg = DPAggregator(1.0, 1.0, dim=4)
    inside, leave = threading.Event(), threading.Event()
    clip = federated._clip_factor_rows

    def slow(rows: torch.Tensor, norm: float) -> torch.Tensor:
        inside.set()
        leave.wait()
        return clip(rows, norm)

    monkeypatch.setattr(federated, "_clip_factor_rows", slow)
    thread = threading.Thread(target=lambda: agg.aggregate([torch.ones(4)]))
    thread.start()
    inside.wait()
    try:

        def child() -> None:
            signal.alarm(20)  # the child dies of SIGALRM if the round blocks
            federated._clip_factor_rows = clip
            assert agg.aggregate([torch.ones(4)]).shape == (4,)

        assert _in_child(child) == 0
    finally:
        leave.set()
        thread.join()
    assert agg.rounds == 1
