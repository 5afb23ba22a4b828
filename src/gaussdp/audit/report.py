r"""A self-contained HTML report of a release or a ledger, for a reviewer.

One file with no network access: styles inline, figures as inline SVG drawn here
(no plotting library needed). It shows

* the results table, and each statistic's values with their confidence intervals
  drawn as error bars, one row per group;
* the privacy report in plain words: what is protected (the privacy unit), what
  was spent, what an attacker can and cannot learn — the trade-off curve next to
  the DRS reference curves, and the membership-inference bound
  TPR ≤ 1 − f(FPR) (:mod:`gaussdp.privacy.tradeoff`);
* the budget used and left (from the ledger when one is given);
* how the numbers were computed (mechanism, accounting, the bounding SQL).

The trade-off curve of a release is built from its certified privacy profile:
μ-GDP mode uses δ(ε) = e^A δ_μ(ε − 2A) plus partition selection's δ
(:func:`gaussdp.mechanisms.gdp_delta_with_slack`), ρ-zCDP mode uses CKS Cor 13 plus
that δ, and DRS Prop 2.12 turns the profile into a curve — on the safe side. PLD mode
composes the plan's event with the accountant the plan was certified with (the
budget's, :func:`gaussdp.accounting.filter.budget_accountant`) and turns its certified
(ε, δ) pairs — slack and partition selection's δ included — into a curve the same way.
"""

from __future__ import annotations

import datetime as _dt
import functools
import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from gaussdp._validation import format_bound
from gaussdp.accounting.filter import budget_accountant, left_text
from gaussdp.errors import invalid
from gaussdp.mechanisms import gdp_delta_with_slack
from gaussdp.privacy import zcdp_delta
from gaussdp.privacy.tradeoff import PROFILE_DELTAS, TradeoffCurve, explain

if TYPE_CHECKING:
    from gaussdp.accounting.accountants import Accountant
    from gaussdp.accounting.events import Event
    from gaussdp.budget import Budget
    from gaussdp.release import Ledger, PrivacyReport, ReleaseResult

__all__ = ["html_report", "release_curve"]

_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
_REFERENCE_MUS = (0.5, 1.0, 3.0, 6.0)
_FPRS = (1e-4, 1e-3, 1e-2, 1e-1)
_SVG_NS = "http://www.w3.org/2000/svg"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt_up(value: object) -> str:
    """A cost (ρ, μ, ε) or other upper bound as text: floats rounded up (format_bound)."""
    if isinstance(value, float) and not math.isnan(value):
        return format_bound(value, up=True)
    return _fmt(value)


def _fmt(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:.6g}"
    return str(value)


# -- the privacy curve of a release -------------------------------------------------------
def release_curve(
    mode: str,
    *,
    mu: float | None,
    rho: float,
    slack: float,
    selection_delta: float,
    event: Event | None = None,
    budget: Budget | None = None,
) -> TradeoffCurve:
    r"""The certified trade-off curve of a release (or a ledger's spending).

    μ mode: δ(ε) = e^A δ_μ(ε − 2A) + δ_sel; ρ mode: CKS Cor 13 + δ_sel; then
    DRS Prop 2.12 (:meth:`TradeoffCurve.from_profile`). With A = 0 and δ_sel = 0
    in μ mode the curve is G_μ exactly. PLD mode, given the plan's ``event`` and
    ``budget``: the certified (ε, δ) pairs of the event composed by the budget's
    accountant, the one that certified the plan's ε (:func:`_pld_curve`); without
    them, the ρ curve (valid, looser).
    """
    if mode == "pld" and event is not None and budget is not None:
        return _release_pld_curve(event, budget)
    if mode == "gdp" and mu is not None:
        if slack == 0.0 and selection_delta == 0.0:
            return TradeoffCurve.from_gdp(mu)

        def delta_mu(e: float) -> float:
            return min(1.0, gdp_delta_with_slack(mu, e, slack) + selection_delta)

        return TradeoffCurve.from_profile(
            delta_mu, description=f"{format_bound(mu, up=True, digits=4)}-GDP (release)"
        )

    def delta_rho(e: float) -> float:
        return min(1.0, zcdp_delta(rho, e) + selection_delta)

    return TradeoffCurve.from_profile(
        delta_rho, description=f"{format_bound(rho, up=True, digits=4)}-zCDP (release)"
    )


@functools.lru_cache(maxsize=8)
def _release_pld_curve(event: Event, budget: Budget) -> TradeoffCurve:
    """:func:`_pld_curve` of ``event`` composed by ``budget``'s accountant, kept for the
    last few releases: ~65 certified ε's, which a release's HTML report, its
    ``explain`` and the caller of :func:`release_curve` would otherwise each compute
    (events, budgets and curves are frozen values)."""
    return _pld_curve(budget_accountant(budget).compose(event), budget.delta)


