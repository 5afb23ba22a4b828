r"""Secret generator states for the training passes of a private model (dropout masks).

A model's random layers (``nn.Dropout``, ``F.dropout``, ``torch.rand`` in a forward)
draw from torch's default generators. Left there, the masks are the script's: a
``torch.manual_seed(0)`` at the top makes them public, and each example gets the
mask of its *position* in the Poisson batch, so removing one example shifts every
later example's mask — the clipped sum then moves by far more than C (a review:
4.48·C at batch 16). DP-SGD's bound needs masks that are secret and exchangeable.

So every training pass of :class:`gaussdp.ml.PrivateModule` (the forward of the
``loss.backward()`` idiom and of ``model.backward``, and every pass that re-runs it:
the per-example path, the check of the batched path, the gradients at the step), and
every call under ``torch.no_grad()`` in training mode (keys of a stop-gradient loss), runs
with torch's generators set to a state drawn for that pass from its own ChaCha20
stream keyed from ``make_private``'s ``rng`` (:class:`MaskStates`), and the caller's
generators are restored afterwards (untouched by training). The argument (docs/ml.md,
"Dropout and other random layers"): given the Poisson sample, the masks are i.i.d.
across positions and independent of the data, so removing example i and giving every
other example the mask it had is a coupling of the two runs under which the clipped
sums differ by example i's clipped gradient alone (norm ≤ C); the released sum is a
mixture, with the same mixing law, of mechanisms each at sensitivity C, and a mixture
is no less private than its worst member (joint convexity of the hockey-stick
divergence). A fresh state per pass keeps masks of different passes (gradient
accumulation, other steps) independent.

How secret: the CPU generator is a Mersenne twister; its whole state (624 32-bit
words, 19,937 bits) is filled from the stream, never seeded through
``torch.manual_seed`` (which keeps 32 bits of the seed on the CPU). A CUDA
generator (Philox) takes a 64-bit key, filled from the stream, offset 0. Neither is
a cryptographic generator: the masks are as secret as the stream's words are, up to
what the noisy releases let one infer about these generators — a computational
assumption, weaker than the noise's own. Under a seeded ``rng`` the masks are
reproducible (and public to whoever knows the seed), as the noise is. Not covered:
randomness a model draws from its own ``torch.Generator`` objects, numpy or Python's
``random``, and calls of the unwrapped model (they draw from the caller's generators).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from gaussdp.random import RandomSource, _process_identity

__all__ = ["MaskStates"]

#: Byte offset and count of the Mersenne twister's words in torch's CPU generator
#: state (``CPUGeneratorImplStateLegacy``: a uint64 seed, int left, int seeded, a
#: uint64 ``next``, then 624 words each held in a uint64), checked by :func:`_cpu_layout`.
_MT_OFFSET, _MT_WORDS = 24, 624
#: States drawn from the stream at once (one ChaCha20 read; ≈ 160 KB on the CPU).
_AHEAD = 32


@functools.cache
def _cpu_layout() -> np.ndarray:
    """A template CPU generator state (fresh, nothing cached), its word layout checked.

    A generator seeded with 5489 must hold the reference MT19937 initial words
    (Matsumoto & Nishimura 1998, ``init_genrand``) at :data:`_MT_OFFSET`; any other
    layout (a torch that stores its state differently) is refused rather than
    filled blindly.
    """
    probe = torch.Generator().manual_seed(5489).get_state().numpy()
    words = [5489]
    for i in range(1, _MT_WORDS):
        prev = words[-1]
        words.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    stored = probe[_MT_OFFSET : _MT_OFFSET + 8 * _MT_WORDS].view("<u8")
    template = torch.Generator().get_state().numpy().copy()
    if probe.size not in (5048, 5056) or stored.tolist() != words:
        raise RuntimeError(
            "this torch stores its CPU generator state in a layout gaussdp does not know, "
            "so the private model's dropout masks cannot be drawn from the secure random "
            f"source: use the torch version gaussdp was tested with, got torch {torch.__version__}"
        )
    template[0:8] = 0  # the initial seed torch would report: none
    return template


def _cuda_layout(device: torch.device) -> bool:
    """Whether a CUDA generator state is 16 bytes: the 64-bit seed, then the offset.

    Checked by setting a known seed into a generator of its own and reading it back.
    """
    if torch.cuda.get_rng_state(device).numel() != 16:
        return False
    probe = torch.Generator(device=device)
    key = 0x0123456789ABCDEF
    state = np.zeros(16, dtype=np.uint8)
    state[:8] = np.array([key], dtype="<u8").view(np.uint8)
    probe.set_state(torch.from_numpy(state))
    return probe.initial_seed() == key


class MaskStates:
    """Fresh secret states of torch's generators, one per training pass.

    Each :meth:`next` is ``(cpu_state, cuda_state)`` for ``torch.set_rng_state`` and
    (for a CUDA ``device``) ``torch.cuda.set_rng_state``, drawn from ``rng``
    (module notes). States are read :data:`_AHEAD` at a time; a forked process drops
    those its parent read ahead (the stream itself is re-keyed there unless seeded).
    """

    def __init__(self, rng: RandomSource, device: torch.device) -> None:
        self._rng = rng
        self._device = device
        self._cuda: torch.Tensor | None = None
        if device.type == "cuda":
            self._cuda = torch.cuda.get_rng_state(device)
            if not _cuda_layout(device):
                raise RuntimeError(
                    "this torch stores its CUDA generator state in a layout gaussdp does not "
                    "know (not a 64-bit seed and offset), so the private model's dropout masks "
                    "cannot be drawn from the secure random source: use the torch version "
                    f"gaussdp was tested with, got torch {torch.__version__}"
                )
        self._template = _cpu_layout()
        self._ahead: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        self._owner = _process_identity()

    def next(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A new secret state, never handed out before (in this process)."""
        if self._owner != _process_identity():  # forked: the parent's read-ahead is its own
            self._ahead, self._owner = [], _process_identity()
        if not self._ahead:
            self._ahead = self._draw()
        return self._ahead.pop()

    def _draw(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        cpu_bytes = 4 * _MT_WORDS
        cuda_bytes = 0 if self._cuda is None else 8
        raw = self._rng.random_bytes(_AHEAD * (cpu_bytes + cuda_bytes))
        block = np.frombuffer(raw, dtype="<u4").reshape(_AHEAD, -1)
        states = np.tile(self._template, (_AHEAD, 1))
        # Each word zero-extended into its uint64 slot, as torch stores it.
        slots = states[:, _MT_OFFSET : _MT_OFFSET + 8 * _MT_WORDS].view("<u8")
        slots[:] = block[:, :_MT_WORDS]
        out: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        for i in reversed(range(_AHEAD)):  # popped from the end: drawn order
            cuda = None
            if self._cuda is not None:
                key = np.zeros(16, dtype=np.uint8)  # the 64-bit Philox key, offset 0
                key[:8] = block[i, _MT_WORDS:].view(np.uint8)
                cuda = torch.from_numpy(key)
            # Each row a tensor whose storage starts at it: torch.set_rng_state of a
            # view at a storage offset crashed (segmentation fault, torch 2.13).
            out.append((torch.from_numpy(states[i]), cuda))
        return out
