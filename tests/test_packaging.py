"""The wheel a user installs: it carries LICENSE and py.typed, installs, and runs.

Built offline with the hatchling of the environment (``--no-build-isolation``)
and installed without dependencies into a clean virtual environment that sees
this environment's packages through a path file (not its editable gaussdp),
so the test needs no network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import gaussdp

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("hatchling", reason="the dev extra provides the offline build backend")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", str(ROOT)),
            *("--no-deps", "--no-build-isolation", "--no-index", "--quiet", "-w", str(out)),
        ],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("gaussdp-*.whl")
    return built


def test_wheel_carries_license_and_py_typed(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "gaussdp/py.typed" in names
    licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert len(licenses) == 1
    text = zipfile.ZipFile(wheel).read(licenses[0]).decode()
    assert text == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA")))
    assert b"License-Expression: Apache-2.0" in metadata
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]


@pytest.mark.slow
def test_wheel_installs_into_a_clean_venv_and_runs(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The dependencies (numpy, typer, ...) come from this environment; its .pth files
    # (the editable gaussdp among them) are not processed from a path-file entry.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(python), "install"),
            *("--no-deps", "--no-index", "--quiet", str(wheel)),
        ],
        check=True,
        timeout=300,
    )
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    version = subprocess.run(
        [str(env_dir / "bin" / "gaussdp"), "--version"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=clean_env,
    )
    assert version.stdout.strip() == f"gaussdp {gaussdp.__version__}"
    where = subprocess.run(
        [str(python), "-c", "import gaussdp.cli, sys; print(gaussdp.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=clean_env,
    )
    assert where.stdout.strip().startswith(site)
    calibrate = subprocess.run(
        [str(env_dir / "bin" / "gaussdp"), "calibrate", "-e", "1", "-d", "1e-6", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=clean_env,
    )
    assert '"sigma_analytic": 4.22467888' in calibrate.stdout
