"""Private synthetic data from a census-like panel: 10⁶ rows, 15 columns, several rows per person.

Each person appears in 1–5 yearly records (``person`` is the privacy unit);
sex, race, ethnicity, education, region and citizenship are fixed per person,
age, marital status, employment, occupation, industry, income, hours, household
size and tenure vary by year. Every column has a public domain declared below.
The run bounds each person to 3 cells per marginal, counted at most twice per
cell, spends ε = 1 at δ = 10⁻⁶, writes the synthetic table and prints the
privacy report and the marginals' total-variation errors (against the true
table too: this example evaluates, ``evaluate=True`` is not private).

    python examples/synth_census.py [--rows 1000000] [--out /tmp/census_synth.csv]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random, SystemRandom
from gaussdp.synth import Categorical, Column, Numeric, Synthesizer

COLUMNS: tuple[Column, ...] = (
    Numeric("age", (16, 96), 8, integer=True),
    Categorical("sex", ["F", "M"]),
    Categorical("race", ["white", "black", "asian", "native", "other"]),
    Categorical("hispanic", [False, True]),
    Categorical("marital", ["never", "married", "divorced", "widowed", "separated"]),
    Categorical("education", ["none", "primary", "hs", "some_college", "ba", "ma", "phd", "prof"]),
    Categorical("employment", ["employed", "unemployed", "not_in_lf", "retired"]),
    Categorical("occupation", [f"occ{i}" for i in range(10)], other="none"),
    Categorical("industry", [f"ind{i}" for i in range(12)], other="none"),
    Numeric("income", (0, 250_000), [0, 10e3, 25e3, 40e3, 60e3, 80e3, 100e3, 150e3, 250e3]),
    Numeric("hours", (0, 80), 8, integer=True),
    Categorical("household", [1, 2, 3, 4, 5, 6, 7, 8]),
    Categorical("tenure", ["own", "rent", "other"]),
    Categorical("region", ["ne", "mw", "south", "west"]),
    Categorical("citizen", ["born", "naturalised", "non"]),
)


def make_census(rows: int, seed: int) -> pd.DataFrame:
    """A census-like panel with known dependencies (numpy's generator, for the example only)."""
    g = np.random.default_rng(seed)
    per_person = g.integers(1, 6, size=rows)  # 1–5 records per person, 3 on average
    person = np.repeat(np.arange(rows), per_person)[:rows]
    year = np.concatenate([np.arange(k) for k in per_person])[:rows]
    people = person.max() + 1

    def pick(options: list[object], p: list[float], size: int) -> np.ndarray:
        return np.asarray(options, dtype=object)[g.choice(len(options), size=size, p=p)]

    sex = pick(["F", "M"], [0.51, 0.49], people)
    race = pick(
        ["white", "black", "asian", "native", "other"], [0.6, 0.13, 0.06, 0.01, 0.2], people
    )
    hispanic = g.random(people) < np.where(race == "other", 0.6, 0.08)
    region = pick(["ne", "mw", "south", "west"], [0.17, 0.21, 0.38, 0.24], people)
    citizen = np.where(
        hispanic | (race == "asian"),
        pick(["born", "naturalised", "non"], [0.5, 0.3, 0.2], people),
        pick(["born", "naturalised", "non"], [0.9, 0.06, 0.04], people),
    )
    birth_age = g.integers(16, 90, size=people)
    edu_level = np.clip(g.normal(3 + (birth_age < 40) * 0.7, 1.6, size=people).round(), 0, 7)
    education = np.asarray(
        ["none", "primary", "hs", "some_college", "ba", "ma", "phd", "prof"], dtype=object
    )[edu_level.astype(int)]
    # Per record (year).
    p = person
    age = np.minimum(birth_age[p] + year, 95)
    marital = np.where(
        age < 25,
        pick(
            ["never", "married", "divorced", "widowed", "separated"],
            [0.85, 0.12, 0.01, 0, 0.02],
            rows,
        ),
        pick(
            ["never", "married", "divorced", "widowed", "separated"],
            [0.25, 0.5, 0.13, 0.08, 0.04],
            rows,
        ),
    )
    retired = age >= 65
    u = g.random(rows)
    employment = np.where(
        retired & (u < 0.8),
        "retired",
        np.where(u < 0.06, "unemployed", np.where(u < 0.2, "not_in_lf", "employed")),
    ).astype(object)
    working = employment == "employed"
    occ = np.clip((edu_level[p] * 1.2 + g.normal(0, 1.5, rows)).round(), 0, 9).astype(int)
    occupation = np.where(working, np.char.add("occ", occ.astype(str)).astype(object), None)
    ind = (occ + g.integers(0, 4, rows)) % 12
    industry = np.where(working, np.char.add("ind", ind.astype(str)).astype(object), None)
    income = np.where(
        working,
        np.exp(g.normal(9.8 + 0.18 * edu_level[p] + 0.004 * np.minimum(age, 60), 0.6)),
        np.exp(g.normal(8.5, 1.0, rows)) * (g.random(rows) < 0.6),
    )
    hours = np.where(working, np.clip(g.normal(40, 8, rows), 1, 80).round(), 0)
    household = np.clip(g.poisson(np.where(marital == "married", 2.2, 0.8)) + 1, 1, 8)
    tenure = np.where(
        income > 60e3,
        pick(["own", "rent", "other"], [0.8, 0.18, 0.02], rows),
        pick(["own", "rent", "other"], [0.45, 0.5, 0.05], rows),
    )
    return pd.DataFrame(
        {
            "person": p,
            "age": age,
            "sex": sex[p],
            "race": race[p],
            "hispanic": hispanic[p],
            "marital": marital,
            "education": education[p],
            "employment": employment,
            "occupation": occupation,
            "industry": industry,
            "income": income,
            "hours": hours,
            "household": household,
            "tenure": tenure,
            "region": region[p],
            "citizen": citizen[p],
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--out", default="/tmp/census_synth.csv")
    parser.add_argument("--seed", type=int, default=None, help="reproducible run (ChaCha20)")
    parser.add_argument("--method", choices=["mst", "aim"], default="mst")
    args = parser.parse_args()
    data = make_census(args.rows, seed=1)
    print(f"{len(data)} rows, {data['person'].nunique()} persons, {len(COLUMNS)} columns")
    synth = Synthesizer(
        data,
        columns=COLUMNS,
        privacy_unit="person",
        budget=Budget(epsilon=1.0, delta=1e-6),
        max_groups_per_unit=3,
        max_rows_per_group=2,
        method=args.method,
    )
    print(f"planned: rho = {synth.report.rho:.6g}, epsilon = {synth.report.epsilon:.6g}")
    start = time.perf_counter()
    rng = SystemRandom() if args.seed is None else ChaCha20Random(args.seed)
    result = synth.run(rng=rng, evaluate=True)
    seconds = time.perf_counter() - start
    result.frame.to_csv(args.out, index=False)
    print(f"{len(result.frame)} synthetic rows in {seconds:.1f} s -> {args.out}")
    print("selected:", ", ".join("-".join(clique) for clique in result.tree))
    if result.merged:
        print("compressed:", {a: len(cells) for a, cells in result.merged.items()})
    summary = result.quality.groupby("order")[["tv_measured", "tv_true"]].mean()
    print("mean TV distance per marginal order:")
    print(summary.to_string())


if __name__ == "__main__":
    main()
