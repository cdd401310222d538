"""The architecture in the folders: each layer of src/budgetdraft/ imports only the layers below it (read from the
source with `ast`, as budgetdraft.base.importgraph reads a command's code; tests/test_structure.py: no cycle).

  base < decoding < training < evaluation < report < pipeline        (docs/architecture.md draws it)

At the top of the package only __init__.py, __main__.py and the public names users import (budgetdraft.hf,
budgetdraft.models) live; no layer imports those, nor the lazy public names of budgetdraft.decoding (the import
graph would not see the loop behind them)."""

import ast
from pathlib import Path

from budgetdraft.base.importgraph import import_graph, module_files

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "budgetdraft"
LAYERS = ["base", "decoding", "training", "evaluation", "report", "pipeline"]  # bottom to top
TOP = {"__init__.py", "__main__.py", "hf.py", "models.py"}  # the package's face: nothing of a layer imports these


def layer(module: str) -> int | None:
    """The rank of a module's layer (None: the package's top, a shim)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_the_top_of_the_package_holds_only_its_face():
    files = {p.name for p in PACKAGE.iterdir() if p.is_file() and p.suffix == ".py"}
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert files == TOP and len(files) <= 5, files
    assert folders == set(LAYERS), folders


def upward_imports() -> list[str]:
    """'file: imports module (layer above)' for every import that runs up a layer or into the package's face."""
    files, found = module_files(PACKAGE), []
    for module, imported in import_graph(PACKAGE).items():
        rank = layer(module)
        if rank is None:
            continue  # the face may import any layer
        for other in sorted(imported):
            theirs = layer(other)
            if other != "budgetdraft" and (theirs is None or theirs > rank):
                where = LAYERS[theirs] if theirs is not None else "the package's face"
                found.append(f"{files[module].relative_to(PACKAGE)}: imports {other} ({where}, above {LAYERS[rank]})")
    return found


def test_no_layer_imports_a_layer_above_it():
    assert upward_imports() == []


def test_no_module_of_the_library_imports_the_lazy_public_names():
    lazy = {"speculative", "autoregressive", "Generation", "Round"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "budgetdraft.decoding":
                names = {a.name for a in node.names} & lazy
                if names:
                    found.append(f"{path.relative_to(PACKAGE)}: from budgetdraft.decoding import {sorted(names)}")
    assert found == []


def test_a_test_of_the_rule_sees_an_upward_import(tmp_path, monkeypatch):
    """The rule can fail: a base module that imports the loop is named, with the import that runs up."""
    import shutil

    copy = tmp_path / "budgetdraft"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    names = copy / "base" / "names.py"
    names.write_text(names.read_text() + "\nfrom budgetdraft.decoding.loop import speculative  # noqa\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", copy)
    assert upward_imports() == ["base/names.py: imports budgetdraft.decoding.loop (decoding, above base)"]


def command_line_uses(package: Path) -> list[str]:
    """'file:line: what' for every `argparse` import and every `args.NAME` read outside pipeline/: below the
    command line the library takes typed values (a cell: budgetdraft.evaluation.cellspec.CellSpec), never the
    parser's namespace."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package)
        if where.parts[0] == "pipeline":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
                found.append(f"{where}:{node.lineno}: import argparse")
            elif isinstance(node, ast.ImportFrom) and node.module == "argparse":
                found.append(f"{where}:{node.lineno}: from argparse import")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args":
                found.append(f"{where}:{node.lineno}: args.{node.attr}")
    return found


def test_no_library_module_reads_the_command_lines_namespace(tmp_path):
    assert command_line_uses(PACKAGE) == []
    # the rule can fail: a decoding module that reads a flag is named
    import shutil

    copy = tmp_path / "budgetdraft"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "decoding" / "policies.py", "a") as f:
        f.write("\n\ndef budget_of(args):\n    return args.budget\n")
    assert [u.split(": ", 1)[1] for u in command_line_uses(copy)] == ["args.budget"]
