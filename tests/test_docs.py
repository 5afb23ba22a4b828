"""Every code block of the README and the docs runs as written.

A document's ```python, ```console, ```bash and ```sh blocks run in order in
one temporary folder holding a copy of ``examples/`` and a ``.venv`` link to
the running environment, as a newcomer would run them one after the other in a
fresh checkout: a Python block is a complete program; in a console block each
``$ `` line is a command (other lines are its output); a bash block is a script.
A block that cannot run here (it installs, or builds everything) is preceded
by ``<!-- skip-test: reason -->``; the markers are counted and each needs a
reason. ```text blocks (synopses, output) are not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# Documents whose blocks run here; a doc under docs/ that is not checked says why.
CHECKED = (
    "README.md",
    "docs/getting-started.md",
    "docs/accounting.md",
    "docs/audit.md",
    "docs/release.md",
    "docs/sampling.md",
)
NOT_CHECKED = {
    "docs/ml.md": "its programs need torch: tests/ml/test_ml_docs.py runs them",
    "docs/synth.md": "its quick start reads a people.csv the reader brings (none is shipped)",
    "docs/sampler-exactness.md": "no runnable blocks",
    "docs/index.md": "no runnable blocks",
}
RUN = {"python", "console", "bash", "sh"}
SKIP = re.compile(r"<!--\s*skip-test:\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None  # the reason, when marked


def blocks(doc: str) -> list[Block]:
    """The fenced blocks of ``doc`` in languages that run, in order."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start, lang = i, match.group(1)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = SKIP.search(previous)
        if lang in RUN:
            code = "\n".join(lines[start + 1 : end]) + "\n"
            found.append(Block(doc, start + 1, lang, code, marker.group(1) if marker else None))
        i = end + 1
    return found


def _script(block: Block) -> list[str]:
    if block.lang == "python":
        return [sys.executable, "-c", block.code]
    if block.lang == "console":
        commands, current = [], ""
        for line in block.code.splitlines():
            if current:
                current += "\n" + line
            elif line.startswith("$ "):
                current = line[2:]
            if current and not current.endswith("\\"):
                commands.append(current)
                current = ""
        return ["bash", "-euo", "pipefail", "-c", "\n".join(commands)]
    return ["bash", "-euo", "pipefail", "-c", block.code]


