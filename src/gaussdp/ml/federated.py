r"""Private federated aggregation: central Gaussian noise, or the distributed discrete Gaussian.

Neighbouring datasets differ in one client's whole update (add/remove, or — for
the fixed cohort of :class:`DistributedDiscreteGaussian` — one client's update
replaced by zero), so every update is clipped to L2 norm c and the sum has L2
sensitivity c.

- :class:`DPAggregator` (central DP): the server clips each update, sums, and adds
  N(0, z²c²) per coordinate on the secure lattice path of :mod:`gaussdp.ml.noise`.
  Rounds with Poisson client sampling at rate q are accounted as
  ``Subsampled(LatticeGaussian, sample_rate=q)`` (the lattice mechanism of noise multiplier
  z) by the PLD accountant (DP-FedAvg, McMahan et al. 2018).
- Both take ``ledger=`` or ``filter=`` and charge each round there before it is
  drawn (:class:`~gaussdp.errors.BudgetExceededError` when refused).
- :class:`DistributedDiscreteGaussian` (KLS21 = Kairouz, Liu, Steinke 2021, "The
  Distributed Discrete Gaussian Mechanism for Federated Learning with Secure
  Aggregation", ICML): each client clips, rotates (randomised Hadamard), scales by
  1/γ, rounds randomly to integers, adds its own N_Z(0, σ_Z²) noise and reduces
  modulo 2^b; the server sees only the modular sum (simulated exactly here with
  integer arithmetic). The sum of n independent discrete Gaussians is *not* a
  discrete Gaussian, so the privacy is the conservative bound of KLS21 Thm 1.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from gaussdp._search import add_up, fraction_down, fraction_up, mul_up, sqrt_up, up
from gaussdp._validation import (
    check_delta,
    check_int,
    check_positive,
    check_probability,
    redacted,
)
from gaussdp.accounting import EpsilonBounds, PLDAccountant, Subsampled, ZCDPAccountant
from gaussdp.accounting.events import Event, RecordedCost, check_rate
from gaussdp.accounting.filter import PrivacyFilter
from gaussdp.errors import invalid
from gaussdp.mechanisms import Gaussian
from gaussdp.ml._budget import Charger, check_spender
from gaussdp.ml.noise import NoiseMode, SumNoiser, check_noise_mode
from gaussdp.random import (
    ChaCha20Random,
    RandomSource,
    _DerivedStream,
    _process_identity,
    check_rng,
)
from gaussdp.sampling import discrete_gaussian

__all__ = ["DPAggregator", "DistributedDiscreteGaussian", "ddg_rho"]

if TYPE_CHECKING:
    from gaussdp.release.ledger import Ledger

IntArray = npt.NDArray[np.int64]


def _flat_update(update: object, dim: int, index: int) -> torch.Tensor:
    """The update as a flat real tensor; a wrong type, device, dtype or size is refused.

    Called before the round is charged: every property that could make the charged
    round fail is checked here. A tensor without data (the ``meta`` device), a sparse
    or quantized one is refused. A complex update is refused (casting it would drop
    the imaginary part, with a warning inside the charged round); integer and bool
    updates are converted to float64, exactly for every value below 2⁵³ in magnitude
    (beyond, int64 values become the nearest float64, a rounding of that update alone,
    before clipping). Its values are not checked: an update with an inf or NaN entry
    counts as the zero vector (the rule of :func:`gaussdp.ml.clip_factors`), as
    refusing it would be an output that depends on one client's data.
    """
    if not isinstance(update, torch.Tensor):
        raise TypeError(invalid(f"updates[{index}]", "a torch.Tensor", redacted(update)))
    if update.device.type == "meta":
        raise ValueError(
            invalid(f"updates[{index}].device", "a device holding data (not meta)", update.device)
        )
    if update.layout != torch.strided or update.is_quantized:
        raise TypeError(
            invalid(f"updates[{index}]", "a dense, non-quantized tensor", redacted(update))
        )
    if update.is_complex():
        raise TypeError(
            invalid(
                f"updates[{index}].dtype", "real (floating point, integer or bool)", update.dtype
            )
        )
    if update.numel() != dim:
        raise ValueError(invalid(f"updates[{index}].numel()", f"{dim}", update.numel()))
    flat = update.detach().reshape(-1)
    return flat if flat.is_floating_point() else flat.to(torch.float64)


def _clip_factor_rows(rows: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, c/‖row‖)·(1 − 2⁻²⁰) per row, norms in float64 (see gaussdp.ml.noise)."""
    from gaussdp.ml.dpsgd import clip_factors

    return clip_factors({"update": rows}, clip)


