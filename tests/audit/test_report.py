"""The HTML report, rendered in a real headless Chromium (Selenium, no network).

``make browser`` (part of ``make test``) installs Debian's chromium and
chromium-driver; without them, or without selenium, the browser test is skipped
and the content tests still run. The screenshot is kept under pytest's tmp dir.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gaussdp._validation import format_bound
from gaussdp.accounting.filter import budget_accountant
from gaussdp.audit.report import html_report, release_curve
from gaussdp.privacy import gdp_tradeoff
from gaussdp.privacy.tradeoff import TradeoffCurve
from gaussdp.random import ChaCha20Random
from gaussdp.release import Budget, Ledger, Release, ReleaseResult

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def result() -> ReleaseResult:
    data = pd.DataFrame(
        {
            "user": [1, 1, 2, 3, 4, 5, 6, 6, 7, 8],
            "day": ["mon", "tue", "mon", "mon", "tue", "wed", "wed", "mon", "tue", "mon"],
            "minutes": [10.0, 30.0, 5.0, 50.0, 20.0, 15.0, 45.0, 25.0, 35.0, 40.0],
        }
    )
    release = (
        Release(
            data,
            privacy_unit="user",
            budget=Budget(epsilon=1.0, delta=1e-6),
            max_groups_per_unit=2,
            max_rows_per_group=1,
        )
        .count(by="day", keys=["mon", "tue", "wed"])
        .mean("minutes", bounds=(0, 60))
    )
    return release.run(rng=ChaCha20Random(3))


def test_report_content_is_self_contained(result: ReleaseResult) -> None:
    page = html_report(result, privacy_unit="user")
    assert page.startswith("<!DOCTYPE html>")
    # No network: no external scripts, styles, images or fonts.
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", page)
    assert "<script" not in page
    assert page.count("<svg") == 4  # two statistics' error bars, trade-off, MIA
    assert "<code>user</code>" in page
    assert "no membership-inference attack exceeds a true-positive rate of" in page
    for value in result.frame["value"]:
        assert f"{value:.6g}" in page
    # Bounds are shown rounded outward (an upper bound up), never to nearest.
    assert f"ε = {format_bound(result.report.epsilon, up=True, digits=4)}, δ" in page


def test_release_curve_is_g_mu_without_slack_and_safe_with_it() -> None:
    exact = release_curve("gdp", mu=1.0, rho=0.5, slack=0.0, selection_delta=0.0)
    assert exact.exact
    assert exact(0.05) == pytest.approx(gdp_tradeoff(1.0, 0.05))
    with_delta = release_curve("gdp", mu=1.0, rho=0.5, slack=1e-60, selection_delta=1e-6)
    assert with_delta(0.05) <= gdp_tradeoff(1.0, 0.05)
    assert with_delta(0.05) >= gdp_tradeoff(1.0, 0.05) - 2e-3  # the grid of ε costs little


def test_a_pld_release_is_drawn_from_its_plan_s_pld(result: ReleaseResult) -> None:
    """PLD mode: the curve of the plan's event composed by the budget's accountant (the one
    that certified its ε), tighter than the ρ-zCDP curve it was drawn from before."""
    report = result.report
    assert report.mode == "pld"
    assert report.event is not None
    assert report.epsilon is not None
    assert report.delta is not None
    curve = release_curve(
        "pld",
        mu=None,
        rho=report.rho,
        slack=report.slack,
        selection_delta=report.selection_delta,
        event=report.event,
        budget=report.budget,
    )
    accountant = budget_accountant(report.budget).compose(report.event)
    assert accountant.epsilon(report.delta).upper == report.epsilon  # the same certification
    assert f"ε ≤ {format_bound(report.epsilon, up=True, digits=4)}" in curve.description
    alphas = np.linspace(0.0, 1.0, 201)
    # It is the supremum of certified (ε, δ) curves (DRS Prop 2.12): at least the plan's
    # own one (Prop 2.4), at most 1 − α, with the accountant's δ(0) as its advantage.
    corner = TradeoffCurve.from_epsilon_delta(report.epsilon, report.delta)
    assert np.all(curve.lower(alphas) >= corner.lower(alphas))
    assert np.all(curve.lower(alphas) <= 1 - alphas + 1e-12)
    assert curve.advantage == accountant.delta(0.0).upper
    # Tighter than the ρ-zCDP curve it was drawn from before.
    rho = release_curve("zcdp", mu=None, rho=report.rho, slack=0.0, selection_delta=0.0)
    assert np.all(curve.lower(alphas) >= rho.lower(alphas) - 1e-9)
    assert curve.advantage < rho.advantage - 0.03  # measured 0.094 vs 0.143
    # The HTML report's attacker bounds are that curve's.
    assert f"more than {curve.advantage:.4g} (the maximal advantage)" in html_report(result)


def test_ledger_report(tmp_path: Path, result: ReleaseResult) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=3.0, delta=1e-5))
    empty = html_report(ledger=ledger)
    assert "Budget used and left" in empty
    with pytest.raises(ValueError, match="at least one given"):
        html_report()


@pytest.mark.skipif(
    shutil.which(CHROMIUM) is None or shutil.which(DRIVER) is None,
    reason="needs chromium and chromium-driver (make browser)",
)
def test_report_renders_in_headless_chromium(tmp_path: Path, result: ReleaseResult) -> None:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    page = tmp_path / "report.html"
    page.write_text(html_report(result, privacy_unit="user"), encoding="utf-8")
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,2400"):
        options.add_argument(flag)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        driver.get(page.as_uri())
        assert driver.title == "Differentially private release"
        figures = driver.find_elements(By.CSS_SELECTOR, "svg.figure")
        assert len(figures) == 4
        assert all(f.size["width"] > 100 and f.size["height"] > 50 for f in figures)
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.figure polyline")) >= 10
        rows = driver.find_elements(By.CSS_SELECTOR, "table.results tbody tr")
        assert len(rows) == len(result.frame)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        shot = tmp_path / "report.png"
        assert driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        driver.quit()


def test_cli_release_and_ledger_write_reports(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gaussdp.cli import app

    runner = CliRunner()
    db, page, ledger_page = tmp_path / "l.db", tmp_path / "r.html", tmp_path / "l.html"
    assert runner.invoke(app, ["ledger", "init", str(db), "-e", "3", "-d", "1e-5"]).exit_code == 0
    result = runner.invoke(
        app,
        [
            "release",
            "examples/visits.toml",
            "--data",
            "examples/visits.csv",
            "--ledger",
            str(db),
            "--report",
            str(page),
        ],
    )
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert "<code>user_id</code>" in text
    assert "Budget used and left" in text
    shown = runner.invoke(app, ["ledger", "show", str(db), "--report", str(ledger_page)])
    assert shown.exit_code == 0, shown.output
    assert "visits.toml" in ledger_page.read_text(encoding="utf-8")
