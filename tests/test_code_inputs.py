"""A rule's code inputs are exactly the modules its command imports (budgetdraft.base.importgraph), so editing any module
a stage runs reruns that stage, and editing one it does not run reruns nothing of it."""

import hashlib
import json
import re
import shutil
import subprocess

import pytest
from conftest import copy_project

from budgetdraft.base import importgraph, methods
from budgetdraft.base.importgraph import (
    code_files,
    command_imports,
    import_graph,
    imported_modules,
    imports_closure,
    packages_above,
)
from budgetdraft.pipeline.cli import COMMANDS

SNAKEMAKE = shutil.which("snakemake")


# an import in every kind of block a module can hold one (statements only are read: budgetdraft.base.importgraph),
# m0 .. m13 to be found, t0 / t1 under `if TYPE_CHECKING:` not
EVERY_BLOCK = """
import budgetdraft.m0
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import budgetdraft.t0
else:
    import budgetdraft.m1
if typing.TYPE_CHECKING:
    from budgetdraft import t1
for x in y:
    import budgetdraft.m2
else:
    import budgetdraft.m3
while x:
    import budgetdraft.m4
try:
    import budgetdraft.m5
except ImportError:
    import budgetdraft.m6
else:
    import budgetdraft.m7
finally:
    from budgetdraft.m8 import name
with open(x) as f:
    import budgetdraft.m9
class C:
    def method(self):
        async def inner():
            async with x:
                import budgetdraft.m10
match x:
    case 1:
        import budgetdraft.m11
try:
    pass
except* ValueError:
    import budgetdraft.m12
lambda: __import__("budgetdraft.not_a_statement")
if x:
    from budgetdraft import m13
"""


def test_imports_are_read_from_every_kind_of_block(tmp_path):
    (tmp_path / "every_block.py").write_text(EVERY_BLOCK)
    modules = {f"budgetdraft.{name}" for name in [*(f"m{i}" for i in range(14)), "t0", "t1", "not_a_statement"]}
    assert imported_modules(tmp_path / "every_block.py", modules) == {f"budgetdraft.m{i}" for i in range(14)}


def test_each_sources_imports_are_parsed_once_per_content_on_this_machine(tmp_path, monkeypatch):
    """`cached_imports`: a second process's graph parses nothing and equals the parsed one; an edited module is
    parsed again (alone); a cache entry that is not what a parse gives, or a cache that is not JSON, is parsed around;
    the file then holds exactly the package's present sources."""
    monkeypatch.setenv("BUDGETDRAFT_CACHE", str(tmp_path / "cache"))
    package = tmp_path / "budgetdraft"
    shutil.copytree(importgraph.HERE, package, ignore=shutil.ignore_patterns("__pycache__"))
    parsed = []
    parse = importgraph.import_statements
    monkeypatch.setattr(importgraph, "import_statements", lambda source: parsed.append(source) or parse(source))
    first = import_graph(package)
    count = len({hashlib.sha256(p.read_bytes()).hexdigest() for p in package.rglob("*.py")})  # one parse a content
    assert len(parsed) == count and "budgetdraft.decoding.metrics" in first["budgetdraft.decoding.loop"]
    importgraph._graph.cache_clear()  # a new process: only the file remembers
    parsed.clear()
    assert import_graph(package) == first and parsed == []
    edited = package / "decoding/loop.py"
    edited.write_text(edited.read_text() + "\nimport budgetdraft.training.train\n")
    graph = import_graph(package)
    assert len(parsed) == 1 and "budgetdraft.training.train" in graph["budgetdraft.decoding.loop"]
    cache = tmp_path / "cache" / importgraph.IMPORTS_CACHE
    entries = json.loads(cache.read_text())
    assert len(entries) == count  # the edited module's new content in, its old one out
    for broken in (json.dumps({key: [["budgetdraft.x", 3]] for key in entries}), "{ not json"):
        cache.write_text(broken)
        importgraph._graph.cache_clear()
        parsed.clear()
        assert import_graph(package) == graph and len(parsed) == count


