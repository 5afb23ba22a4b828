"""Train a small CNN on scikit-learn's 8x8 digits with DP-SGD (ε = 3, δ = 1e-5).

Run with ``python examples/dpsgd_digits_cnn.py`` (needs the ``torch`` extra and
scikit-learn, which ships the 1,797 digit images); about half a minute on one CPU
core. The model (two 3x3 convolutions, GroupNorm and tanh, 1,914 parameters) is trained
in the PyTorch idiom — ``loss = F.cross_entropy(model(x), y); loss.backward();
optimizer.step()`` — on the objects ``make_private`` returns; its convolutions,
GroupNorm and linear layer all take gaussdp's ghost clipping (per-example norms from
each layer's activations, no per-example gradient of the whole model). σ is
calibrated before training so that the certified ε after the run is at most the
target; the run prints the test accuracy, the ε spent and a non-private reference
(same model and schedule, no clipping or noise).

Everything random in the private run (Poisson batches, the exact discrete Gaussian
noise) comes from ``ChaCha20Random(seed)``, so the numbers are reproducible; drop
``rng=`` to use the operating system's CSPRNG, as a real release should.
"""

from __future__ import annotations

import argparse
import time

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn import functional as nnf
from torch.utils.data import DataLoader, TensorDataset

from gaussdp.ml import make_private
from gaussdp.random import ChaCha20Random

DELTA = 1e-5


def load() -> tuple[TensorDataset, torch.Tensor, torch.Tensor]:
    """The digits as 1x8x8 images in [0, 1], split 80/20 with a fixed seed."""
    digits = load_digits()
    images = digits.images[:, None] / 16.0
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )
    train = TensorDataset(
        torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train, dtype=torch.long)
    )
    return train, torch.tensor(x_test, dtype=torch.float32), torch.tensor(y_test)


def model() -> nn.Module:
    """Two small convolutions with tanh (bounded activations suit DP-SGD) and a linear layer."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.GroupNorm(2, 8),
        nn.Tanh(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.Tanh(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 2 * 2, 10),
    )


def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def train_nonprivate(train: TensorDataset, epochs: int, batch_size: int, lr: float) -> nn.Module:
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    loader = DataLoader(
        train, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nnf.cross_entropy(net(x), y).backward()
            optimizer.step()
    return net


def train_private(
    train: TensorDataset,
    epsilon: float,
    epochs: int,
    batch_size: int,
    lr: float,
    clip: float,
    seed: int,
) -> tuple[nn.Module, float, float]:
    net = model()
    private_model, optimizer, loader = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9),
        DataLoader(train, batch_size=batch_size),
        target_epsilon=epsilon,
        delta=DELTA,
        epochs=epochs,
        max_grad_norm=clip,
        rng=ChaCha20Random(seed),
    )
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nnf.cross_entropy(private_model(x), y)  # the mean of per-example losses
            loss.backward()
            optimizer.step()  # clipping, exact noise, step, accounting
    optimizer.close()
    return net, optimizer.noise_multiplier, optimizer.privacy_spent(DELTA).upper


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=256, help="expected batch size")
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    train, x_test, y_test = load()
    print(f"digits: {len(train)} training and {len(y_test)} test images, delta = {DELTA:g}")
    start = time.perf_counter()
    reference = train_nonprivate(train, args.epochs, 64, 0.05)
    net, sigma, spent = train_private(
        train, args.epsilon, args.epochs, args.batch_size, args.lr, args.clip, args.seed
    )
    print(f"CNN with {sum(p.numel() for p in net.parameters())} parameters, {args.epochs} epochs")
    print(f"non-private test accuracy {accuracy(reference, x_test, y_test):.3f}")
    print(
        f"DP-SGD (sigma {sigma:.3f}, clip {args.clip}, expected batch {args.batch_size}): "
        f"test accuracy {accuracy(net, x_test, y_test):.3f}, epsilon spent {spent:.4f} "
        f"(target {args.epsilon})"
    )
    print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
