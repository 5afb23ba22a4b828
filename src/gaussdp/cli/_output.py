"""Shared output helpers for the CLI: one table or one JSON object per command."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

T = TypeVar("T")

console = Console()
error_console = Console(stderr=True)


def fail(message: str) -> NoReturn:
    """Print ``message`` as an error and exit with status 2 (bad usage)."""
    error_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code=2)


def guarded(compute: Callable[[], T]) -> T:
    """Run ``compute``, turning gaussdp's validation errors into a clean CLI error."""
    try:
        return compute()
    except (ValueError, TypeError) as error:
        fail(str(error))


def emit(title: str, rows: list[tuple[str, str, object]], *, as_json: bool) -> None:
    """Print ``rows`` (label, JSON key, value) as a rich table or as one JSON object."""
    if as_json:
        typer.echo(json.dumps({key: value for _, key, value in rows}, indent=2))
        return
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for label, _, value in rows:
        table.add_row(label, format_value(value))
    console.print(table)


def format_value(value: object) -> str:
    """Human formatting: floats to 6 significant digits, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