def _pld_curve(accountant: Accountant, delta: float | None) -> TradeoffCurve:
    """The curve of a PLD-mode release: :meth:`TradeoffCurve.from_delta_profile` over
    its default δ grid and the budget's δ (certified pairs: on the safe side)."""
    deltas = [*PROFILE_DELTAS, *([] if delta is None else [delta])]
    at = ""
    if delta is not None:
        bound = format_bound(accountant.epsilon(delta).upper, up=True, digits=4)
        at = f": ε ≤ {bound} at δ = {format_bound(delta, up=True, digits=3)}"
    return TradeoffCurve.from_delta_profile(
        accountant, deltas=deltas, description=f"PLD (release){at}"
    )


def _report_curve(report: PrivacyReport) -> TradeoffCurve:
    return release_curve(
        report.mode,
        mu=report.mu,
        rho=report.rho,
        slack=report.slack,
        selection_delta=report.selection_delta,
        event=report.event,
        budget=report.budget,
    )


# -- inline SVG ---------------------------------------------------------------------------
def _svg_errorbars(
    labels: Sequence[str],
    values: Sequence[float],
    lows: Sequence[float],
    highs: Sequence[float],
    title: str,
) -> str:
    """Values with their interval, one row per label (horizontal error bars)."""
    width, left, right, row = 640, 170, 20, 22
    top, bottom = 28, 34
    height = top + bottom + row * len(labels)
    finite = [v for v in (*values, *lows, *highs) if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 1.0, hi + 1.0
    pad = 0.05 * (hi - lo)
    lo, hi = lo - pad, hi + pad

    def x(v: float) -> float:
        return left + (width - left - right) * (v - lo) / (hi - lo)

    parts = [
        f'<svg class="figure" role="img" aria-label="{_e(title)}" xmlns="{_SVG_NS}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f'<text x="{width / 2}" y="18" text-anchor="middle" class="title">{_e(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
        'class="axis"/>',
    ]
    for tick in np.linspace(lo + pad, hi - pad, 5):
        parts.append(
            f'<text x="{x(tick):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
            f"{_e(f'{tick:.4g}')}</text>"
        )
    for i, (label, v, a, b) in enumerate(zip(labels, values, lows, highs, strict=True)):
        y = top + row * i + row / 2
        parts.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{_e(label)}</text>')
        if math.isfinite(a) and math.isfinite(b):
            parts.append(
                f'<line x1="{x(a):.1f}" y1="{y:.1f}" x2="{x(b):.1f}" y2="{y:.1f}" class="ci"/>'
                + "".join(
                    f'<line x1="{x(e):.1f}" y1="{y - 5:.1f}" x2="{x(e):.1f}" y2="{y + 5:.1f}" '
                    'class="ci"/>'
                    for e in (a, b)
                )
            )
        if math.isfinite(v):
            parts.append(f'<circle cx="{x(v):.1f}" cy="{y:.1f}" r="3.5" class="point"/>')
    parts.append("</svg>")
    return "".join(parts)


def _svg_curves(
    series: Sequence[tuple[str, np.ndarray, np.ndarray, bool]],
    title: str,
    xlabel: str,
    ylabel: str,
    log: bool,
) -> str:
    """Curves (label, x, y, emphasised) on [0, 1]² or, with ``log``, [1e-6, 1]² in log10."""
    size, margin = 360, 48
    inner = size - 2 * margin

    def tx(v: np.ndarray) -> np.ndarray:
        return np.log10(np.clip(v, 1e-6, 1.0)) / 6.0 + 1.0 if log else v

    parts = [
        f'<svg class="figure" role="img" aria-label="{_e(title)}" xmlns="{_SVG_NS}" '
        f'width="{size + 190}" height="{size}" viewBox="0 0 {size + 190} {size}">',
        f'<text x="{size / 2}" y="18" text-anchor="middle" class="title">{_e(title)}</text>',
        f'<rect x="{margin}" y="{margin}" width="{inner}" height="{inner}" class="frame"/>',
        f'<text x="{size / 2}" y="{size - 10}" text-anchor="middle">{_e(xlabel)}</text>',
        f'<text x="14" y="{size / 2}" text-anchor="middle" transform="rotate(-90 14 {size / 2})">'
        f"{_e(ylabel)}</text>",
    ]
    ticks = (
        [(0.0, "10⁻⁶"), (0.5, "10⁻³"), (1.0, "1")]
        if log
        else [(0.0, "0"), (0.5, "0.5"), (1.0, "1")]
    )
    for pos, text in ticks:
        px, py = margin + inner * pos, margin + inner * (1 - pos)
        parts.append(
            f'<text x="{px:.1f}" y="{margin + inner + 16}" text-anchor="middle">{text}</text>'
        )
        parts.append(f'<text x="{margin - 6}" y="{py + 4:.1f}" text-anchor="end">{text}</text>')
    for i, (label, xs, ys, strong) in enumerate(series):
        colour = _COLOURS[i % len(_COLOURS)]
        xs_px = margin + inner * tx(np.asarray(xs, dtype=float))
        ys_px = margin + inner * (1 - tx(np.asarray(ys, dtype=float)))
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(xs_px, ys_px, strict=True))
        dash = "" if strong else ' stroke-dasharray="4 3"'
        stroke = 2.5 if strong else 1.2
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="{stroke}"'
            f"{dash}/>"
        )
        ly = margin + 14 * i
        parts.append(
            f'<line x1="{size + 4}" y1="{ly}" x2="{size + 24}" y2="{ly}" stroke="{colour}" '
            f'stroke-width="{stroke}"{dash}/>'
            f'<text x="{size + 28}" y="{ly + 4}">{_e(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _privacy_figures(curve: TradeoffCurve) -> str:
    alpha = np.linspace(0.0, 1.0, 201)
    fpr = np.geomspace(1e-6, 1.0, 121)
    refs = [(f"G_{m:g}", TradeoffCurve.from_gdp(m)) for m in _REFERENCE_MUS]
    tradeoff = _svg_curves(
        [("this release", alpha, curve(alpha), True)]
        + [(name, alpha, c(alpha), False) for name, c in refs],
        "Trade-off: least false-negative rate of any attack",
        "false-positive rate α",
        "false-negative rate f(α)",
        log=False,
    )
    roc = _svg_curves(
        [("max TPR, this release", fpr, curve.max_tpr(fpr), True)]
        + [(f"max TPR, {name}", fpr, c.max_tpr(fpr), False) for name, c in refs]
        + [("random guess", fpr, fpr, False)],
        "Membership inference: largest true-positive rate",
        "false-positive rate",
        "true-positive rate",
        log=True,
    )
    return f'<div class="figures">{tradeoff}{roc}</div>'


# -- sections -----------------------------------------------------------------------------
def _results_section(result: ReleaseResult) -> str:
    frame = result.frame
    fixed = {"statistic", "value", "std", "ci_low", "ci_high"}
    keys = [c for c in frame.columns if c not in fixed]
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(_fmt(row[c]))}</td>" for c in frame.columns) + "</tr>"
        for _, row in frame.iterrows()
    )

    def used(value: object) -> bool:
        return str(value) not in ("", "nan", "None", "<NA>")

    # One panel per query: the statistic and the group columns it uses.
    panel = [
        (str(r["statistic"]), tuple(k for k in keys if used(r[k]))) for _, r in frame.iterrows()
    ]
    figures = []
    for name in dict.fromkeys(panel):
        part = frame[[p == name for p in panel]]
        labels = [" / ".join(str(r[k]) for k in name[1]) or "all" for _, r in part.iterrows()]
        groups = [k for k in name[1] if k != "bin"]
        by = f" by {', '.join(groups)}" if groups else ""
        figures.append(
            _svg_errorbars(
                labels,
                [float(v) for v in part["value"]],
                [float(v) for v in part["ci_low"]],
                [float(v) for v in part["ci_high"]],
                f"{name[0]}{by} with its confidence interval",
            )
        )
    return (
        "<section id='results'><h2>Results</h2>"
        "<p>Each value carries noise; the interval holds the noise-free value of the "
        "bounded query with the release's confidence.</p>"
        f"<div class='figures'>{''.join(figures)}</div>"
        f"<table class='results'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        "</section>"
    )


