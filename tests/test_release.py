"""What a release carries: the version and the commit (``--version``, ``proxyfleet_build_info``),
the LICENSE, a CHANGELOG entry for the version, and an install the README's quick way that
needs no libvirt for ``validate`` (the pre-commit hook's environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from reconciler import __version__
from reconciler.adapters.surface.metrics import Metrics
from reconciler.buildinfo import build
from reconciler.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fleet-repo"


def head() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def python_c(code: str, *argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -c code argv...`` with this checkout's ``reconciler``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-c", code, *argv]
    return subprocess.run(
        run, capture_output=True, text=True, timeout=60, check=False, env=env, cwd=cwd
    )


def test_version_names_the_version_and_the_commit_of_the_checkout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert out.startswith(f"proxyfleet {__version__} (commit {head()[:12]}"), out
    assert out.rstrip().endswith(", from git)"), out


def test_build_info_carries_the_version_and_the_commit() -> None:
    text = Metrics().exposition().decode()
    line = f'proxyfleet_build_info{{commit="{build().commit}",version="{__version__}"}} 1.0'
    assert line in text, text[:400]
    assert build().commit.startswith(head())


def test_the_license_and_a_changelog_entry_for_this_version_ship_beside_the_code() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "Version 2.0" in (ROOT / "LICENSE").read_text()
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"\n## {__version__} " in changelog, "CHANGELOG.md has no entry for this version"


def test_validate_never_imports_libvirt() -> None:
    probe = (
        "import sys; from reconciler.cli import main; "
        f"code = main(['validate', {str(EXAMPLE)!r}]); "
        "assert 'libvirt' not in sys.modules, 'validate imported libvirt'; "
        "raise SystemExit(code)"
    )
    done = python_c(probe)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_fresh_venv_installed_the_quick_way_validates_and_prints_the_unit_for_itself(
    tmp_path: Path,
) -> None:
    """``pip install .`` from the checkout (README's quick path, what pipx and the pre-commit
    hook do), offline: the dependencies come from this test's own environment, the package
    is built and installed anew, without libvirt."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    fresh = env_dir / "bin" / "python"
    site = subprocess.run(
        [fresh, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Every library directory of this process but the checkout: the dependencies, and
    # setuptools and wheel for the build (the test extra has them).
    stdlib = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
    ours = [p for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() != ROOT]
    deps = [p for p in ours if p not in stdlib and "lib-dynload" not in p]
    (Path(site) / "deps-of-the-test-env.pth").write_text("\n".join(deps) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", CC="false")
    install = subprocess.run(
        [fresh, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    program = env_dir / "bin" / "proxyfleet"

    version = subprocess.run(
        [program, "--version"], capture_output=True, text=True, check=False, env=env, cwd=tmp_path
    )
    checked = subprocess.run(
        [program, "validate", str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=tmp_path,
    )

    assert version.returncode == 0, version.stderr
    assert version.stdout == f"proxyfleet {__version__} (commit {head()[:12]}, from build)\n"
    assert checked.returncode == 0, checked.stdout + checked.stderr
    where = subprocess.run(
        [fresh, "-c", "import reconciler; print(reconciler.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tmp_path,
    ).stdout
    assert where.startswith(site), where  # the installed copy, not the checkout
    unit = subprocess.run(
        [program, "deploy", "print", "unit"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert unit.returncode == 0, unit.stderr  # the package data made it into the wheel
    assert f"ExecStart={env_dir}/bin/proxyfleet run " in unit.stdout, unit.stdout
    assert f"ExecPaths=/usr {env_dir}" in unit.stdout, unit.stdout


def test_a_command_that_talks_to_a_host_names_the_extra_when_libvirt_is_missing(
    tmp_path: Path,
) -> None:
    probe = (
        "import sys; sys.modules['libvirt'] = None; from reconciler.cli import main; "
        "raise SystemExit(main(sys.argv[1:]))"
    )
    repo = ["--repo", str(EXAMPLE)]
    for argv in (["hosts", "check", *repo], ["apply", "--yes", *repo, "--state-dir", "st"]):
        done = python_c(probe, *argv, cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert "pip install 'proxyfleet[libvirt]'" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
