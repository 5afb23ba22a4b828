"""Train a one-layer transformer on a synthetic sequence task with DP-SGD (ε = 3, δ = 1e-6).

Run with ``python examples/dpsgd_transformer.py`` (needs the ``torch`` extra); well
under a minute on one CPU core. Each example is a sequence of 16 tokens: filler
tokens 4-19 and some copies of the marker tokens 1, 2 and 3; the label is the
marker that occurs most often (no ties). The model embeds tokens and positions, runs
one pre-norm transformer layer (self-attention with ``nn.Linear`` projections and
``F.scaled_dot_product_attention``, then a feed-forward block) and classifies the
mean of its outputs. Every layer — embeddings, LayerNorm, the linear layers on
``[batch, tokens, features]`` — takes gaussdp's ghost clipping. (A model built from
``nn.TransformerEncoderLayer`` trains too; its ``nn.MultiheadAttention`` goes
through ``torch.func`` for that module, which is exact but slower.)

The training loop is the PyTorch idiom on the objects ``make_private`` returns. σ
is calibrated before training so that the certified ε after the run is at most the
target. Everything random comes from seeded generators and ``ChaCha20Random(seed)``;
drop ``rng=`` to use the operating system's CSPRNG, as a real release should.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.nn import functional as nnf
from torch.utils.data import DataLoader, TensorDataset

from gaussdp.ml import make_private
from gaussdp.random import ChaCha20Random

DELTA = 1e-6
VOCAB, LENGTH, MARKERS = 20, 16, 3


def synthetic(n: int, seed: int) -> TensorDataset:
    """Sequences of fillers with 1-5 copies of each marker; label: the most frequent marker."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(MARKERS + 1, VOCAB, (n, LENGTH), generator=gen)
    counts = torch.stack(
        [torch.randperm(5, generator=gen)[:MARKERS] + 1 for _ in range(n)]
    )  # three distinct counts in 1..5: no ties
    for i in range(n):
        places = torch.randperm(LENGTH, generator=gen)
        start = 0
        for marker in range(MARKERS):
            k = int(counts[i, marker])
            tokens[i, places[start : start + k]] = marker + 1
            start += k
    return TensorDataset(tokens, counts.argmax(1))


class Transformer(nn.Module):
    """Token and position embeddings, one pre-norm attention + feed-forward layer, a head."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.tokens = nn.Embedding(VOCAB, width)
        self.positions = nn.Embedding(LENGTH, width)
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width))
        self.head = nn.Linear(width, MARKERS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, length = ids.shape
        where = torch.arange(length, device=ids.device).repeat(batch, 1)
        h = self.tokens(ids) + self.positions(where)
        q, k, v = self.qkv(self.norm1(h)).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = nnf.scaled_dot_product_attention(q, k, v).transpose(1, 2)
        h = h + self.out(attended.reshape(batch, length, -1))
        h = h + self.ff(self.norm2(h))
        out: torch.Tensor = self.head(h.mean(1))
        return out


def accuracy(net: nn.Module, data: TensorDataset) -> float:
    x, y = data.tensors
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20000, help="training set size")
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=500, help="expected batch size")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    train, test = synthetic(args.examples, seed=1), synthetic(2000, seed=2)
    torch.manual_seed(0)
    net = Transformer()
    print(
        f"{args.examples} training sequences of {LENGTH} tokens, "
        f"{sum(p.numel() for p in net.parameters())} parameters, delta = {DELTA:g}"
    )
    start = time.perf_counter()
    model, optimizer, loader = make_private(
        net,
        torch.optim.Adam(net.parameters(), lr=args.lr),
        DataLoader(train, batch_size=args.batch_size),
        target_epsilon=args.epsilon,
        delta=DELTA,
        epochs=args.epochs,
        max_grad_norm=args.clip,
        rng=ChaCha20Random(args.seed),
    )
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nnf.cross_entropy(model(x), y).backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: test accuracy {accuracy(net, test):.3f}")
    optimizer.close()
    spent = optimizer.privacy_spent(DELTA).upper
    print(
        f"DP-SGD (sigma {optimizer.noise_multiplier:.3f}, clip {args.clip}, expected batch "
        f"{args.batch_size}): epsilon spent {spent:.4f} (target {args.epsilon}); "
        f"chance is 1/3; {time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
