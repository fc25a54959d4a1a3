"""The wheel, installed outside the checkout, has its search spaces and default spec, and runs."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_the_wheel_ships_its_spaces_and_runs_a_trial(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = dist.glob("automl-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # The dependencies come from this environment; the package itself only from the wheel.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
         str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "AUTOML_STORAGE": f"sqlite:///{work}/s.db", "PYTHONSAFEPATH": "1"}
    code = (
        "import automl, sys; from automl.search.space import list_spaces; "
        "from automl.search.spec import load_spec; "
        "print(automl.__file__); print(list_spaces()); print(load_spec('digits').name)"
    )
    out = subprocess.run(
        [python, "-c", code], cwd=work, env=env, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert Path(out[0]).is_relative_to(site), out  # not the checkout
    shipped = sorted(p.stem for p in (ROOT / "search_spaces").glob("*.yaml"))
    assert "digits-mixed" in shipped and out[1] == str(shipped)
    assert out[2] == "digits-cpu"
    start = [env_dir / "bin" / "automl", "study", "start", "--space", "digits-mlp",
             "--n-trials", "1", "--no-remeasure-front"]  # fmt: skip
    done = subprocess.run(start, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "ended: done" in done.stdout


def test_every_package_of_the_source_is_listed_for_the_wheel() -> None:
    import tomllib

    root = Path(__file__).resolve().parent.parent
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(root).parts)
        for top in ("automl", "api")
        for init in (root / top).rglob("__init__.py")
    }
    assert found - listed == set(), "add them to [tool.setuptools] packages in pyproject.toml"
