"""Which budgetdraft modules each command runs, read from the source (standard library ``ast`` only, nothing is
imported): the workflow declares them as a rule's code inputs, the warm process preloads them, and
tests/test_structure.py checks the graph for cycles. One home, so no list of modules is kept by hand.

A module's imports are its ``import budgetdraft.x`` / ``from budgetdraft.x import y`` statements at any depth of
the file (lazy imports inside functions too), but those under ``if TYPE_CHECKING:`` (annotations only, never run;
tests/test_layers.py counts them too); importing a module also runs the ``__init__.py`` of every package above it.
A command's modules are its module (``budgetdraft.pipeline.cli.COMMANDS``: one of ``budgetdraft.pipeline.commands``)
and everything that imports, transitively. ``cli`` and ``warm`` only dispatch a command and are not part of it. An
import whose name is computed at run time (``importlib.import_module(decoder.factory)`` in
``budgetdraft.evaluation.cells``: a decoder's factory module, declared in ``budgetdraft.base.methods``) cannot be read
from the source: the caller names such modules (``extra``: the plan's code inputs of a cell, the warm process's
preloads).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
from pathlib import Path

PACKAGE = "budgetdraft"
HERE = Path(__file__).resolve().parents[1]  # the package's directory (every function takes another: a copy of it)
CLI = "pipeline/cli.py"  # where COMMANDS is, under the package directory


def module_files(package: str | Path = HERE) -> dict[str, Path]:
    """budgetdraft's modules by dotted name (a package by its own name, from its __init__.py), from the package
    directory ``package``."""
    files = {}
    for path in sorted(Path(package).rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(package).with_suffix("").parts]
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def type_checking(node: ast.AST) -> bool:
    """Whether ``node`` is an ``if TYPE_CHECKING:`` block: imports for annotations, never run."""
    return isinstance(node, ast.If) and "TYPE_CHECKING" in (
        getattr(node.test, "id", ""),
        getattr(node.test, "attr", ""),
    )


def statements(body: list) -> list[ast.stmt]:
    """Every statement of ``body`` and of the blocks inside it (functions, classes, branches, handlers, cases), but
    the body of an ``if TYPE_CHECKING:`` block. Only statements are visited, never an expression's nodes: an import is
    a statement, and the file's expressions are most of its nodes (the workflow reads every module on each start)."""
    found, todo = [], list(body)
    while todo:
        node = todo.pop()
        found.append(node)
        for field in ("handlers", "cases"):  # except clauses, match cases: blocks of their own
            todo += [stmt for block in getattr(node, field, ()) for stmt in block.body]
        todo += [*getattr(node, "orelse", ()), *getattr(node, "finalbody", ())]
        if not type_checking(node):
            todo += [stmt for stmt in getattr(node, "body", ()) if isinstance(stmt, ast.stmt)]
    return found


