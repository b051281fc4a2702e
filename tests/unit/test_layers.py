"""The import contracts of ``pyproject.toml`` hold, and catch what they exist to catch.

``make test`` and ``make lint`` run ``lint-imports`` on the tree; these tests also run it on a
copy of the package with one bad import added, to show the contracts fail on it (a contract that
cannot fail guards nothing).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The package and its contracts, outside the repository (no caches, no tests)."""
    shutil.copytree(ROOT / "agents_app", tmp_path / "agents_app",
                    ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(root: Path, module: str, statement: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n\n{statement}\n")


def broken_contracts(output: str) -> str:
    """The "Broken contracts" section of lint-imports' report (the contract names and the imports)."""
    return output.partition("Broken contracts")[2]


@pytest.mark.parametrize(("module", "statement", "reported"), [
    # A service reaching up to an adapter.
    ("agents_app.turns.engine", "from agents_app import consumers",
     "agents_app.turns is not allowed to import agents_app.consumers"),
    # The agent class reaching up to the turn engine (the old façade's way).
    ("agents_app.agent", "from agents_app import turns", "agents_app.agent is not allowed to import agents_app.turns"),
    # Inside turns/: the lock reaching up to recovery (the old lock → recovery → turns cycle).
    ("agents_app.turns.lock", "from agents_app.turns import recovery",
     "agents_app.turns.lock is not allowed to import agents_app.turns.recovery"),
    # A pure module importing Django.
    ("agents_app.streaming.handshake", "from django.db import models",
     "agents_app.streaming.handshake is not allowed to import django"),
    # A service importing a Celery task instead of naming it.
    ("agents_app.approvals", "from agents_app.tasks import conclude_decision",
     "agents_app.approvals -> agents_app.tasks"),
], ids=["service→adapter", "agent→turns", "lock→recovery", "pure→django", "service→tasks"])
def test_a_new_bad_import_breaks_a_contract(copy: Path, module: str, statement: str, reported: str) -> None:
    assert lint_imports(copy).returncode == 0
    add_import(copy, module, statement)
    result = lint_imports(copy)
    assert result.returncode != 0
    assert reported in broken_contracts(result.stdout), result.stdout


def test_an_import_for_annotations_only_is_allowed(copy: Path) -> None:
    """``if TYPE_CHECKING:`` imports name types for the reader; they are not dependencies."""
    add_import(copy, "agents_app.agent", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
               "    from agents_app.turns import engine")
    assert lint_imports(copy).returncode == 0