@pytest.mark.slow
@pytest.mark.parametrize("doc", CHECKED)
def test_every_block_runs_in_order(doc: str, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    if sys.prefix != sys.base_prefix:  # `.venv/bin/gaussdp` and `source .venv/bin/activate`
        (tmp_path / ".venv").symlink_to(sys.prefix)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MPLBACKEND": "Agg",
    }
    ran = 0
    for block in blocks(doc):
        if block.skip is not None:
            continue
        proc = subprocess.run(
            _script(block),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, (
            f"{doc}:{block.line} ({block.lang}) exited {proc.returncode}:\n"
            f"{block.code}\n--- stderr ---\n{proc.stderr[-3000:]}"
        )
        ran += 1
    assert ran > 0


def test_skipped_blocks_are_marked_with_a_reason_and_few() -> None:
    every = [b for doc in CHECKED for b in blocks(doc)]
    skipped = [b for b in every if b.skip is not None]
    assert all(b.skip for b in skipped), [f"{b.doc}:{b.line}" for b in skipped if not b.skip]
    # The count, for the record: the README skips `make demo`/`make test` and installs.
    assert len(skipped) <= len(every) // 3, [f"{b.doc}:{b.line}: {b.skip}" for b in skipped]


def test_every_doc_is_checked_or_says_why_not() -> None:
    docs = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    assert docs <= set(CHECKED) | set(NOT_CHECKED), docs - set(CHECKED) - set(NOT_CHECKED)
    assert all(NOT_CHECKED.values())


def test_console_blocks_split_into_commands() -> None:
    block = Block("x.md", 1, "console", "$ echo a \\\n  b   # note\na b\n$ true\n", None)
    assert _script(block)[-1] == "echo a \\\n  b   # note\ntrue"


@pytest.mark.slow
def test_the_reference_builds_without_warnings(tmp_path: Path) -> None:
    """``make docs``: mkdocs in strict mode, every page and docstring, into a temporary folder."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr
    page = (tmp_path / "site" / "api" / "release" / "index.html").read_text(encoding="utf-8")
    assert 'id="gaussdp.release.Release"' in page


def test_every_public_name_is_documented() -> None:
    """The reference documents each module's ``__all__``: classes and functions need a docstring."""
    import importlib
    import importlib.util
    import inspect

    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        (module_name,) = re.findall(r"^::: ([\w.]+)$", page.read_text(encoding="utf-8"), re.M)
        extra = {"gaussdp.ml": "torch", "gaussdp.plot": "matplotlib"}.get(module_name)
        if extra is not None and importlib.util.find_spec(extra) is None:
            continue  # an optional extra; make test installs it
        module = importlib.import_module(module_name)
        assert inspect.getdoc(module), module_name
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert inspect.getdoc(obj), f"{module_name}.{name} has no docstring"


def _megabytes(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([mg])", size.lower()).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "g" else 1)


def test_the_spark_cluster_recipe_fits_the_scripts_workers() -> None:
    # An executor larger than every worker is never scheduled: the release waits forever,
    # silently (Spark's default executor memory is 1g).
    script = (ROOT / "scripts" / "spark-cluster").read_text()
    (worker,) = re.findall(r"^memory=(\S+)$", script, re.MULTILINE)
    docs = (ROOT / "docs" / "release.md").read_text()
    recipes = re.findall(r'PYSPARK_SUBMIT_ARGS="--master spark://127\.0\.0\.1[^"]*"', docs)
    assert recipes
    for recipe in recipes:
        executor = re.search(r"--executor-memory (\S+)", recipe)
        assert executor is not None, recipe
        assert _megabytes(executor.group(1)) <= _megabytes(worker), recipe


def test_the_readme_cli_block_needs_only_the_base_install(tmp_path: Path) -> None:
    # After `make demo` (the base install) the README's command-line block must run: the
    # dev venv has pyarrow, so it is hidden here (--out visits.parquet once needed it).
    import gaussdp

    (block,) = [b for b in blocks("README.md") if "--out visits.parquet" in b.code]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    hidden = tmp_path / "hidden" / "pyarrow"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('not in the base install')\n")
    path = [str(hidden.parent), str(Path(gaussdp.__file__).parents[1])]
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(path),
    }
    proc = subprocess.run(
        _script(block), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import duckdb

    ((rows,),) = duckdb.sql(f"SELECT COUNT(*) FROM '{tmp_path / 'visits.parquet'}'").fetchall()
    assert rows == 36


def _shown_output(block: Block) -> list[str]:
    """The output lines a console block shows (the lines that are not ``$ `` commands)."""
    lines = block.code.splitlines()
    shown, continued = [], False
    for line in lines:
        if line.startswith("$ ") or continued:
            continued = line.endswith("\\")
            continue
        if line.strip():
            shown.append(line)
    return shown


@pytest.mark.slow
def test_the_getting_started_ledger_refuses_the_third_release_as_shown(tmp_path: Path) -> None:
    # Once: the text said the third release was refused, but the ledger of ε = 2.5
    # admitted it (three releases composed to ε = 1.58) and the block showed nothing.
    (block,) = [
        b for b in blocks("docs/getting-started.md") if "ledger init tutorial-budget" in b.code
    ]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        _script(block), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = _shown_output(block)
    assert "exit status 3: refused" in shown
    printed = (proc.stdout + proc.stderr).splitlines()
    assert all(line in printed for line in shown), (shown, printed)


def test_no_example_or_doc_imports_private_api() -> None:
    # Once: two examples and getting-started imported gaussdp._validation.format_bound
    # (now gaussdp.accounting.format_bound); what users copy must be public.
    texts = {str(p.relative_to(ROOT)): p.read_text("utf-8") for p in ROOT.glob("examples/*.py")}
    for doc in (*CHECKED, *NOT_CHECKED):
        for block in blocks(doc):
            texts[f"{doc}:{block.line}"] = block.code
    private = re.compile(r"\b(from|import)\s+gaussdp(\.\w+)*\._")
    assert [where for where, text in texts.items() if private.search(text)] == []


def test_no_example_or_doc_releases_on_a_ledger_with_a_written_seed() -> None:
    # Once: examples/one_ledger.py spent a real ledger on noise from ChaCha20Random(1),
    # (2), (3): anyone with the source regenerates the noise and subtracts it.
    texts = {str(p.relative_to(ROOT)): p.read_text("utf-8") for p in ROOT.glob("examples/*.py")}
    for doc in (*CHECKED, *NOT_CHECKED):
        for block in blocks(doc):
            texts[f"{doc}:{block.line}"] = block.code
    seeded = [
        where
        for where, text in texts.items()
        if "ChaCha20Random(" in text and re.search(r"\b(ledger|filter)\s*=", text)
    ]
    assert seeded == []
    for example in ("one_ledger.py", "federated.py"):
        assert "ChaCha20Random" not in (ROOT / "examples" / example).read_text("utf-8")