def _attacker_section(curve: TradeoffCurve, fpr: float) -> str:
    e = explain(curve, fpr)
    rows = "".join(f"<tr><td>{f:g}</td><td>{float(curve.max_tpr(f)):.4g}</td></tr>" for f in _FPRS)
    return (
        "<section id='attacker'><h2>What an attacker can and cannot learn</h2>"
        f"<p class='headline'>At a false-positive rate of {e.fpr:g}, no membership-inference "
        "attack exceeds a true-positive rate of "
        f"<strong>{format_bound(e.max_tpr, up=True, digits=4)}</strong>.</p>"
        "<p>Someone who sees these results and tries to tell whether one person's data was "
        "used is running a statistical test. Whatever the test, its error rates lie on or "
        "above the trade-off curve below (Dong, Roth, Su, <em>Gaussian Differential "
        "Privacy</em>): the closer the curve to the diagonal, the closer the attacker is to "
        "guessing. Reference curves G_μ: μ = 0.5 very private, μ = 1 reasonably private, "
        "μ = 3 basically non-private, μ = 6 no privacy.</p>"
        f"<ul><li>No attack's true-positive rate exceeds its false-positive rate by more than "
        f"{format_bound(e.advantage, up=True, digits=4)} (the maximal advantage).</li>"
        f"<li>No attack has both error rates below {e.equal_error_rate:.4g}.</li>"
        "<li>What the results do reveal, by design, is the aggregate statistics themselves, up "
        "to the stated noise: population-level facts are not protected.</li></ul>"
        f"{_privacy_figures(curve)}"
        "<table class='small'><thead><tr><th>false-positive rate</th><th>largest true-positive "
        f"rate</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _release_privacy_section(report: PrivacyReport, privacy_unit: str | None) -> str:
    unit = (
        f"one person, identified by the column <code>{_e(privacy_unit)}</code>, with all of "
        "their rows"
        if privacy_unit
        else "one privacy unit, with all of its rows"
    )
    eps = (
        f"(ε = {format_bound(report.epsilon, up=True, digits=4)}, "
        f"δ = {format_bound(report.delta, up=True, digits=3)})"
        if report.epsilon is not None and report.delta is not None
        else "no (ε, δ) target"
    )
    mu = "" if report.mu is None else f"μ = {format_bound(report.mu, up=True, digits=4)} (GDP), "
    return (
        "<section id='privacy'><h2>Privacy report</h2>"
        f"<p><strong>What is protected:</strong> {unit}. Adding or removing it changes what "
        "is released only within the guarantee below (add/remove neighbours).</p>"
        f"<p><strong>What was spent:</strong> {eps}-differential privacy; {mu}ρ = "
        f"{format_bound(report.rho, up=True, digits=4)} (zCDP); partition selection δ = "
        f"{format_bound(report.selection_delta, up=True, digits=3)}. "
        f"Budget of this release: {_e(report.budget)}.</p></section>"
    )


def _budget_section_release(report: PrivacyReport) -> str:
    used = format_bound(report.epsilon, up=True) if report.epsilon is not None else "—"
    total = report.budget.as_dict()
    return (
        "<section id='budget'><h2>Budget</h2><table class='small'><tbody>"
        f"<tr><td>budget</td><td>{_e(total)}</td></tr>"
        f"<tr><td>ε used (at the budget's δ)</td><td>{used}</td></tr>"
        "<tr><td>left</td><td>a release spends its whole budget; use a ledger "
        "(<code>gaussdp ledger</code>) to track a total across releases</td></tr>"
        "</tbody></table></section>"
    )


def _ledger_sections(ledger: Ledger) -> tuple[str, TradeoffCurve | None]:
    summary = ledger.summary()
    unit = summary.symbol
    rows = "".join(
        f"<tr><td>{r.id}</td><td>{_e(r.status)}</td><td>{_e(_fmt_up(r.cost))}</td>"
        f"<td>{_e(r.what)}</td><td>{_e(r.event)}</td>"
        f"<td>{_e(r.who)}</td><td>{_e(r.when)}</td><td>{_e(r.committed_at or '—')}</td></tr>"
        for r in summary.rows
    )
    at = (
        f" at δ = {format_bound(summary.delta, up=True, digits=3)}"
        if summary.unit == "epsilon" and summary.delta
        else ""
    )
    section = (
        "<section id='budget'><h2>Budget used and left</h2><table class='small'><tbody>"
        f"<tr><td>total</td><td>{_e(summary.total)}</td></tr>"
        f"<tr><td>spent</td><td>{unit} = {format_bound(summary.spent, up=True)}{at} ("
        + (
            "no lower bound computed"
            if summary.lower is None
            else f"lower bound {format_bound(summary.lower, up=False)}"
        )
        + "); partition selection δ = "
        f"{format_bound(summary.selection_delta, up=True, digits=3)}"
        f"</td></tr><tr><td>left</td><td>"
        f"{_e(left_text(summary.total, summary.spent, summary.selection_delta, summary.note))}"
        "</td></tr>"
        "</tbody></table>"
        f"<table class='results'><thead><tr><th>id</th><th>status</th><th>{unit} alone</th>"
        "<th>what</th><th>event</th><th>who</th><th>reserved</th><th>committed</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )
    if not summary.rows:
        return section, None
    return section, TradeoffCurve.from_accountant(ledger.accountant())


def _method_section(report: PrivacyReport | None, sql: Sequence[str]) -> str:
    parts = ["<section id='method'><h2>How the numbers were computed</h2>"]
    if report is not None:
        parts.append(
            f"<p><strong>Noise:</strong> {_e(report.mechanism)}, never floating-point noise.</p>"
            f"<p><strong>Accounting:</strong> {_e(report.accounting)}.</p>"
        )
        costs = "".join(
            f"<tr><td>{_e(c.query)}</td><td>{_e(', '.join(c.by) or '—')}</td><td>{_e(c.part)}</td>"
            f"<td>{format_bound(c.sensitivity, up=True, digits=4)}</td>"
            f"<td>{format_bound(c.sigma, up=False, digits=4)}</td><td>{_e(_fmt_up(c.mu))}</td>"
            f"<td>{format_bound(c.rho, up=True, digits=4)}</td></tr>"
            for c in report.costs
        )
        parts.append(
            "<table class='small'><thead><tr><th>query</th><th>by</th><th>part</th>"
            "<th>L2 sensitivity</th><th>noise σ</th><th>μ</th><th>ρ</th></tr></thead>"
            f"<tbody>{costs}</tbody></table>"
        )
    parts.append(
        "<p><strong>Attacker bounds:</strong> the trade-off curve is derived from the certified "
        "privacy profile (DRS Prop 2.12); the membership-inference bound is TPR ≤ 1 − f(FPR).</p>"
    )
    if sql:
        blocks = "".join(f"<pre>{_e(s)}</pre>" for s in sql)
        parts.append(
            "<details><summary>SQL that bounded each unit's contribution</summary>"
            f"{blocks}</details>"
        )
    parts.append("</section>")
    return "".join(parts)


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.8em 0}td,th{border:1px solid #ddd;padding:.25em .6em;
font-size:.9em;text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.headline{font-size:1.15em;background:#eef5ff;padding:.6em;border-left:4px solid #1f77b4}
.figures{display:flex;flex-wrap:wrap;gap:1em}.figure{background:#fff;border:1px solid #eee}
.figure text{font-size:11px;fill:#333}.figure .title{font-size:13px;font-weight:600}
.axis,.frame{stroke:#999;fill:none}.ci{stroke:#1f77b4;stroke-width:1.5}.point{fill:#d62728}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.8em}.meta{color:#666}
"""


def html_report(
    result: ReleaseResult | None = None,
    *,
    ledger: Ledger | None = None,
    privacy_unit: str | None = None,
    title: str | None = None,
    fpr: float = 1e-3,
) -> str:
    r"""The HTML report of a release, of a ledger, or of both, as one self-contained page.

    Parameters
    ----------
    result : ReleaseResult, optional
        A finished release (:meth:`gaussdp.release.Release.run`).
    ledger : Ledger, optional
        A budget ledger; its entries, what is spent and what is left are shown, and
        (without ``result``) the attacker bounds of everything spent so far.
    privacy_unit : str, optional
        The privacy-unit column, named in the plain-words report.
    title : str, optional
        The page title.
    fpr : float, default 1e-3
        The false-positive rate of the headline membership-inference bound.

    Returns
    -------
    str
        The HTML document (UTF-8 text; no external resources).

    Raises
    ------
    ValueError
        If neither ``result`` nor ``ledger`` is given.
    """
    if result is None and ledger is None:
        raise ValueError(invalid("result, ledger", "at least one given", (result, ledger)))
    sections: list[str] = []
    curve: TradeoffCurve | None = None
    report: PrivacyReport | None = None
    sql: Sequence[str] = ()
    if result is not None:
        report, sql = result.report, result.sql
        curve = _report_curve(report)
        sections.append(_release_privacy_section(report, privacy_unit))
    ledger_html = ""
    if ledger is not None:
        ledger_html, ledger_curve = _ledger_sections(ledger)
        if curve is None:
            curve = ledger_curve
    if curve is not None:
        sections.append(_attacker_section(curve, fpr))
    if result is not None:
        sections.insert(0, _results_section(result))
    if ledger is not None:
        sections.append(ledger_html)
    elif report is not None:
        sections.append(_budget_section_release(report))
    sections.append(_method_section(report, sql))
    heading = title or (
        "Differentially private release" if result is not None else "Privacy ledger"
    )
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{_e(heading)}"
        f"</title><style>{_STYLE}</style></head><body><h1>{_e(heading)}</h1>"
        f"<p class='meta'>Generated by gaussdp on {stamp}. This page needs no network.</p>"
        + "".join(sections)
        + "</body></html>"
    )
