"""Data to test and compare synthesizers on: a Bayesian network with known marginals, wine.

:class:`BayesNet` draws categorical records from a discrete Bayesian network
whose every marginal is known exactly (by summing the joint), so a
synthesizer's error against the *population* can be measured.
:func:`wine` is scikit-learn's bundled wine table (178 rows, the ``examples``
extra) with three numeric columns and the class, each with a public domain.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gaussdp.errors import MissingExtraError, invalid
from gaussdp.random import RandomSource, check_rng
from gaussdp.synth.domain import Categorical, Column, Numeric

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BayesNet", "wine"]


@dataclass(frozen=True)
class BayesNet:
    """A discrete Bayesian network: nodes in topological order with their parents and CPTs.

    ``cpts[v]`` has one axis per parent (in ``parents[v]`` order) and a last
    axis over the states of ``v``; each row sums to 1.
    """

    sizes: Mapping[str, int]
    parents: Mapping[str, tuple[str, ...]]
    cpts: Mapping[str, npt.NDArray[np.float64]]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for v, k in self.sizes.items():
            ps = self.parents.get(v, ())
            if not set(ps) <= seen:
                raise ValueError(invalid(f"parents of {v!r}", "earlier nodes", ps))
            cpt = np.asarray(self.cpts[v], dtype=np.float64)
            if cpt.shape != (*(self.sizes[p] for p in ps), k) or not np.allclose(
                cpt.sum(axis=-1), 1.0
            ):
                raise ValueError(invalid(f"cpt of {v!r}", "a conditional table", cpt.shape))
            seen.add(v)

    @classmethod
    def example(cls) -> BayesNet:
        """Six nodes, a tree with strong edges: a→b, a→c, b→d, c→e, e→f (3 states each, d 4)."""
        sizes = {"a": 3, "b": 3, "c": 3, "d": 4, "e": 3, "f": 3}
        parents = {"a": (), "b": ("a",), "c": ("a",), "d": ("b",), "e": ("c",), "f": ("e",)}

        def strong(k_in: int, k_out: int, shift: int) -> npt.NDArray[np.float64]:
            t = np.full((k_in, k_out), 0.1 / (k_out - 1))
            for i in range(k_in):
                t[i, (i + shift) % k_out] = 0.9
            return t

        cpts = {
            "a": np.array([0.5, 0.3, 0.2]),
            "b": strong(3, 3, 1),
            "c": strong(3, 3, 0) * 0.5 + 0.5 / 3,
            "d": strong(3, 4, 2),
            "e": strong(3, 3, 2),
            "f": strong(3, 3, 0) * 0.8 + 0.2 / 3,
        }
        return cls(sizes, parents, cpts)

    @classmethod
    def xor(cls, flip: float = 0.05) -> BayesNet:
        """c = a XOR b, flipped with probability ``flip``; d independent (2, 2, 2, 3 states).

        Every pair of a, b, c is independent (each pair marginal is uniform), so a
        model of 2-way marginals cannot carry the dependence; the 3-way marginal
        (a, b, c) can. A case for AIM over MST.

        Examples
        --------
        >>> net = BayesNet.xor()
        >>> net.marginal(("a", "c")).tolist()
        [0.25, 0.25, 0.25, 0.25]
        >>> round(float(net.marginal(("a", "b", "c"))[1]), 4)  # a = b = 0, c = 1
        0.0125
        """
        keep = np.array([[1 - flip, flip], [flip, 1 - flip]])
        return cls(
            {"a": 2, "b": 2, "c": 2, "d": 3},
            {"a": (), "b": (), "c": ("a", "b"), "d": ()},
            {
                "a": np.array([0.5, 0.5]),
                "b": np.array([0.5, 0.5]),
                "c": np.stack([keep, keep[::-1]]),  # c | a, b: XOR
                "d": np.full(3, 1 / 3),
            },
        )

    @property
    def edges(self) -> tuple[tuple[str, str], ...]:
        """(parent, child) pairs."""
        return tuple((p, v) for v in self.sizes for p in self.parents.get(v, ()))

    @property
    def columns(self) -> tuple[Column, ...]:
        """Each node as a :class:`Categorical` with states ``0 … k − 1``."""
        return tuple(Categorical(v, list(range(k))) for v, k in self.sizes.items())

    def joint(self) -> npt.NDArray[np.float64]:
        """The exact joint distribution (one axis per node)."""
        names = list(self.sizes)
        out = np.ones(tuple(self.sizes.values()))
        for v in names:
            ps = self.parents.get(v, ())
            letters = "".join(chr(97 + names.index(a)) for a in (*ps, v))
            every = "".join(chr(97 + i) for i in range(len(names)))
            out = np.einsum(f"{every},{letters}->{every}", out, self.cpts[v])
        return out

    def marginal(self, clique: Sequence[str]) -> npt.NDArray[np.float64]:
        """The exact marginal distribution over ``clique`` (flattened, C order)."""
        names = list(self.sizes)
        drop = tuple(i for i, v in enumerate(names) if v not in clique)
        m = self.joint().sum(axis=drop)
        kept = [v for v in names if v in clique]
        return np.transpose(m, [kept.index(v) for v in clique]).ravel()

    def sample(
        self, n: int, *, rng: RandomSource | None = None, rows_per_unit: int = 1
    ) -> pd.DataFrame:
        """``n`` records with a ``unit`` column (``rows_per_unit`` consecutive rows per unit)."""
        import pandas as pd

        gen = np.random.default_rng(int.from_bytes(check_rng(rng).random_bytes(32), "little"))
        data: dict[str, npt.NDArray[np.int64]] = {}
        for v, k in self.sizes.items():
            ps = self.parents.get(v, ())
            cpt = np.asarray(self.cpts[v]).reshape(-1, k)
            idx = (
                np.ravel_multi_index(tuple(data[p] for p in ps), tuple(self.sizes[p] for p in ps))
                if ps
                else np.zeros(n, dtype=np.int64)
            )
            cum = np.cumsum(cpt, axis=1)[idx]
            data[v] = np.minimum((gen.random(n)[:, None] > cum).sum(axis=1), k - 1)
        units = np.arange(n) // rows_per_unit
        return pd.DataFrame({"unit": units, **data})


def wine() -> tuple[pd.DataFrame, tuple[Column, ...]]:
    """scikit-learn's wine table (178 rows) with public domains for four columns.

    Columns: ``alcohol`` in [11, 15] and ``color_intensity`` in [0, 14], 8
    bins each, ``hue`` in [0.4, 1.8], 7 bins (bounds from the data set's
    published description, not from the rows), and the cultivar ``class``
    (0, 1, 2); ``id`` is one unit per row.
    """
    try:
        datasets: Any = importlib.import_module("sklearn.datasets")
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise MissingExtraError("wine()", "examples") from error
    bunch = datasets.load_wine(as_frame=True)
    frame = bunch.frame[["alcohol", "color_intensity", "hue", "target"]].rename(
        columns={"target": "class"}
    )
    frame.insert(0, "id", range(len(frame)))
    columns: tuple[Column, ...] = (
        Numeric("alcohol", (11.0, 15.0), 8),
        Numeric("color_intensity", (0.0, 14.0), 8),
        Numeric("hue", (0.4, 1.8), 7),
        Categorical("class", [0, 1, 2]),
    )
    return frame, columns
