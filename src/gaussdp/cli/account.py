"""``gaussdp account`` and ``gaussdp dpsgd``: privacy of a composition, and of DP-SGD training.

``gaussdp account events.toml`` reads a list of mechanisms with counts::

    delta = 1e-5                 # optional; --delta overrides it

    [[event]]
    mechanism = "gaussian"       # gaussian | discrete_gaussian | discrete_laplace | laplace
    sigma = 1.1
    sensitivity = 1.0            # optional
    sample_rate = 0.0042667      # optional: Poisson subsampling
    count = 14063

    [[event]]
    mechanism = "discrete_gaussian"
    sigma2 = "25/4"
    count = 10

and prints ε at δ with the PLD accountant's certified upper bound and its lower
bound (``--compare`` adds the RDP and GDP accountants).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gaussdp._validation import MAX_COUNT, check_positive
from gaussdp.cli._output import Shown, emit, fail, handle_errors, progress
from gaussdp.errors import invalid

if TYPE_CHECKING:
    from gaussdp.accounting import Accountant, EpsilonBounds
    from gaussdp.accounting.events import Event

__all__ = ["load_events", "register"]

JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON object (numbers or null) instead of a table."),
]
DiscretizationOption = Annotated[
    float | None,
    typer.Option(
        "--value-discretization",
        help="PLD grid step in nats (default: 1e-4, finer for many runs); coarser uses "
        "less memory and gives a looser certified bound.",
    ),
]
OOM_HINT = (
    "the privacy loss grid does not fit in memory; use a coarser grid, e.g. "
    "--value-discretization 1e-3 (a looser certified bound), or fewer distinct events"
)

# mechanism name -> (class in gaussdp.mechanisms, its required key, its optional keys)
_BUILDERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "gaussian": ("Gaussian", "sigma", ("sensitivity",)),
    "discrete_gaussian": ("DiscreteGaussian", "sigma2", ("sensitivity",)),
    "discrete_laplace": ("DiscreteLaplace", "scale", ("sensitivity",)),
    "laplace": ("Laplace", "scale", ("sensitivity",)),
}


def load_events(path: Path) -> tuple[list[tuple[Event, int]], float | None]:
    """Parse an events file: the (event, count) pairs and the optional ``delta``.

    Raises
    ------
    ValueError
        With the shared message template, naming the event's index, for any
        malformed entry.
    """
    import tomllib

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ValueError(
            invalid("events file", f"a readable TOML file ({reason})", str(path))
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(
            invalid("events file", f"a readable TOML file ({error})", str(path))
        ) from None
    entries = data.get("event")
    if not isinstance(entries, list) or not entries:
        raise ValueError(invalid("events file", "a non-empty list of [[event]] tables", entries))
    events: list[tuple[Event, int]] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(invalid(f"event[{i}]", "a table", entry))
        events.append(_parse_event(i, dict(entry)))
    delta = data.get("delta")
    if isinstance(delta, bool) or (delta is not None and not isinstance(delta, (int, float))):
        raise ValueError(invalid("delta", "a number", delta))
    return events, None if delta is None else float(delta)


def _parse_event(i: int, entry: dict[str, Any]) -> tuple[Event, int]:
    from gaussdp import mechanisms
    from gaussdp.accounting import Subsampled

    name = entry.pop("mechanism", None)
    if name not in _BUILDERS:
        raise ValueError(invalid(f"event[{i}].mechanism", f"one of {sorted(_BUILDERS)}", name))
    class_name, required, optional = _BUILDERS[name]
    count = entry.pop("count", 1)
    rate = entry.pop("sample_rate", None)
    if required not in entry:
        raise ValueError(
            invalid(f"event[{i}] ({name})", f"a table with the key {required!r}", sorted(entry))
        )
    unknown = sorted(set(entry) - {required, *optional})
    if unknown:
        allowed = [required, *optional, "count", "sample_rate"]
        raise ValueError(invalid(f"event[{i}] ({name})", f"keys among {allowed}", unknown))
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise ValueError(invalid(f"event[{i}].count", "an integer in [1, 2**53]", count))
    try:
        mech = getattr(mechanisms, class_name)(**entry)
        event: Event = mech if rate is None else Subsampled(mech, rate)
    except (ValueError, TypeError) as error:
        raise ValueError(f"event[{i}] ({name}): {error}") from error
    return event, count


def _compose(factory: Callable[[], Accountant], events: list[tuple[Event, int]]) -> Accountant:
    acc = factory()
    for event, count in events:
        acc.compose(event, count)
    return acc


def _pld_in_range(
    factory: Callable[[], Accountant], event: tuple[Event, int], delta: float
) -> bool:
    try:
        _compose(factory, [event]).epsilon(delta)
    except (OverflowError, ZeroDivisionError):
        return False
    return True


def account_rows(
    events: list[tuple[Event, int]],
    delta: float,
    compare: bool,
    value_discretization: float | None = None,
) -> list[tuple[str, str, object]]:
    """The rows of ``gaussdp account``."""
    from gaussdp.accounting import GDPAccountant, PLDAccountant, RDPAccountant

    def pld_accountant() -> Accountant:
        return PLDAccountant(value_discretization=value_discretization)

    pld = _compose(pld_accountant, events)
    try:
        bounds = pld.epsilon(delta)
    except (OverflowError, ZeroDivisionError) as error:
        # A numerical limit of the PLD, not bad input as such: name the event that hits it.
        culprit = next(
            (i for i, e in enumerate(events) if not _pld_in_range(pld_accountant, e, delta)),
            None,
        )
        name = "events" if culprit is None else f"event[{culprit}]"
        raise ValueError(
            invalid(
                name,
                "within the PLD accountant's floating-point range (use more noise or fewer runs)",
                f"{type(error).__name__}: {error}",
            )
        ) from error
    exact = isinstance(pld, PLDAccountant) and pld.is_exact
    rows: list[tuple[str, str, object]] = [
        ("events", "events", len(events)),
        ("mechanism runs", "runs", sum(c for _, c in events)),
        ("δ", "delta", delta),
        (_upper_label(bounds), "epsilon_upper", bounds.upper),
        ("ε lower bound (PLD)", "epsilon_lower", bounds.lower),
        # Exact: plain Gaussians whose ε is in the float range (else only bracketed).
        ("exact (plain Gaussians only)", "exact", exact and math.isfinite(bounds.upper)),
    ]
    if compare:
        rdp = RDPAccountant()
        rdp_eps: object = (
            _compose(RDPAccountant, events).epsilon(delta).upper
            if all(rdp.supports(e) for e, _ in events)
            else Shown("not supported", None)
        )
        gdp = GDPAccountant()
        gdp_eps: object = (
            _compose(GDPAccountant, events).epsilon(delta).upper
            if all(gdp.supports(e) for e, _ in events)
            else Shown("Gaussians only", None)
        )
        rows += [
            ("ε RDP (upper bound, looser)", "epsilon_rdp", rdp_eps),
            ("ε GDP (exact)", "epsilon_gdp", gdp_eps),
        ]
    return rows


def dpsgd_steps(batch_size: int, dataset_size: int, epochs: float) -> tuple[float, int]:
    """Sampling rate q = B/N and the steps of ``epochs`` epochs of Poisson-sampled DP-SGD.

    The larger of ⌈epochs · steps_per_epoch(q)⌉, the steps make_private runs, and
    ⌈epochs/q⌉, the usual count (60 epochs of B = 256 from N = 60,000: 14,063), so that
    the ε or σ shown covers training with either rule.
    """
    from gaussdp.accounting.calibration import steps_per_epoch

    if batch_size < 1 or dataset_size < 1 or batch_size > dataset_size:
        raise ValueError(
            invalid("batch_size", f"an integer in [1, dataset_size={dataset_size}]", batch_size)
        )
    if not (epochs > 0 and math.isfinite(epochs)):
        raise ValueError(invalid("epochs", "a finite number > 0", epochs))
    q = batch_size / dataset_size
    steps = max(1, math.ceil(epochs * steps_per_epoch(q)), math.ceil(epochs / q))
    if steps > MAX_COUNT:
        constraint = f"a finite number > 0 giving at most 2**53 steps at q = {q:g}"
        raise ValueError(invalid("epochs", constraint, epochs))
    return q, steps


def dpsgd_rows(
    noise_multiplier: float | None,
    batch_size: int,
    dataset_size: int,
    epochs: float,
    delta: float,
    target_epsilon: float | None,
) -> list[tuple[str, str, object]]:
    """The rows of ``gaussdp dpsgd``."""
    from gaussdp.accounting import (
        PLDAccountant,
        RDPAccountant,
        Subsampled,
        calibrate_noise_multiplier,
    )
    from gaussdp.mechanisms import Gaussian

    q, steps = dpsgd_steps(batch_size, dataset_size, epochs)
    rows: list[tuple[str, str, object]] = [
        ("sampling rate q", "sample_rate", q),
        ("steps", "steps", steps),
        ("δ", "delta", delta),
    ]
    if target_epsilon is not None:
        sigma = calibrate_noise_multiplier(target_epsilon, delta, q, steps)
        rows.append(("target ε", "target_epsilon", target_epsilon))
        rows.append(("noise multiplier σ (calibrated, rtol 1e-3)", "noise_multiplier", sigma))
    elif noise_multiplier is None:
        raise ValueError(
            invalid("noise_multiplier", "given unless --target-epsilon is", noise_multiplier)
        )
    else:
        sigma = check_positive("noise_multiplier", noise_multiplier)
        rows.append(("noise multiplier σ", "noise_multiplier", sigma))
    event = Subsampled(Gaussian(sigma), q)
    bounds = PLDAccountant().compose(event, steps).epsilon(delta)
    rdp = RDPAccountant().compose(event, steps).epsilon(delta).upper
    rows += [
        (_upper_label(bounds), "epsilon_upper", bounds.upper),
        ("ε lower bound (PLD)", "epsilon_lower", bounds.lower),
        ("ε RDP (upper bound, looser)", "epsilon_rdp", rdp),
    ]
    return rows


def _upper_label(bounds: EpsilonBounds) -> str:
    """The upper bound's row label, naming the analysis that certified it (PLD or RDP)."""
    return f"ε upper bound ({(bounds.method or 'pld').upper()}, certified)"