def import_statements(source: str | bytes) -> list[list]:
    """The absolute imports of a module's source, at any depth of the file (lazy imports inside functions too),
    except under ``if TYPE_CHECKING:`` (annotations only): ``[module, None]`` for ``import module``, ``[module,
    name]`` for ``from module import name``."""
    found = []
    for node in statements(ast.parse(source).body):
        if isinstance(node, ast.Import):
            found += [[alias.name, None] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [[node.module, alias.name] for alias in node.names]
    return found


def resolved(imports: list[list], modules) -> set[str]:
    """The budgetdraft modules among ``imports`` (`import_statements`): ``from budgetdraft.x import y`` counts as x,
    or as x.y when that is a module."""
    found = {f"{module}.{name}" if f"{module}.{name}" in modules else module for module, name in imports}
    return {name for name in found if name in modules}


def imported_modules(path: Path, modules) -> set[str]:
    """The budgetdraft modules ``path`` imports (`import_statements`, `resolved`)."""
    return resolved(import_statements(Path(path).read_bytes()), modules)


def import_graph(package: str | Path = HERE) -> dict[str, frozenset[str]]:
    """module -> the budgetdraft modules it imports itself (not itself, not transitively). Read once per state of
    the files (their paths, sizes and mtimes) in a process: the workflow asks it for every rule, a test for every
    job. Each file's imports come from `cached_imports` (parsed once per content on this machine)."""
    modules = module_files(package)
    stamp = tuple((name, str(path), path.stat().st_size, path.stat().st_mtime_ns) for name, path in modules.items())
    return _graph(stamp)


@functools.lru_cache(maxsize=8)
def _graph(stamp: tuple) -> dict[str, frozenset[str]]:
    sources = {name: Path(path).read_bytes() for name, path, _size, _mtime in stamp}
    imports = cached_imports(list(sources.values()))
    return {name: frozenset(resolved(found, sources) - {name}) for name, found in zip(sources, imports)}


# Where `cached_imports` keeps each source's imports, under budgetdraft's cache (``base.cache``): parsing the package
# (~110 files) was 0.16 s of every Snakemake start (its code inputs: a dry run, each job of a cluster run); a dry run
# of config/ci.yaml 2.96 -> 2.55 s with the cache (bench/README.md, "Starting Snakemake").
IMPORTS_CACHE = "imports.json"


def cached_imports(sources: list[bytes]) -> list[list]:
    """The `import_statements` of each of ``sources``, in their order: read from the cache file where it holds that
    content's (keyed by its sha256), parsed where not. The file is written again (whole, atomically) with exactly
    these sources' entries when one was parsed, so it holds one package's state and never grows; one that cannot be
    read or written (not JSON, a read-only home) is parsed around, as is an entry that is not a list of [module,
    name] pairs."""
    from budgetdraft.base.cache import cache_root

    path = cache_root() / IMPORTS_CACHE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    keys = [hashlib.sha256(source).hexdigest() for source in sources]
    found, parsed = {}, False
    for key, source in zip(keys, sources):
        if key in found:
            continue
        found[key] = known.get(key)
        if not statements_valid(found[key]):
            found[key], parsed = import_statements(source), True
    if parsed:
        from budgetdraft.base.atomic import atomic_write_text

        with contextlib.suppress(OSError):
            atomic_write_text(path, json.dumps(found))
    return [found[key] for key in keys]


def statements_valid(imports) -> bool:
    """Whether ``imports`` is what `import_statements` gives: a list of [module, name or None] pairs of strings."""
    return isinstance(imports, list) and all(
        isinstance(i, list) and len(i) == 2 and isinstance(i[0], str) and isinstance(i[1], (str, type(None)))
        for i in imports
    )


def packages_above(module: str) -> list[str]:
    """The packages whose __init__.py importing ``module`` runs: budgetdraft.decoding.baselines.eagle3 -> budgetdraft,
    budgetdraft.decoding.baselines."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_closure(modules, graph: dict[str, frozenset[str]]) -> set[str]:
    """``modules`` and every module they import, transitively, with the packages above each."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in graph:
            raise ValueError(f"{name} is not a module of {PACKAGE}")
        seen.add(name)
        todo += [*graph[name], *packages_above(name)]
    return seen


def commands(package: str | Path = HERE) -> dict[str, str]:
    """Every ``python -m budgetdraft COMMAND`` -> its module, read from ``COMMANDS`` in pipeline/cli.py (without
    importing it)."""
    tree = ast.parse((Path(package) / CLI).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMMANDS" for t in node.targets):
            return {name: module for name, (module, _help) in ast.literal_eval(node.value).items()}
    raise ValueError(f"no COMMANDS in {package}/{CLI}")


def command_module(command: str, package: str | Path = HERE) -> str:
    """The module of a ``python -m budgetdraft COMMAND``."""
    known = commands(package)
    if command not in known:
        raise ValueError(f"budgetdraft has no command {command!r}; it has {', '.join(known)}")
    return known[command]


def command_imports(command: str, extra: tuple[str, ...] = (), package: str | Path = HERE) -> list[str]:
    """The budgetdraft modules ``python -m budgetdraft COMMAND`` runs (dotted names, sorted): its module and all it
    imports; ``extra``: modules it imports by a name computed at run time (a baseline of ``eval-cell``)."""
    return sorted(imports_closure([command_module(command, package), *extra], import_graph(package)))


def code_files(command: str, extra: tuple[str, ...] = (), package: str | Path = f"src/{PACKAGE}") -> list[str]:
    """The source files of ``command_imports`` as paths under ``package`` (default: relative to the workflow's
    directory, a rule's code inputs)."""
    files = module_files(package)
    return [str(files[name]) for name in command_imports(command, extra, package)]
