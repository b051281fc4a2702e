"""The import contracts of ``pyproject.toml`` hold, and catch what they exist to catch.

``make test`` and ``make lint`` run ``lint-imports`` on the tree; these tests also run it on a
copy of the package with one bad import added, to show the contracts fail on it (a contract that
cannot fail guards nothing).
"""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
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


def layered_modules() -> list[str]:
    """The modules and packages named by the first contract's layers (``a | b`` and ``a : b`` alike)."""
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    names = []
    for layer in contract["layers"]:
        names += [name.strip() for name in layer.replace(":", "|").split("|")]
    return names


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    sys.path.insert(0, str(ROOT))
    try:
        return grimp.build_graph("agents_app", exclude_type_checking_imports=True)
    finally:
        sys.path.remove(str(ROOT))


def test_every_module_is_in_a_layer(graph: grimp.ImportGraph) -> None:
    """The first contract names modules, so it cannot be ``exhaustive``: this is its exhaustiveness.

    A new module must be given a layer (packages' ``__init__`` and migrations need none).
    """
    layered = layered_modules()
    packages = {m for m in graph.modules if graph.find_children(m)}
    unplaced = sorted(
        module for module in graph.modules
        if module not in packages and ".migrations" not in module
        and not any(module == name or module.startswith(name + ".") for name in layered)
    )
    assert unplaced == []


def test_no_import_cycle_among_modules(graph: grimp.ImportGraph) -> None:
    """Module by module (imports inside functions count), not package by package: a feature package
    spans layers, so packages may depend on each other both ways while modules never do."""
    cyclic = [
        (importer, imported)
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported.startswith("agents_app") and imported != importer
        and graph.chain_exists(importer=imported, imported=importer)
    ]
    assert cyclic == []


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
    """The "Broken contracts" section of lint-imports' report (the contract names and the imports),
    its lines unwrapped."""
    return " ".join(output.partition("Broken contracts")[2].split())


@pytest.mark.parametrize(("module", "statement", "reported"), [
    # A service reaching up to an adapter.
    ("agents_app.turns.engine", "from agents_app.web import consumers",
     "agents_app.turns is not allowed to import agents_app.web.consumers"),
    # The agent class reaching up to the turn engine (the old façade's way).
    ("agents_app.agent", "from agents_app import turns", "agents_app.agent is not allowed to import agents_app.turns"),
    # Inside recovery/: knowing which processes live reaching up to the recovery it serves.
    ("agents_app.recovery.liveness", "from agents_app.recovery import service",
     "agents_app.recovery.liveness is not allowed to import agents_app.recovery.service"),
    # One feature's service reaching into a sibling feature.
    ("agents_app.schedules.runs", "from agents_app.approvals import service",
     "agents_app.schedules.runs is not allowed to import agents_app.approvals.service"),
    # A pure module importing Django.
    ("agents_app.streaming.handshake", "from django.db import models",
     "agents_app.streaming.handshake is not allowed to import django"),
    # A service importing a Celery task instead of naming it.
    ("agents_app.approvals.service", "from agents_app.approvals.tasks import conclude_decision",
     "agents_app.approvals.service -> agents_app.approvals.tasks"),
], ids=["service→adapter", "agent→turns", "liveness→recovery", "feature→feature", "pure→django", "service→tasks"])
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