def test_closure_follows_lazy_imports_and_packages():
    graph = import_graph()
    assert "budgetdraft.decoding.metrics" in graph["budgetdraft.decoding.loop"]
    assert "budgetdraft.decoding.loading" in graph["budgetdraft.decoding.loop"]  # imported inside a function
    assert packages_above("budgetdraft.decoding.baselines.eagle3") == [
        "budgetdraft",
        "budgetdraft.decoding",
        "budgetdraft.decoding.baselines",
    ]
    eagle3 = imports_closure(["budgetdraft.training.eagle3_head"], graph)
    assert {"budgetdraft", "budgetdraft.decoding.baselines.eagle3", "budgetdraft.training.train"} <= eagle3
    cell = command_imports("eval-cell")
    assert {"budgetdraft.decoding.metrics", "budgetdraft.decoding.draftvocab", "budgetdraft.evaluation.cells"} <= set(
        cell
    )  # issue 23.2
    # a baseline's module is its declared factory (budgetdraft.base.methods), imported by that name for its method only
    assert "budgetdraft.base.methods" in cell and "budgetdraft.decoding.baselines.triforce" not in cell
    assert "src/budgetdraft/decoding/baselines/__init__.py" in code_files(
        "eval-cell", ("budgetdraft.decoding.baselines.triforce",)
    )
    # the public face of budgetdraft.decoding resolves the loop lazily: a tokenizer's command does not run it
    assert "budgetdraft.decoding" in command_imports("prepare")
    assert "budgetdraft.decoding.loop" not in command_imports("prepare")
    with pytest.raises(ValueError, match="no command 'nope'"):
        command_imports("nope")


def planned_jobs(workdir) -> list[tuple[str, set[str], str]]:
    """(rule, its code: the modules of the digests it reads, its shell command) of every job of `all` and `policies`
    on config/ci.yaml (a job names one digest, results/code/STAGE.sha256, whose rule `code` reads the modules)."""
    out = subprocess.run(
        [SNAKEMAKE, "-n", "-p", "--forceall", "all", "policies", "--configfile", "config/ci.yaml"],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    blocks, digests, jobs = re.split(r"\n(?=(?:local)?rule \w+:)", out.stdout), {}, []
    for block in blocks:
        rule, inputs = re.match(r"(?:local)?rule (\w+):", block), re.search(r"^\s+input: (.+)$", block, re.M)
        output = re.search(r"^\s+output: (.+)$", block, re.M)
        if rule and rule.group(1) == "code":
            digests[output.group(1)] = set(inputs.group(1).split(", "))
    for block in blocks:
        rule = re.match(r"(?:local)?rule (\w+):", block)
        inputs = re.search(r"^\s+input: (.+)$", block, re.M)
        shell = re.search(r"^Shell command: (.+)$", block, re.M)
        if rule and shell and "python -m budgetdraft" in shell.group(1):
            named = set(inputs.group(1).split(", ")) if inputs else set()
            assert not any(f.startswith("src/") for f in named), f"{rule.group(1)} lists modules, not its digest"
            jobs.append((rule.group(1), set().union(*(digests.get(f, set()) for f in named)), shell.group(1)))
    return jobs


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    if SNAKEMAKE is None:
        pytest.skip("snakemake is not installed")
    return planned_jobs(copy_project(tmp_path_factory.mktemp("code_inputs")))


def command_code(shell: str) -> set[str]:
    """The source files a job's `python -m budgetdraft COMMAND ...` runs (an eval-cell's decoder's factory too)."""
    command = re.search(r"python -m budgetdraft ([\w-]+)", shell).group(1)
    decodes = re.search(r"--decodes (\w+)", shell)
    factory = methods.DECODERS[decodes.group(1)].factory if decodes else ""
    extra = (factory,) if factory else ()
    return set(code_files(command, extra))


RULES = ["export_model", "prepare_prompts", "prepare_train", "targets", "train_base", "train", "train_eagle3"]
RULES += ["verifier_prefill", "eval_cell", "eval_replicate_cell", "table", "figure"]


@pytest.mark.workflow
@pytest.mark.parametrize("rule", RULES + ["claims"])
def test_each_rules_code_inputs_are_its_commands_imports(jobs, rule):
    mine = [(inputs, shell) for name, inputs, shell in jobs if name == rule]
    assert mine, f"no {rule} job planned"
    for inputs, shell in mine:
        declared = {f for f in inputs if f.startswith("src/")}
        wanted = command_code(shell)
        assert declared == wanted, f"{rule}: declared only {declared - wanted}, imported only {wanted - declared}"


def test_every_command_runs_its_own_module():
    for command, (module, _) in COMMANDS.items():
        assert module in command_imports(command), command
