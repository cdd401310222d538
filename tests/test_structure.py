"""The shape of the code a newcomer reads: modules import each other without cycles; functions fit on a screen."""

import ast
import re
from pathlib import Path

from budgetdraft.base.importgraph import import_graph

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
MAX_FUNCTION_LINES = 60


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as the path of modules around it), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_import_cycle_finder_finds_one():
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_among_modules():
    graph = import_graph()
    assert "budgetdraft.decoding.loop" in graph["budgetdraft.evaluation.measure"]  # the walk sees imports
    assert "budgetdraft.pipeline.plan" not in graph["budgetdraft.pipeline.settingsfiles"]  # under TYPE_CHECKING
    cycle = import_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def long_functions(paths) -> list[str]:
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_longer_than_a_screen():
    paths = sorted((SRC / "budgetdraft").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py"))
    assert len(paths) > 20
    assert long_functions(paths) == []


# A top-level function or class name that more than one module defines must mean the same thing in each: a protocol
# every command or baseline module fills, or a report module's own writer. Anything else is one name for two things.
SAME_MEANING = {
    "configure_parser": "a command module's flags (budgetdraft.pipeline.commands)",
    "run": "a command module's entry (budgetdraft.pipeline.commands)",
    "drafter_factory": "a decoding method's drafter (eval-cell's protocol: sparse_drafter and each baseline)",
    "build": "a report module writes its files (paper, claims, paperdiff)",
    "markdown": "a report module's markdown text (claims, paperdiff)",
    "draw": "a report module draws its figure to files (figures, profiles)",
    "resolve_hparams": "the typed hyper-parameters of a JSON dict (the drafter's, the EAGLE-3 head's)",
    "generate": "transformers' custom_generate entry (hf_generate, and the file template it publishes)",
    "section": "a claims report section's lines (profiles, copying)",
    "check_rows": "a sealed results file's rows hold what its command writes (cellfile, profilefile)",
    "problem": "why a sealed results file cannot be used, or None (cellfile, profilefile)",
}


def defined_names() -> dict[str, list[str]]:
    """{top-level function or class name: the modules that define it}."""
    out: dict[str, list[str]] = {}
    for path in sorted((SRC / "budgetdraft").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                out.setdefault(node.name, []).append(str(path.relative_to(SRC)))
    return out


def test_one_module_per_name_and_one_meaning_per_function_name():
    """No two modules of the package share a file name (budgetdraft.hf beside budgetdraft.decoding.hf read as one
    thing), and a name defined in two modules is one of the protocols above."""
    stems = [p.stem for p in (SRC / "budgetdraft").rglob("*.py") if p.stem != "__init__"]
    assert sorted({s for s in stems if stems.count(s) > 1}) == []
    twice = {name: where for name, where in defined_names().items() if len(where) > 1}
    assert set(twice) <= set(SAME_MEANING), {n: w for n, w in twice.items() if n not in SAME_MEANING}


def test_no_source_cites_the_maintainers_shared_folder():
    """A user who clones the project has no ../shared/ (the maintainers' notes): code, rules, configs and benchmarks
    cite what the project itself holds."""
    cited = re.compile(r"\.\./shared|\bshared/(FACTS|STYLE|ARTIFACTS|paper)")
    paths = [
        p for folder in ("src", "workflow", "config", "bench", "envs", "profiles") for p in (ROOT / folder).rglob("*")
    ]
    found = [
        str(p.relative_to(ROOT))
        for p in paths
        if p.is_file() and p.suffix not in (".pyc",) and cited.search(p.read_text(errors="ignore"))
    ]
    assert found == []
