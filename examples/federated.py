"""Private federated averaging: central Gaussian noise vs the distributed discrete Gaussian.

Run with ``python examples/federated.py`` (needs the ``torch`` extra). 100
simulated clients each hold a private 2-D point near (0.3, 0.4); each round the
server estimates the mean point from the clients' clipped updates.

- Central DP (:class:`gaussdp.ml.DPAggregator`): a trusted server clips, sums and
  adds exact discrete Gaussian noise on a lattice; rounds with client sampling at
  rate q are accounted with the PLD accountant (amplification by subsampling).
- Distributed DP (:class:`gaussdp.ml.DistributedDiscreteGaussian`, Kairouz, Liu,
  Steinke 2021): every client adds its share of discrete Gaussian noise and the
  server only sees the sum modulo 2^b (secure aggregation, simulated exactly).
  The same total noise buys a larger ε: rounding inflates the sensitivity, the
  sum of discrete Gaussians is accounted conservatively, and no sampling
  amplification is claimed.

The noise comes from the operating system's CSPRNG (no ``rng=``), so the estimates
change from run to run while the ε do not. A seeded ``rng=`` is for tests and
replays only: anyone who knows the seed regenerates the noise.
"""

from __future__ import annotations

import torch

from gaussdp.ml import DistributedDiscreteGaussian, DPAggregator

CLIENTS, ROUNDS, DELTA = 100, 20, 1e-5
CLIP, NOISE_MULTIPLIER = 1.0, 4.0


def client_points(seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    centre = torch.tensor([0.3, 0.4])
    return [centre + 0.1 * torch.randn(2, generator=gen) for _ in range(CLIENTS)]


def main() -> None:
    points = client_points()
    true_mean = torch.stack(points).mean(0)
    print(f"true mean point: {[round(v, 3) for v in true_mean.tolist()]}")

    central = DPAggregator(CLIP, NOISE_MULTIPLIER, dim=2, client_rate=0.5)
    estimates = []
    for _ in range(ROUNDS):
        chosen = central.sample_clients(CLIENTS)
        total = central.aggregate([points[i] for i in chosen])
        estimates.append(total / (0.5 * CLIENTS))  # divide by the expected count
    mean = torch.stack(estimates).mean(0)
    print(
        f"central DP, q = 0.5:       estimate {[round(v, 3) for v in mean.tolist()]}, "
        f"epsilon = {central.privacy_spent(DELTA).upper:.3f} after {ROUNDS} rounds"
    )

    for bits in (12, 16, 20):
        distributed = DistributedDiscreteGaussian(
            CLIP, NOISE_MULTIPLIER, num_clients=CLIENTS, dim=2, bits=bits
        )
        estimates = [distributed.aggregate(points) / CLIENTS for _ in range(ROUNDS)]
        mean = torch.stack(estimates).mean(0)
        print(
            f"distributed DG, {bits:2d} bits:  estimate {[round(v, 3) for v in mean.tolist()]}, "
            f"epsilon = {distributed.privacy_spent(DELTA).upper:.3f} after {ROUNDS} rounds "
            f"(gamma = {distributed.gamma:g})"
        )

    full = DPAggregator(CLIP, NOISE_MULTIPLIER, dim=2)
    for _ in range(ROUNDS):
        full.aggregate(points)
    print(f"central DP, all clients:   epsilon = {full.privacy_spent(DELTA).upper:.3f} (exact)")


if __name__ == "__main__":
    main()