# -- central noise ------------------------------------------------------------------------
class DPAggregator:
    r"""Clip client updates to norm c, sum them and add N(0, z²c²) per coordinate (central DP).

    Parameters
    ----------
    clip_norm : float
        c > 0, the L2 bound of one client's update.
    noise_multiplier : float
        z > 0: the noise standard deviation is z·c.
    dim : int
        Number of coordinates of an update (e.g. the model's parameter count).
    client_rate : float, default 1.0
        q in (0, 1]: the probability with which :meth:`sample_clients` picks each
        client in a round; rounds are accounted with amplification by subsampling.
        Each round's clients must come from :meth:`sample_clients`: one
        :meth:`aggregate` per sample, of at most the clients it chose (refused
        otherwise, before anything is charged or drawn).
    noise : {"secure", "insecure-float"}, default "secure"
        As in :class:`~gaussdp.ml.SumNoiser`.
    rng : RandomSource, optional
        ``None`` is the operating system's CSPRNG. Client sampling and noise use
        ChaCha20 streams keyed from it; when ``rng`` is not a seeded stream, a forked
        process re-keys them from it (it never repeats the parent's noise), while
        under a seed a forked process continues the parent's streams — so with a
        ``ledger`` or ``filter`` a seeded ``rng`` is refused in a forked process
        (``RuntimeError``, before the charge): a seed is for tests, not for releases.
    ledger : gaussdp.Ledger, optional
        Charge every round (:attr:`round_event`) to this persistent filter: reserved
        before the round reads an update or draws noise, committed after; a
        refused round raises :class:`~gaussdp.errors.BudgetExceededError`.
    filter : gaussdp.accounting.PrivacyFilter, optional
        Charge every round to this in-memory filter instead (at most one of the two).

    Examples
    --------
    >>> import torch
    >>> from gaussdp.random import ChaCha20Random
    >>> agg = DPAggregator(1.0, 1.0, dim=3, client_rate=0.5, rng=ChaCha20Random(0))
    >>> chosen = agg.sample_clients(10)
    >>> total = agg.aggregate([torch.ones(3) for _ in chosen])
    >>> total.shape, agg.rounds
    (torch.Size([3]), 1)
    >>> bool(agg.privacy_spent(1e-5).upper > 0)
    True
    """

    def __init__(
        self,
        clip_norm: float,
        noise_multiplier: float,
        *,
        dim: int,
        client_rate: float = 1.0,
        noise: NoiseMode = "secure",
        rng: RandomSource | None = None,
        ledger: Ledger | None = None,
        filter: PrivacyFilter | None = None,
    ) -> None:
        check_spender(ledger, filter)
        self._clip = check_positive("clip_norm", clip_norm)
        self._sigma = check_positive("noise_multiplier", noise_multiplier)
        self._dim = check_int("dim", dim, minimum=1)
        self._rate = check_rate("client_rate", client_rate)
        source = check_rng(rng)
        # Streams of their own, re-keyed in a forked child (see gaussdp.random).
        self._sample_rng = _DerivedStream(source)
        self._noiser = SumNoiser(
            self._sigma,
            self._clip,
            self._dim,
            noise=check_noise_mode(noise),
            rng=_DerivedStream(source),
        )
        self._accountant = PLDAccountant()
        self._rounds = 0
        # client_rate < 1: the sample of the last sample_clients() not yet aggregated,
        # as (the process that drew it, the number of clients chosen).
        self._sample: tuple[tuple[int, bytes], int] | None = None
        self._sample_lock = threading.Lock()
        self._charger = Charger(
            self.round_event,
            ledger=ledger,
            filter=filter,
            block=1,
            label="federated round",
            what="federated round",
            detail={
                "kind": "federated",
                "clip_norm": self._clip,
                "noise_multiplier": self._sigma,
                "client_rate": self._rate,
            },
            rng=source,
        )

    @property
    def rounds(self) -> int:
        """The number of aggregated rounds."""
        return self._rounds

    @property
    def round_event(self) -> Event:
        """One round as the accountant, the filter and the ledger compose it.

        The lattice mechanism actually run (``LatticeGaussian``, accounted through
        the smoothing argument) or ``Gaussian(σ)`` for ``noise="insecure-float"``,
        wrapped in ``Subsampled(…, q)`` when ``client_rate`` q < 1 (DP-FedAvg,
        McMahan et al. 2018).
        """
        lattice = self._noiser.lattice
        mechanism = Gaussian(sigma=self._sigma) if lattice is None else lattice
        return mechanism if self._rate == 1.0 else Subsampled(mechanism, sample_rate=self._rate)

    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise per coordinate (≈ z·c, see SumNoiser)."""
        return self._noiser.noise_std

    def sample_clients(self, num_clients: int) -> list[int]:
        """Indices of the clients of one round: each kept independently with ``client_rate``.

        With ``client_rate`` < 1 each round needs a sample of its own: one
        :meth:`aggregate` per call of this method, of at most the clients chosen, in
        the process that drew it (a process forked after this call aggregates only
        once it has drawn its own sample). A sample drawn anew before the last one was
        aggregated replaces it; whether to draw again must not depend on the data.
        """
        from gaussdp.ml.dpsgd import PoissonBatchSampler

        sampler = PoissonBatchSampler(num_clients, self._rate, steps=1, rng=self._sample_rng)
        chosen = sampler.sample()
        assert sampler.drawn_in is not None
        with self._sample_lock:
            self._sample = (sampler.drawn_in, len(chosen))
        return chosen

    def aggregate(self, updates: Sequence[torch.Tensor]) -> torch.Tensor:
        """The noisy sum of the clipped updates, a float32 vector of ``dim`` coordinates.

        An empty round (no client sampled) still returns noise, as the accounting
        assumes. Divide by the expected number of clients (q times the population)
        for a private average. With a ledger or filter the round is charged
        (:attr:`round_event`) after the updates' types, devices, dtypes and sizes are
        checked and the updates stacked, and before their values decide anything or
        noise is drawn. The updates may be on any one device that holds data (a CUDA
        batch is clipped and summed there; the noise is added on the CPU). An update with an inf or
        NaN entry counts as the zero vector (see :func:`~gaussdp.ml.clip_factors`).

        Raises
        ------
        TypeError, ValueError
            If an update is not a dense real tensor of ``dim`` elements on the
            device of the first (complex, sparse, quantized and ``meta`` tensors are
            refused; integer and bool are taken as float64); nothing is charged.
        BudgetExceededError
            If the ledger or filter refuses the round; nothing is drawn.
        RuntimeError
            In a process forked from inside this round (the parent paid for it and
            draws its noise), or with an in-memory filter in a forked process; with
            ``client_rate`` < 1, without a :meth:`sample_clients` since the last
            round (each round is charged as an independently subsampled one: a
            second round on one sample, or a round on clients not sampled, would
            be under-counted), or in a process forked after :meth:`sample_clients`
            that has not drawn a sample of its own (the parent's sample is the
            parent's to release); nothing is charged or drawn.
        ValueError
            With ``client_rate`` < 1, for more updates than :meth:`sample_clients`
            chose; nothing is charged or drawn.
        """
        updates = list(updates)
        # Taken at once (a second round on it is refused, in any thread); given back if
        # the round is refused before its charge.
        sample = self._take_sample(len(updates)) if self._rate < 1.0 else None
        charged = False
        try:
            rows = [_flat_update(u, self._dim, i) for i, u in enumerate(updates)]
            for index, row in enumerate(rows[1:], start=1):
                if row.device != rows[0].device:
                    raise ValueError(
                        invalid(
                            f"updates[{index}].device",
                            f"{rows[0].device}, as updates[0]'s",
                            row.device,
                        )
                    )
            # Stacked before the charge (it copies, reading no value into a decision).
            stacked = torch.stack(rows) if rows else torch.zeros((0, self._dim))
            with self._charger.run():  # rounds take turns
                # Counted first, as the charger counts a run whose body raises.
                charged = True
                self._rounds += 1
                self._accountant.compose(self.round_event)
                if rows:
                    factors = _clip_factor_rows(stacked, self._clip)
                else:
                    factors = torch.zeros(0, dtype=torch.float64)
                sums = self._noiser.accumulate([stacked], factors)
                self._charger.check_draw()  # a round the parent began, continued in a child
                noisy = self._noiser.release(sums)[0]
        finally:
            if not charged and sample is not None:
                with self._sample_lock:
                    if self._sample is None:  # not replaced by a new sample meanwhile
                        self._sample = sample
        return noisy

    def _take_sample(self, count: int) -> tuple[tuple[int, bytes], int]:
        """The round's sample, taken; refused without one of this process, or too small."""
        with self._sample_lock:
            sample = self._sample
            self._check_sample(sample, count)
            self._sample = None
        assert sample is not None
        return sample

    def _check_sample(self, sample: tuple[tuple[int, bytes], int] | None, count: int) -> None:
        here = _process_identity()
        if sample is None:
            raise RuntimeError(
                invalid(
                    "aggregate()",
                    "called once per sample_clients() with client_rate < 1 (each round is "
                    "accounted as an independent Poisson sample of the clients: call "
                    "sample_clients() and aggregate the updates of the clients it chose; "
                    "nothing is drawn or charged)",
                    "a round without a sample of its own (none drawn, or its round taken)",
                )
            )
        drawn_in, chosen = sample
        if drawn_in != here:
            raise RuntimeError(
                invalid(
                    "aggregate()",
                    "called in the process that drew the round's clients (a forked "
                    "process holds its parent's sample_clients(), which the parent "
                    "releases; nothing is drawn or charged: call sample_clients() in the "
                    "child first)",
                    f"clients of process {drawn_in[0]} in process {here[0]}",
                )
            )
        if count > chosen:
            raise ValueError(
                invalid(
                    "len(updates)",
                    f"at most the {chosen} clients sample_clients() chose (nothing is drawn "
                    "or charged)",
                    count,
                )
            )

    def privacy_spent(self, delta: float) -> EpsilonBounds:
        """Bounds on ε at ``delta`` after the rounds so far (PLD accountant, lattice slack)."""
        delta = check_delta("delta", delta)
        if self._rounds == 0:
            return EpsilonBounds(lower=0.0, upper=0.0)
        return self._accountant.epsilon(delta)


# -- distributed discrete Gaussian (KLS21) ------------------------------------------------
def ddg_rho(l2_sensitivity: float, sigma2: float, num_clients: int, dim: int) -> float:
    r"""ρ-zCDP of the sum of ``num_clients`` independent N_Z(0, σ²)^d noise vectors (KLS21 Thm 1).

    For integer vectors whose difference has L2 norm at most Δ (``l2_sensitivity``)
    and n clients each adding N_Z(0, σ²) per coordinate (σ ≥ 1/2), the sum is
    ½ε²-zCDP with

    ε = min{ √(Δ²/(nσ²) + 2τd),  Δ/(√n σ) + τ√d },
    τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k+1))         (KLS21 Thm 1, eqs. 3–4; Prop 14).

    τ measures how far the sum is from the discrete Gaussian N_Z(0, nσ²); it is
    negligible once σ is a few units. All quantities are in integer (lattice) units.

    The result is rounded up: a float ≥ the exact ρ of the given inputs. Each
    exponent's magnitude is rounded down (with ``math.pi`` < π), each exponential
    one ulp up, and the rest is exact rational arithmetic with upward-rounded
    square roots.

    Examples
    --------
    >>> rho = ddg_rho(1000.0, 1000.0**2 / 10, num_clients=10, dim=1000)
    >>> round(rho, 6)
    0.5
    """
    delta2 = check_positive("l2_sensitivity", l2_sensitivity)
    s2 = check_positive("sigma2", sigma2)
    if s2 < 0.25:
        raise ValueError(invalid("sigma2", ">= 1/4 (KLS21 Prop 14 needs sigma >= 1/2)", sigma2))
    n = check_int("num_clients", num_clients, minimum=1)
    d = check_int("dim", dim, minimum=1)
    # KLS21 Thm 1, eq. 3, rounded up: 2·math.pi²·σ²·k/(k+1) (math.pi < π) rounded down,
    # exp one ulp up (its error is below one ulp).
    pi2_s2 = 2 * Fraction(math.pi) ** 2 * Fraction(s2)
    terms = [up(math.exp(-fraction_down(pi2_s2 * Fraction(k, k + 1)))) for k in range(1, n)]
    tau = mul_up(10.0, add_up(*terms)) if terms else 0.0
    # KLS21 Thm 1, eq. 4, each branch rounded up (so is their minimum).
    ratio = Fraction(delta2) ** 2 / (n * Fraction(s2))  # Δ²/(nσ²), exact
    eps = min(
        sqrt_up(ratio + 2 * Fraction(tau) * d),
        add_up(sqrt_up(ratio), mul_up(tau, sqrt_up(d))),
    )
    return fraction_up(Fraction(eps) ** 2 / 2)


def _fwht(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Orthonormal fast Walsh–Hadamard transform of a vector of length 2^k (self-inverse)."""
    n = a.shape[0]
    out = a.copy()
    h = 1
    while h < n:
        view = out.reshape(-1, 2, h)
        top = view[:, 0, :].copy()
        view[:, 0, :] += view[:, 1, :]
        view[:, 1, :] = top - view[:, 1, :]
        h *= 2
    result: npt.NDArray[np.float64] = out / math.sqrt(n)
    return result


class DistributedDiscreteGaussian:
    r"""The distributed discrete Gaussian mechanism under secure aggregation (KLS21).

    Client side (:meth:`encode`): clip the update to norm c, rotate it with the
    randomised Hadamard transform HD/√d (D random signs shared by all parties),
    scale by 1/γ, round each coordinate randomly (floor + Bernoulli(fraction),
    unbiased up to 2⁻⁵³), redrawn until ‖x̃‖₂ ≤ Δ₂ — the *conditional* randomised
    rounding of KLS21 with bias parameter β — then add N_Z(0, σ_Z²)^d and reduce
    modulo 2^b. The server only sees the sum modulo 2^b, maps it to
    [−2^{b−1}, 2^{b−1}), multiplies by γ and rotates back.

    :meth:`aggregate` simulates one whole round (every client and the secure sum) in
    this process, and it is the only way to a release: every round is counted and
    charged. The client and server steps are not public, since a separate client or
    server API could release sums that are not accounted for (a sum of fewer than
    n messages, or a client's message used in two sums, repeats or lacks noise the
    round's ρ assumes) and a library cannot check that without the secure
    aggregation protocol's own bookkeeping.

    Norm bound used (KLS21 Thm 1, eq. 2, in lattice units, c' = c/γ):
    Δ₂² = min{ c'² + d/4 + √(2 ln(1/β))·(c' + √d/2),  (c' + √d)² }; with β = 0 the
    rounding is unconditional and only the second term is used. Privacy per round:
    ρ = :func:`ddg_rho` (Δ₂, σ_Z², n, d); rounds compose by adding ρ, and ε is
    reported through CKS Cor 13. No amplification by client sampling is claimed.

    Parameters
    ----------
    clip_norm : float
        c > 0.
    noise_multiplier : float
        z > 0: the *total* noise of n clients has standard deviation z·c per
        coordinate (each client adds z·c/√n), as the central mechanism would.
    num_clients : int
        n ≥ 1, the number of clients whose noise every round is guaranteed to
        contain; :meth:`aggregate` refuses fewer updates.
    dim : int
        Coordinates of an update.
    bits : int, default 20
        b: the secure sum is computed modulo 2^b (2 ≤ b ≤ 62, 2^{b−1} > 2n).
    beta : float, default exp(−0.5)
        Conditional rounding parameter in [0, 1) (KLS21 use e^{−0.5}).
    k_stddevs : float, default 4.0
        γ is the smallest power of two with k·(n·c/√d + z·c)/γ + n < 2^{b−1}, so the
        modular sum wraps only if some coordinate exceeds k standard deviations.
    rng : RandomSource, optional
        ``None`` is the operating system's CSPRNG. The shared signs are read from it;
        each client's rounding and noise draw on a ChaCha20 stream keyed from a
        stream derived from it, which a forked process re-keys (as
        :class:`DPAggregator`'s), unless ``rng`` is seeded: then, with a ``ledger``
        or ``filter``, a round in a forked process is refused (``RuntimeError``,
        before the charge).
    ledger, filter : gaussdp.Ledger or gaussdp.accounting.PrivacyFilter, optional
        Charge every round (:attr:`round_event`, a ρ-zCDP certificate) before it
        encodes an update; at most one. A ρ budget adds the ρ's; an (ε, δ) budget
        takes it through zCDP (there is no privacy loss distribution for a sum of
        discrete Gaussians), a μ budget refuses it at construction.

    Examples
    --------
    >>> import torch
    >>> from gaussdp.random import ChaCha20Random
    >>> ddg = DistributedDiscreteGaussian(
    ...     1.0, 1.0, num_clients=10, dim=100, bits=20, rng=ChaCha20Random(0))
    >>> updates = [torch.full((100,), 0.05) for _ in range(10)]
    >>> total = ddg.aggregate(updates)
    >>> bool(abs(float(total.mean()) - 0.5) < 0.5)
    True
    >>> bool(ddg.rho > Gaussian(sigma=1.0).rho)
    True
    """

    def __init__(
        self,
        clip_norm: float,
        noise_multiplier: float,
        *,
        num_clients: int,
        dim: int,
        bits: int = 20,
        beta: float = math.exp(-0.5),
        k_stddevs: float = 4.0,
        rng: RandomSource | None = None,
        ledger: Ledger | None = None,
        filter: PrivacyFilter | None = None,
    ) -> None:
        check_spender(ledger, filter)
        self._clip = check_positive("clip_norm", clip_norm)
        self._z = check_positive("noise_multiplier", noise_multiplier)
        self._n = check_int("num_clients", num_clients, minimum=1)
        self._dim = check_int("dim", dim, minimum=1)
        self._bits = check_int("bits", bits, minimum=2)
        if self._bits > 62 or 2 ** (self._bits - 1) <= 2 * self._n:
            raise ValueError(invalid("bits", f"at most 62 with 2**(bits-1) > 2*{self._n}", bits))
        self._beta = check_probability("beta", beta)
        if self._beta >= 1:
            raise ValueError(invalid("beta", "in [0, 1)", beta))
        k = check_positive("k_stddevs", k_stddevs)
        source = check_rng(rng)
        self._pad = 1 << (self._dim - 1).bit_length()
        d = self._pad
        signs = source.bits(d)
        self._signs = np.where(signs, -1.0, 1.0)
        # The clients' keys: a stream of its own, re-keyed in a forked child (gaussdp.random).
        self._client_rng = _DerivedStream(source)
        # Largest coordinate of the rotated sum, with k standard deviations of signal and noise.
        bound = k * (self._n * self._clip / math.sqrt(d) + self._z * self._clip)
        self._modulus = 1 << self._bits
        half = 1 << (self._bits - 1)
        _, exponent = math.frexp(bound / (half - self._n))
        self._gamma = math.ldexp(1.0, exponent)  # smallest power of two >= bound/(half - n)
        scaled = self._clip / self._gamma
        if (scaled + math.sqrt(d)) ** 2 >= 2.0**62:
            raise ValueError(invalid("bits", "small enough for exact int64 norms", bits))
        conditional = (
            scaled**2
            + d / 4
            + math.sqrt(2 * math.log(1 / self._beta)) * (scaled + math.sqrt(d) / 2)
            if self._beta > 0
            else math.inf
        )
        # KLS21 Thm 1, eq. 2 (in lattice units).
        self._delta2_sq = min(conditional, (scaled + math.sqrt(d)) ** 2)
        self._conditional = conditional < (scaled + math.sqrt(d)) ** 2
        # Each client's noise in lattice units: σ_Z = z·c/(γ√n).
        self._sigma2 = Fraction((self._z * scaled) ** 2) / self._n
        if self._sigma2 < Fraction(1, 4):
            raise ValueError(
                invalid("bits", "large enough that each client's noise is >= 1/2 grid step", bits)
            )
        # Δ₂ rounded up and σ_Z² rounded down: ρ is never under-reported.
        self._rho = ddg_rho(sqrt_up(self._delta2_sq), fraction_down(self._sigma2), self._n, d)
        self._rounds = 0
        self._charger = Charger(
            self.round_event,
            ledger=ledger,
            filter=filter,
            block=1,
            label="federated round (distributed discrete Gaussian)",
            what="federated round",
            detail={
                "kind": "federated-ddg",
                "clip_norm": self._clip,
                "noise_multiplier": self._z,
                "num_clients": self._n,
                "dim": self._dim,
            },
            rng=source,
        )

    @property
    def round_event(self) -> RecordedCost:
        """One round as an event: ρ-zCDP with ρ = :attr:`rho` (KLS21 Thm 1), no μ certificate.

        A ``RecordedCost(rho=ρ, mu=None, slack=0, delta=0)``: zCDP and RDP
        accountants compose it by ρ (and so does an (ε, δ) budget, through zCDP);
        the PLD and GDP accountants refuse it.
        """
        return RecordedCost(rho=self._rho, mu=None, slack=0.0, delta=0.0)

    @property
    def gamma(self) -> float:
        """γ, the grid step (a power of two)."""
        return self._gamma

    @property
    def modulus(self) -> int:
        """2^b, the modulus of the secure sum."""
        return self._modulus

    @property
    def client_sigma2(self) -> Fraction:
        """σ_Z², each client's discrete Gaussian noise scale in lattice units."""
        return self._sigma2

    @property
    def l2_sensitivity(self) -> float:
        """Δ₂ in lattice units (KLS21 Thm 1, eq. 2)."""
        return sqrt_up(self._delta2_sq)

    @property
    def rho(self) -> float:
        """ρ-zCDP of one round (KLS21 Thm 1)."""
        return self._rho

    @property
    def rounds(self) -> int:
        """The number of aggregated rounds."""
        return self._rounds

    def _rotate(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        padded = np.zeros(self._pad)
        padded[: self._dim] = x
        return _fwht(self._signs * padded)

    def _unrotate(self, y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        result: npt.NDArray[np.float64] = (self._signs * _fwht(y))[: self._dim]
        return result

    def _encode(self, update: torch.Tensor) -> IntArray:
        """One client's message: its clipped, rotated, rounded and noised update mod 2^b.

        The client's randomness is a ChaCha20 stream keyed from the mechanism's
        derived stream. An update with an inf or NaN entry (or a norm beyond the
        float64 range) counts as the zero vector, a valid clipping decided from that
        update alone (see :func:`~gaussdp.ml.clip_factors`). An update on another
        device than the CPU (CUDA) is copied to the CPU, where the clients'
        arithmetic is simulated.
        """
        flat = _flat_update(update, self._dim, 0).to(torch.float64).numpy(force=True)
        self._charger.check_draw()  # a round the parent began, continued in a child
        stream = ChaCha20Random(self._client_rng.random_bytes(32))
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are handled below
            rotated = self._rotate(flat)
            norm = float(np.linalg.norm(rotated))
        if not math.isfinite(norm):  # an inf or NaN entry (the rotation spreads it)
            rotated, norm = np.zeros(self._pad), 0.0
        factor = min(1.0, self._clip / norm) * (1 - 2.0**-20) if norm > 0 else 1.0
        scaled = rotated * (factor / self._gamma)
        floor = np.floor(scaled)
        frac = scaled - floor
        threshold = np.floor(frac * 2.0**53).astype(np.uint64)
        base = floor.astype(np.int64)
        while True:
            up = (stream.words(self._pad) >> np.uint64(11)) < threshold
            rounded = base + up.astype(np.int64)
            if not self._conditional or int(np.dot(rounded, rounded)) <= self._delta2_sq:
                break
        noise = discrete_gaussian(self._sigma2, self._pad, rng=stream)
        message: IntArray = np.mod(rounded + noise, self._modulus)
        return message

    def _secure_sum(self, messages: Sequence[IntArray]) -> IntArray:
        """The sum of the messages modulo 2^b: all the server learns under secure aggregation."""
        total = np.zeros(self._pad, dtype=np.int64)
        for message in messages:
            total = np.mod(total + message, self._modulus)
        return total

    def _decode(self, modular_sum: IntArray) -> torch.Tensor:
        """Map a modular sum to [−2^{b−1}, 2^{b−1}), scale by γ and rotate back (float32)."""
        half = self._modulus // 2
        signed = np.where(modular_sum >= half, modular_sum - self._modulus, modular_sum)
        return torch.from_numpy(self._unrotate(signed.astype(np.float64) * self._gamma)).to(
            torch.float32
        )

    def aggregate(self, updates: Sequence[torch.Tensor]) -> torch.Tensor:
        """Encode every update, sum them modulo 2^b and decode: the noisy sum of one round.

        Raises
        ------
        TypeError, ValueError
            If fewer than ``num_clients`` updates are given (their noise would be
            missing) or an update is not a dense real tensor of ``dim`` elements
            (complex, sparse, quantized and ``meta`` tensors are refused; integer and
            bool are taken as float64; other devices are copied to the CPU); nothing
            is charged.
        BudgetExceededError
            If the ledger or filter refuses the round; nothing is encoded or drawn.
        RuntimeError
            In a process forked from inside this round (the parent paid for it and
            draws its noise), or with an in-memory filter in a forked process;
            nothing is charged or drawn.
        """
        if len(updates) < self._n:
            raise ValueError(
                invalid("len(updates)", f"at least num_clients = {self._n}", len(updates))
            )
        for index, update in enumerate(updates):
            _flat_update(update, self._dim, index)
        # BudgetExceededError here: nothing encoded or drawn. Rounds take turns.
        with self._charger.run():
            self._rounds += 1  # counted first, as the charger counts a run whose body raises
            messages = [self._encode(u) for u in updates]
        return self._decode(self._secure_sum(messages))

    def privacy_spent(self, delta: float) -> EpsilonBounds:
        """ε at ``delta`` after the rounds so far: ρ·rounds through CKS Cor 13.

        ``upper`` is certified by KLS21 Thm 1 and CKS Cor 13; ``lower`` is the trivial 0
        (no lower bound is computed for the sum of discrete Gaussians).
        """
        delta = check_delta("delta", delta)
        if self._rounds == 0:
            return EpsilonBounds(lower=0.0, upper=0.0)
        # The zCDP accountant, as a filter or ledger composes it (ρ·rounds rounded up).
        accountant = ZCDPAccountant().compose(self.round_event, self._rounds)
        return EpsilonBounds(lower=0.0, upper=accountant.epsilon(delta).upper)