def register(app: typer.Typer) -> None:
    """Add ``account`` and ``dpsgd`` to ``app``."""

    @app.command("account")
    @handle_errors(OOM_HINT)
    def account(
        events_file: Annotated[
            Path, typer.Argument(help=r"TOML file of \[\[event]] tables (mechanism, count, …).")
        ],
        delta: Annotated[
            float | None,
            typer.Option("--delta", "-d", help="δ in (0, 1); default: the file's, else 1e-5."),
        ] = None,
        compare: Annotated[
            bool, typer.Option("--compare", help="Also report the RDP and GDP accountants.")
        ] = False,
        value_discretization: DiscretizationOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Privacy of a composition of mechanisms: ε at δ with certified bounds.

        Example: gaussdp account examples/events.toml --compare
        """
        events, file_delta = load_events(events_file)
        chosen = delta if delta is not None else (file_delta if file_delta is not None else 1e-5)
        with progress("accounting…", as_json=as_json):
            rows = account_rows(events, chosen, compare, value_discretization)
        emit(f"Privacy of {events_file.name}", rows, as_json=as_json)

    @app.command("dpsgd")
    @handle_errors("the privacy loss grid does not fit in memory; account fewer steps at once")
    def dpsgd(
        noise_multiplier: Annotated[
            float | None,
            typer.Option(
                "--noise-multiplier", help="σ / clipping norm (omit with --target-epsilon)."
            ),
        ] = None,
        batch_size: Annotated[
            int, typer.Option("--batch-size", help="Expected batch size B.")
        ] = 256,
        dataset_size: Annotated[
            int, typer.Option("--dataset-size", help="Dataset size N.")
        ] = 60000,
        epochs: Annotated[float, typer.Option("--epochs", help="Number of epochs.")] = 1.0,
        delta: Annotated[float, typer.Option("--delta", "-d", help="δ in (0, 1).")] = 1e-5,
        target_epsilon: Annotated[
            float | None,
            typer.Option("--target-epsilon", help="Calibrate the noise multiplier for this ε."),
        ] = None,
        as_json: JsonOption = False,
    ) -> None:
        """ε of Poisson-sampled DP-SGD, or the noise multiplier for a target ε.

        Example: gaussdp dpsgd --noise-multiplier 1.1 --batch-size 256 --dataset-size 60000
        --epochs 60
        """
        if noise_multiplier is not None and target_epsilon is not None:
            fail("give either --noise-multiplier or --target-epsilon, not both")

        def compute() -> list[tuple[str, str, object]]:
            return dpsgd_rows(
                noise_multiplier, batch_size, dataset_size, epochs, delta, target_epsilon
            )

        with progress("accounting…", as_json=as_json):
            rows = compute()
        emit("DP-SGD privacy", rows, as_json=as_json)
