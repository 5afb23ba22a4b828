"""Dropout masks of the private model: secret, from make_private's rng (gaussdp.ml._masks)."""

from __future__ import annotations

import os
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp.ml import make_private  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

CLIP = 1.0


def _data(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return 3 * torch.randn(n, 3, generator=gen), torch.randint(0, 2, (n,), generator=gen)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 2))


def _private(net: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int, mode: str):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # noise_multiplier=0: not private (a measurement)
        return make_private(
            net,
            torch.optim.SGD(net.parameters(), lr=0.0),
            DataLoader(TensorDataset(x, y), batch_size=x.shape[0]),  # q = 1
            loss_fn=nnf.cross_entropy,
            loss_reduction="sum",
            noise_multiplier=0.0,
            max_grad_norm=CLIP,
            delta=1e-5,
            rng=ChaCha20Random(seed),
            grad_sample_mode=mode,  # type: ignore[arg-type]
        )


def _clipped_sum(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    seed: int,
    mode: str,
    api: str = "idiom",
    weights: torch.Tensor | None = None,
    public_seed: int = 0,
) -> torch.Tensor:
    """The released sum of one step (σ = 0, q = 1), after the script's torch.manual_seed."""
    net = _net()
    model, optimizer, loader = _private(net, x, y, seed, mode)
    optimizer.zero_grad()
    # A step trains on the batch drawn last (q = 1: every example); drawn before the
    # seed, as torch's DataLoader takes its base seed from the global generator.
    next(iter(loader))
    torch.manual_seed(public_seed)  # what the adversary knows: the script's own seed
    if api == "backward":
        model.backward(x, y)
    else:
        per_example = nnf.cross_entropy(model(x), y, reduction="none")
        (per_example if weights is None else per_example * weights).sum().backward()
    optimizer.step()
    flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])  # type: ignore[union-attr]
    return flat.to(torch.float64) * optimizer.expected_batch_size


@pytest.mark.parametrize("api", ["idiom", "backward"])
@pytest.mark.parametrize("mode", ["auto", "functorch"])
def test_masks_come_from_make_privates_rng_not_from_the_scripts_seed(mode: str, api: str) -> None:
    # rev27-ml #4: the masks came from torch's global generator, which scripts seed
    # publicly, and went by position in the batch: with that seed known, removing one
    # example moved the sum by 4.48·C (batch 16). Now they come from make_private's rng.
    x, y = _data()
    before = torch.get_rng_state()
    a = _clipped_sum(x, y, seed=1, mode=mode, api=api)
    assert torch.equal(torch.get_rng_state(), torch.manual_seed(0).get_state())  # untouched
    b = _clipped_sum(x, y, seed=2, mode=mode, api=api)  # the same public seed, another rng
    c = _clipped_sum(x, y, seed=1, mode=mode, api=api, public_seed=5)
    assert not torch.allclose(a, b)  # the public seed does not give the masks away
    assert torch.equal(a, c)  # make_private's (seeded) rng alone decides them
    torch.set_rng_state(before)


@pytest.mark.parametrize("mode", ["auto", "functorch"])
def test_coupled_neighbours_differ_by_at_most_the_clip_norm(mode: str) -> None:
    # The argument of docs/ml.md ("Dropout and other random layers"): with secret masks,
    # i.i.d. over positions and independent of the data, D − i is coupled to D by
    # keeping every other example's mask. That coupling is run here: example i stays
    # in its position (so every example keeps its mask under the same secret state)
    # with other data and weight 0, and the sums must differ by at most C.
    x, y = _data()
    full = _clipped_sum(x, y, seed=3, mode=mode)
    worst = 0.0
    for i in range(x.shape[0]):
        other, weights = x.clone(), torch.ones(x.shape[0])
        other[i], weights[i] = -7.0, 0.0
        part = _clipped_sum(other, y, seed=3, mode=mode, weights=weights)
        worst = max(worst, float(torch.linalg.vector_norm(full - part)))
    assert 0.5 * CLIP < worst <= CLIP * (1 + 1e-6)


def test_each_training_pass_draws_fresh_masks() -> None:
    x, y = _data()
    outputs = []
    for _ in range(2):
        net = _net()
        model, _, _ = _private(net, x, y, 4, "auto")
        outputs.append([model(x).detach() for _ in range(2)])
    assert not torch.equal(outputs[0][0], outputs[0][1])  # two passes, two secret states
    assert all(torch.equal(a, b) for a, b in zip(*outputs, strict=True))  # seeded: replayed


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_process_draws_masks_of_its_own() -> None:
    from gaussdp.ml._masks import MaskStates
    from gaussdp.random import _DerivedStream, check_rng

    masks = MaskStates(_DerivedStream(check_rng(None)), torch.device("cpu"))
    masks.next()  # the parent has read states ahead
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next state, not the parent's next one
        try:
            os.write(write, masks.next()[0].numpy()[24:88].tobytes())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 64
    assert child != masks.next()[0].numpy()[24:88].tobytes()


def _key_net() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 4))


def test_keys_under_no_grad_in_training_mode_draw_secret_masks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rev28-ml #4: keys under torch.no_grad() in training mode (a per-example
    # stop-gradient target, SimSiam-style, dropout as the augmentation) drew their masks
    # from torch's publicly seeded generator, by position: removing the first example
    # shifted every later key's mask, 2.91·C. Now the key pass draws a secret state of
    # its own. The run on D − first is coupled to D as docs/ml.md argues: each secret
    # state is advanced past the first example's mask row, so every other example keeps
    # the masks it had, in the training pass and (now) in the key pass alike.
    from gaussdp.ml import _masks

    drawn = _masks.MaskStates.next
    shift = [False]

    def coupled(self: _masks.MaskStates) -> tuple[torch.Tensor, torch.Tensor | None]:
        state = drawn(self)
        if not shift[0]:
            return state
        saved = torch.get_rng_state()
        torch.set_rng_state(state[0])
        nnf.dropout(torch.ones(1, 16), 0.5)  # the first example's mask row, skipped
        advanced = torch.get_rng_state()
        torch.set_rng_state(saved)
        return advanced, state[1]

    monkeypatch.setattr(_masks.MaskStates, "next", coupled)
    gen = torch.Generator().manual_seed(0)
    x, y = 3 * torch.randn(8, 3, generator=gen), torch.zeros(8, dtype=torch.long)

    def clipped_sum(xs: torch.Tensor, ys: torch.Tensor, *, train_keys: bool) -> torch.Tensor:
        net = _key_net()
        model, optimizer, loader = _private(net, xs, ys, 0, "auto")
        optimizer.zero_grad()
        next(iter(loader))
        torch.manual_seed(0)  # the script's public seed
        q = model(xs)
        model.train(train_keys)
        with torch.no_grad():
            k = model(xs)
        model.train()
        ((q - k) ** 2).sum().backward()  # example i's term uses k[i] only
        optimizer.step()
        flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])  # type: ignore[union-attr]
        return flat.to(torch.float64) * optimizer.expected_batch_size

    for train_keys in (False, True):  # eval-mode keys (no dropout): the control
        full = clipped_sum(x, y, train_keys=train_keys)
        shift[0] = True
        part = clipped_sum(x[1:], y[1:], train_keys=train_keys)
        shift[0] = False
        assert float(torch.linalg.vector_norm(full - part)) <= CLIP * (1 + 1e-6)
    # The key pass leaves the caller's generator as it was.
    model, _, _ = _private(_key_net(), x, y, 0, "auto")
    before = torch.get_rng_state()
    with torch.no_grad():
        model(x)
    assert torch.equal(torch.get_rng_state(), before)
