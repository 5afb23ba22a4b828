"""Differentially private synthetic data from Gaussian-noised marginals.

:class:`Synthesizer` runs MST (McKenna, Miklau & Sheldon 2021) on gaussdp's
release pipeline: the 1-way marginals and a maximum-spanning tree of 2-way
marginals are measured by :class:`~gaussdp.release.Release` counts (each
privacy unit bounded in the engine, exact discrete Gaussian noise), the tree is
chosen by an exactly sampled exponential mechanism
(:func:`exponential_mechanism`), a graphical model is fitted with Private-PGM
(``mbi``, the ``synth`` extra) and sampled. Every column has a public domain
(:class:`Categorical`, :class:`Numeric`), never taken from the data. See
``docs/synth.md``.
"""

from __future__ import annotations

from gaussdp.synth.core import Synthesizer, SynthEvent, SynthReport, SynthResult
from gaussdp.synth.domain import Categorical, Column, Numeric
from gaussdp.synth.select import exponential_mechanism
from gaussdp.synth.spec import synthesizer_from_spec

__all__ = [
    "Categorical",
    "Column",
    "Numeric",
    "SynthEvent",
    "SynthReport",
    "SynthResult",
    "Synthesizer",
    "exponential_mechanism",
    "synthesizer_from_spec",
]
