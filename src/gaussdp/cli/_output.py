"""Shared output and the error contract of the ``gaussdp`` command.

Every failure reachable from the command line ends in one line on stderr and
an exit status that says what kind of failure it was:

====  ==========================================================================
code  meaning
====  ==========================================================================
0     success
1     a bug in gaussdp (the line says to rerun with ``--verbose`` and report it)
2     bad input: an argument, a spec or events file, a missing file, an output path;
      nothing spent
3     refused: the request would exceed the privacy budget; nothing spent
4     the engine, a file, the ledger, memory or a missing extra failed
130   interrupted (Ctrl-C); nothing released, a ledger reservation stays counted
====  ==========================================================================

``gaussdp --verbose COMMAND ...`` prints the traceback before that line.
"""

from __future__ import annotations

import functools
import json
import math
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, get_args

import typer
from typer._click.exceptions import BadParameter, ClickException

from gaussdp._validation import format_bound
from gaussdp.errors import invalid

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BUG",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_REFUSED",
    "CliError",
    "Shown",
    "ceil_text",
    "emit",
    "fail",
    "floor_text",
    "format_value",
    "handle_errors",
    "progress",
]

EXIT_BUG = 1
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_FAILURE = 4
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """\b
Exit status:
  0    success
  2    bad input (an argument, a spec or events file, a missing file, an output path);
       nothing spent
  3    refused: the privacy budget cannot afford it; nothing spent
  4    the engine, a file, the ledger, memory or a missing extra failed
  130  interrupted (Ctrl-C); nothing released
  1    a bug in gaussdp: rerun with --verbose and report the traceback
Every failure is one line on stderr; gaussdp --verbose COMMAND shows the traceback."""


P = ParamSpec("P")
R = TypeVar("R")


class CliError(Exception):
    """A failure the command already phrased for the user: one line and an exit status."""

    def __init__(self, message: str, code: int, prefix: str = "error:") -> None:
        super().__init__(message)
        self.code = code
        self.prefix = prefix


@dataclass(frozen=True, slots=True)
class Shown:
    """A table cell that reads ``text`` where the JSON object holds ``value`` (a number or null)."""

    text: str
    value: float | int | None


def _one_line(text: str) -> str:
    return " ".join(text.split())


# The root options of the running invocation, set by the ``gaussdp`` callback before
# each command (one command runs per process, or per CliRunner invocation in tests).
OPTIONS: dict[str, bool] = {"verbose": False, "quiet": False}


def is_quiet() -> bool:
    """Whether ``--quiet`` was given: no progress, no informational lines."""
    return OPTIONS["quiet"]


def _say_error(prefix: str, message: str) -> None:
    label = typer.style(prefix, fg="red", bold=True)
    typer.echo(f"{label} {_one_line(message)}", err=True)


def fail(message: str) -> NoReturn:
    """Print ``message`` as one error line and exit with status 2 (bad input)."""
    raise CliError(message, EXIT_BAD_INPUT)


def _interrupted(error: BaseException) -> bool:
    """Ctrl-C, as Python or an engine (DuckDB's ``InterruptException``) reports it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt) or "Interrupt" in type(current).__name__:
            return True
        # DuckDB's fetch reports Ctrl-C as a plain RuntimeError with this message.
        if isinstance(current, RuntimeError) and str(current) == "Query interrupted":
            return True
        current = current.__cause__ or current.__context__
    return False


def classify(error: BaseException, *, oom_hint: str) -> tuple[int, str, str]:
    """The exit status, prefix and one-line message for ``error``."""
    from gaussdp.errors import BudgetExceededError, EngineError, LedgerError, MissingExtraError

    if isinstance(error, CliError):
        return error.code, error.prefix, str(error)
    if _interrupted(error):
        return EXIT_INTERRUPTED, "interrupted;", "nothing released"
    if isinstance(error, BudgetExceededError):
        # The filters' messages already begin with "refused: ".
        return EXIT_REFUSED, "refused:", str(error).removeprefix("refused: ")
    if isinstance(error, MissingExtraError):
        return EXIT_FAILURE, "error:", str(error)  # it names the checkout install too
    if isinstance(error, MemoryError):
        detail = str(error) or "an allocation failed"
        return EXIT_FAILURE, "out of memory:", f"{detail}; {oom_hint}"
    if isinstance(error, (ValueError, TypeError)):
        return EXIT_BAD_INPUT, "error:", str(error)
    if isinstance(error, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return EXIT_BAD_INPUT, "error:", str(error)
    if isinstance(error, (EngineError, LedgerError)):
        return EXIT_FAILURE, "error:", str(error)
    if isinstance(error, OSError):
        return EXIT_FAILURE, "error:", str(error)
    return (
        EXIT_BUG,
        "internal error:",
        f"{type(error).__name__}: {error} (a bug in gaussdp: rerun with --verbose "
        "and report the traceback)",
    )


class _OneLineUsageError(ClickException):
    """A usage error shown as one template line (the contract), not click's usage block."""

    exit_code = EXIT_BAD_INPUT

    def show(self, file: IO[Any] | None = None) -> None:
        _say_error("error:", self.message)


