"""The architecture in the folders: each layer of src/budgetdraft/ imports only the layers below it (read from the
source with `ast`, as budgetdraft.base.importgraph reads a command's code; tests/test_structure.py: no cycle), and
not for annotations either: an import under `if TYPE_CHECKING:` and a module named in an annotation (a string one
too) count here, though the workflow's code inputs leave them out (they never run).

  base < decoding < training < evaluation < report < pipeline        (docs/architecture.md draws it)

At the top of the package only __init__.py, __main__.py and the public names users import (budgetdraft.hf,
budgetdraft.models) live; no layer imports those, nor the lazy public names of budgetdraft.decoding (the import
graph would not see the loop behind them)."""

import ast
from dataclasses import fields
from pathlib import Path

from conftest import tiny_model_dir
from test_structure import import_cycle

from budgetdraft.base.importgraph import import_graph, module_files, type_checking
from budgetdraft.decoding.draftspec import DraftSpec
from budgetdraft.evaluation.cellspec import CellSpec
from budgetdraft.pipeline import cli, warm
from budgetdraft.pipeline.commands import cmd_decode

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


def imported_name(name: str, modules) -> str | None:
    """The budgetdraft module a dotted name is or lies in (budgetdraft.evaluation.cellspec.CellSpec -> its module),
    None for a name outside the package."""
    parts = name.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules), None)


def dotted_names(node: ast.AST) -> set[str]:
    """The dotted names an annotation spells (``a.b.C``, whole), inside a string annotation too."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return dotted_names(ast.parse(node.value, mode="eval"))
        except SyntaxError:
            return set()  # a string that is no annotation (a Literal's value)
    if isinstance(node, ast.Attribute):
        chain, base = [node.attr], node.value
        while isinstance(base, ast.Attribute):
            chain, base = [base.attr, *chain], base.value
        if isinstance(base, ast.Name):
            return {".".join([base.id, *chain])}
    return set().union(*(dotted_names(child) for child in ast.iter_child_nodes(node)))


def annotation_imports(path: Path, modules) -> set[str]:
    """The budgetdraft modules ``path`` imports for annotations only, which budgetdraft.base.importgraph leaves out
    (they never run): the imports under ``if TYPE_CHECKING:`` and the modules its annotations name, string ones and
    those ``from __future__ import annotations`` leaves unevaluated included."""
    tree = ast.parse(path.read_text())
    inside = {
        id(inner) for block in ast.walk(tree) if type_checking(block) for stmt in block.body for inner in ast.walk(stmt)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in inside and isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif id(node) in inside and isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        annotation = getattr(node, "annotation", None) or getattr(node, "returns", None)
        if annotation is not None:
            names |= dotted_names(annotation)
    return {module for name in names if (module := imported_name(name, modules))}


def every_import(package: Path) -> dict[str, set[str]]:
    """module -> the budgetdraft modules it imports, to run or for annotations only."""
    files = module_files(package)
    graph = import_graph(package)
    return {module: (set(graph[module]) | annotation_imports(path, files)) - {module} for module, path in files.items()}


def upward_imports() -> list[str]:
    """'file: imports module (layer above)' for every import that runs up a layer or into the package's face, for
    annotations only too."""
    files, found = module_files(PACKAGE), []
    for module, imported in every_import(PACKAGE).items():
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


def test_no_circle_of_imports_for_annotations_either():
    """No module imports itself through others, counting the imports for annotations only (tests/test_structure.py
    checks the imports that run): a circle of annotations is a circle a reader walks too."""
    cycle = import_cycle(every_import(PACKAGE))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


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


def test_a_test_of_the_rule_sees_an_import_for_annotations_only(tmp_path, monkeypatch):
    """An import under `if TYPE_CHECKING:` runs up a layer as much as one that runs (the workflow's code inputs
    leave it out: budgetdraft.base.importgraph), and so does a module a string annotation names."""
    import shutil

    copy = tmp_path / "budgetdraft"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    drafter = copy / "decoding" / "sparse_drafter.py"
    drafter.write_text(
        drafter.read_text()
        + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        + "    from budgetdraft.evaluation.cellspec import CellSpec  # noqa\n"
    )
    policies = copy / "decoding" / "policies.py"
    policies.write_text(
        policies.read_text() + '\n\ndef of_a_cell(cell: "budgetdraft.evaluation.cells.Cell"):\n    pass\n'
    )
    monkeypatch.setattr(__import__(__name__), "PACKAGE", copy)
    assert upward_imports() == [
        "decoding/policies.py: imports budgetdraft.evaluation.cells (evaluation, above decoding)",
        "decoding/sparse_drafter.py: imports budgetdraft.evaluation.cellspec (evaluation, above decoding)",
    ]


def test_a_cell_gives_the_decoding_layer_its_own_values():
    """A drafter factory takes the decoding layer's DraftSpec, which a cell gives (CellSpec.draft): each of its
    fields is a CellSpec field of the same name, type and default, and a cell's draft carries the cell's values."""
    cell_fields = {f.name: f for f in fields(CellSpec)}
    for f in fields(DraftSpec):
        assert f.name in cell_fields, f"DraftSpec.{f.name} is no field of CellSpec"
        assert (f.type, f.default) == (cell_fields[f.name].type, cell_fields[f.name].default), f.name
    drafter = dict(drafter="d", budget=64, policy="streaming", chunk_size=16, score_window=4, draft_vocab="v.st")
    machine = dict(device="cuda:1", engine="graphs", drafter_dtype="bfloat16")
    cell = CellSpec(label="sd", decodes="sd", verifier="v", prompts="p", dataset="x", context="1k", max_new_tokens=4,
                    gamma=3, verifier_dtype="float16", **drafter, **machine)  # fmt: skip
    assert cell.draft == DraftSpec(**drafter, **machine)


def test_decode_builds_its_drafter_from_its_own_flags(tmp_path, monkeypatch):
    """`decode` hands the paper's drafter factory a DraftSpec of its flags: no cell of a grid it does not have."""
    model = str(tiny_model_dir(tmp_path / "model"))
    given = []

    def factory(verifier, draft, extra, load=None):
        given.append(draft)
        return real(verifier, draft, extra, load)

    real = cmd_decode.drafter_factory
    monkeypatch.setattr(cmd_decode, "drafter_factory", factory)
    monkeypatch.delenv(warm.ENV, raising=False)
    flags = ["--budget", "16", "--chunk-size", "4", "--score-window", "2", "--policy", "streaming", "--threads", "1"]
    cli.main(["decode", "--verifier", model, "--drafter", model, "--max-new-tokens", "3", "--gamma", "2", *flags])
    assert given == [DraftSpec(drafter=model, budget=16, policy="streaming", chunk_size=4, score_window=2)]


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
