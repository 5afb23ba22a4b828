"""The exceptions gaussdp raises.

Every domain error subclasses a built-in, so ``except ValueError`` keeps
working for callers who do not know gaussdp's hierarchy. Messages follow one
template, ``"{name} must be {constraint}, got {value!r}"``, built by
:func:`invalid`.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "EngineError",
    "LedgerError",
    "MissingExtraError",
    "SamplingShortfallError",
    "invalid",
]


class BudgetExceededError(ValueError):
    """A request would spend more privacy budget than remains.

    Raised before any noise is drawn; the budget's state is unchanged.
    """


class EngineError(RuntimeError):
    """The query engine (DuckDB, Spark) failed while reading or aggregating data.

    The message is one line that never repeats data values (no raw records, no
    privacy-unit identifiers). The engine's own error is not kept: engine
    messages quote raw records, so the chain (``__cause__``, ``__context__``)
    holds only a stand-in naming its class. The command line exits with status 4
    on it.
    """


class LedgerError(RuntimeError):
    """A privacy ledger file cannot be used (not a ledger, another format,
    read-only, or holding events this version does not know).

    The message names the file and what to do; nothing was spent.
    """


class MissingExtraError(ImportError):
    """An optional integration was used without its extra installed."""

    def __init__(self, feature: str, extra: str) -> None:
        # gaussdp is not on a package index: the checkout form is the one that works today.
        super().__init__(
            f"{feature} needs the optional extra {extra!r}: pip install 'gaussdp[{extra}]' "
            f"(from a gaussdp checkout: pip install '.[{extra}]', or .venv/bin/pip install "
            f"'.[{extra}]' without activating .venv)"
        )


class SamplingShortfallError(RuntimeError):
    """A fixed-work batch accepted fewer candidates than the outputs requested.

    Raised before anything is returned; the event has probability at most the
    ``delta_prime`` of the :class:`~gaussdp.sampling.FixedWork` request and is
    independent of the data the noise would have been added to.
    """


def invalid(name: str, constraint: str, value: object) -> str:
    """Build the one message template used for every rejected argument.

    Examples
    --------
    >>> invalid("delta", "in (0, 1)", 1.5)
    'delta must be in (0, 1), got 1.5'
    """
    try:
        shown = repr(value)
    except ValueError:  # an int (or a Fraction of ints) beyond Python's 4300-digit limit
        kind = type(value).__qualname__
        shown = f"{'an' if kind[0] in 'aeiouAEIOU' else 'a'} {kind} too long to print"
    return f"{name} must be {constraint}, got {shown}"