def one_line_usage(error: Exception) -> Exception:
    """The one-line form of a command-line parsing error (click's ``UsageError``).

    A value of the wrong type reads ``--batch-size must be an integer, got '1.5'``;
    other parse errors (an unknown option, a missing value) keep click's one-line
    text, followed by where to look for help.
    """
    param = getattr(error, "param", None)
    problems: list[dict[str, Any]] = getattr(
        error.__cause__, "errors", list
    )()  # typer's pydantic ValidationError
    if isinstance(error, BadParameter) and param is not None and problems:
        annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        types = set(get_args(annotation)) or {annotation}
        kind = "an integer" if int in types else "a number" if float in types else None
        name = max(getattr(param, "opts", None) or [str(param.name)], key=len)
        value = problems[0].get("input")
        message = invalid(name, kind or f"a valid value ({error.message})", value)
    else:
        message = error.format_message() if isinstance(error, ClickException) else str(error)
    ctx = getattr(error, "ctx", None)
    where = f"{ctx.command_path} --help" if ctx is not None else "gaussdp --help"
    result = _OneLineUsageError(f"{message.rstrip('.')} (see {where})")
    return result


def handle_errors(
    oom_hint: str = "ask for less at once",
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a command: every failure becomes one line on stderr and an exit status.

    ``oom_hint`` says what to change when the command runs out of memory.
    """

    def decorate(command: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(command)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return command(*args, **kwargs)
            except (typer.Exit, typer.Abort, SystemExit):
                raise
            except BaseException as error:
                code, prefix, message = classify(error, oom_hint=oom_hint)
                if OPTIONS["verbose"] and not isinstance(error, CliError):
                    traceback.print_exception(error)
                _say_error(prefix, message)
                raise typer.Exit(code) from None

        return wrapper

    return decorate


def is_interrupt(error: BaseException) -> bool:
    """Whether ``error`` is Ctrl-C, directly or as an engine reported it."""
    return _interrupted(error)


def progress(message: str, *, as_json: bool = False) -> Any:
    """A transient status line on stderr, or nothing under ``--quiet`` or ``--json``."""
    import contextlib

    if as_json or is_quiet():
        return contextlib.nullcontext()
    return error_console().status(message)


def error_console() -> Console:
    """The rich console on stderr (progress, errors), for the environment's size now."""
    return _console(True, os.environ.get("COLUMNS"), os.environ.get("LINES"))


def console() -> Console:
    """The rich console for tables on stdout, for the environment's size now.

    Rich reads ``COLUMNS`` (and ``LINES``) once, when a console is made, and a console
    made with them keeps that width: one console for the process gave every later
    invocation in it (typer's ``CliRunner``) the first one's width. Without them the
    width is the terminal's, read as each table prints (80 when not a terminal).
    """
    return _console(False, os.environ.get("COLUMNS"), os.environ.get("LINES"))


@functools.lru_cache(maxsize=16)
def _console(stderr: bool, columns: str | None, lines: str | None) -> Console:
    """One console per stream and size (``columns``, ``lines``: the environment's, which
    rich reads when the console is made)."""
    from rich.console import Console

    return Console(stderr=stderr)


def json_number(value: object) -> object:
    """A JSON-safe value: a :class:`Shown` cell's value; NaN and infinities become null."""
    if isinstance(value, Shown):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def emit(title: str, rows: list[tuple[str, str, object]], *, as_json: bool) -> None:
    """Print ``rows`` (label, JSON key, value) as a table or as one JSON object."""
    if as_json:
        payload = {key: json_number(value) for _, key, value in rows}
        typer.echo(json.dumps(payload, indent=2, allow_nan=False))
        return
    from rich.table import Table

    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for label, key, value in rows:
        # Lower bounds (and the equal-error point, a floor on error) round down, the rest up.
        table.add_row(label, format_value(value, up=not _is_lower(key)))
    console().print(table)


def ceil_text(value: float | None, digits: int = 6) -> str:
    """An upper bound (ε, δ, ρ, μ, TPR, …) to ``digits`` significant digits, rounded up."""
    return "—" if value is None else format_bound(value, up=True, digits=digits)


def floor_text(value: float, digits: int = 6) -> str:
    """A lower bound to ``digits`` significant digits, rounded down."""
    return format_bound(value, up=False, digits=digits)


def _is_lower(key: str) -> bool:
    return "lower" in key or key == "equal_error_rate"


def format_value(value: object, *, up: bool = True) -> str:
    """Human formatting: floats to 6 significant digits rounded outward, None as a dash.

    A float is rounded up (``up=False``: down), never to nearest: the displayed ε, δ,
    σ, … of a bound is still a bound (:func:`gaussdp._validation.format_bound`).
    """
    if value is None:
        return "—"
    if isinstance(value, Shown):
        return value.text
    if isinstance(value, float):
        return format_bound(value, up=up)
    return str(value)
