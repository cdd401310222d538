"""The shape of the code a newcomer reads: modules import each other without cycles; functions fit on a screen."""

import ast
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
