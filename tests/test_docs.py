"""The README and docs/ do not rot: links resolve, named commands exist, snakemake targets are the workflow's, and
the files the README's commands name are in the repository. Reads text only (no Snakemake run)."""

import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import PRELOAD_TORCH, forked_runner

from budgetdraft.pipeline.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
SMK = [ROOT / "workflow" / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"(?:^|[\s`(;])(?:python -m )?budgetdraft ([a-z][\w-]*)")
# snakemake options that take a value (--configfile and --config take one or more, up to the next option)
VALUE_OPTIONS = {"--cores", "-c", "--jobs", "-j", "--profile", "--report", "--resources", "--rerun-triggers"}
LIST_OPTIONS = {"--configfile", "--configfiles", "--config", "-C"}
PATH_TOKEN = re.compile(r"(?<![\w/.:-])\.?[\w-]+(?:\.[\w-]+)*(?:/[\w.{}-]*)+")


def code_blocks(path: Path, langs=("bash", "")) -> list[str]:
    return [body for lang, body in FENCE.findall(path.read_text()) if lang in langs]


def code_text(path: Path) -> str:
    """The fenced blocks and inline code spans of a page."""
    text = path.read_text()
    return "\n".join(body for _, body in FENCE.findall(text)) + "\n" + "\n".join(INLINE.findall(FENCE.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    heading = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s", "-", heading)


def anchors(path: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", FENCE.sub("", path.read_text()), re.M)}


def workflow_rules() -> set[str]:
    return {name for path in SMK for name in re.findall(r"^\s*rule (\w+):", path.read_text(), re.M)}


def output_patterns() -> list[re.Pattern]:
    """Every results/ path string of the workflow, its {wildcards} matching one path component each."""
    strings = {s for path in SMK for s in re.findall(r"\"(results/[^\"]+)\"", path.read_text())}
    return [re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(s)) + "/?") for s in strings]


def snakemake_targets(block: str) -> list[str]:
    """The targets of every `snakemake ...` command line in a shell block (a comment listing named targets too)."""
    targets, listing = [], False
    for line in block.splitlines():
        code, _, comment = line.partition("#")
        if listing and not code.strip() and comment.strip():
            targets += comment.split()
            continue
        listing = "named targets:" in comment
        if listing:
            targets += comment.split("named targets:", 1)[1].split()
        for command in code.split(";"):
            words = command.split()
            if "snakemake" not in words:
                continue
            taking = None
            for word in words[words.index("snakemake") + 1 :]:
                if word.startswith("-"):
                    taking = "one" if word in VALUE_OPTIONS else "list" if word in LIST_OPTIONS else None
                elif taking == "one":
                    taking = None
                elif taking != "list":
                    targets.append(word)
    return targets


def test_the_link_and_target_parsers_see_what_they_should():
    block = (
        "snakemake --cores 1 results/tables/main.tex   # one\n"
        "snakemake ablation_lc                          # named targets: main comparison\n"
        "                                               # lambda all\n"
        "snakemake all --profile profiles/slurm --configfile config/paper.yaml --config engine=graphs\n"
        "snakemake --report report.html\n"
    )
    assert snakemake_targets(block) == ["results/tables/main.tex", "main", "comparison", "ablation_lc"] + [
        "lambda",
        "all",
        "all",
    ]
    assert LINK.findall("see [a](docs/a.md#x) and [b](https://x.org)") == ["docs/a.md#x", "https://x.org"]
    assert slug("Lossless, said exactly") == "lossless-said-exactly"
    assert COMMAND.findall(
        "`python -m budgetdraft decode --x` and `budgetdraft train` not budgetdraft.decoding.hf_generate"
    ) == [
        "decode",
        "train",
    ]


def test_every_relative_link_resolves():
    broken = []
    for doc in DOCS:
        for target in LINK.findall(FENCE.sub("", doc.read_text())):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_named_budgetdraft_command_exists():
    named = {(doc.relative_to(ROOT), cmd) for doc in DOCS for cmd in COMMAND.findall(code_text(doc))}
    assert any(cmd == "decode" for _, cmd in named)  # the scan sees commands
    assert sorted(f"{doc}: budgetdraft {cmd}" for doc, cmd in named if cmd not in COMMANDS) == []


def test_every_snakemake_target_is_a_rule_or_an_output_of_the_workflow():
    rules, patterns = workflow_rules(), output_patterns()
    assert {"all", "claims", "policies", "eval_cell"} <= rules
    unknown, seen = [], 0
    for doc in DOCS:
        for block in code_blocks(doc):
            for target in snakemake_targets(block):
                seen += 1
                if target not in rules and not any(p.fullmatch(target) for p in patterns):
                    unknown.append(f"{doc.relative_to(ROOT)}: snakemake {target}")
    assert seen > 10
    assert unknown == []


def test_every_path_in_the_readme_commands_exists():
    patterns = output_patterns()
    missing, seen = [], 0
    for block in code_blocks(README):
        for path in PATH_TOKEN.findall(block):
            if path.startswith(".venv/"):  # made by the install
                continue
            seen += 1
            if path.startswith("results/"):
                if not any(p.fullmatch(path) for p in patterns):
                    missing.append(f"{path} (no rule writes it)")
            elif not (ROOT / path).exists():
                missing.append(path)
    assert seen > 5
    assert missing == []


def test_the_readme_states_the_test_command_ci_runs():
    """.ci/run runs the README's test command; the README keeps it, whole, in a shell block."""
    assert any(". .venv/bin/activate && python -m pytest -q\n" in block for block in code_blocks(README))
    assert "python -m pytest -q" in (ROOT / ".ci" / "run").read_text()


def test_nothing_points_outside_the_repository():
    """Users have the repository only: no page links or refers to a sibling directory such as ../shared/."""
    assert [str(d.relative_to(ROOT)) for d in DOCS if "../shared" in d.read_text()] == []


INDENTED_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)
# What a snippet names that only a user has: a drafter they trained (`budgetdraft train --out my_drafter`), stood in
# for by the untrained embedded drafter when the snippet runs here.
STAND_INS = {'load_model("my_drafter")': 'load_model("embedded:smollm2:layers=4")'}


def python_blocks(path: Path) -> list[str]:
    """Every ```python block of a page, a block indented in a list item included (dedented)."""
    return [
        "\n".join(line[len(indent) :] for line in body.splitlines())
        for indent, lang, body in INDENTED_FENCE.findall(path.read_text())
        if lang == "python"
    ]


SNIPPETS = [(doc, i) for doc in DOCS for i, _ in enumerate(python_blocks(doc))]


def test_every_python_block_is_found():
    """The README's example, library.md's two, and architecture.md's policy recipe and drafter protocol."""
    where = {str(doc.relative_to(ROOT)): n for doc in DOCS if (n := len(python_blocks(doc)))}
    assert where == {"README.md": 1, "docs/architecture.md": 2, "docs/library.md": 2}, where


@pytest.fixture(scope="module")
def run_block():
    """The docs' block runner, torch and transformers imported once for every block of the module."""
    with forked_runner(PRELOAD_TORCH) as run:
        yield run


def test_a_block_runs_in_a_fresh_process_and_a_failing_one_is_told():
    """The block runner sees what `python -c` sees: a block's exit status and output, a failed assert's traceback,
    and no name or module state a block before it left."""
    with forked_runner("") as run:
        assert run("import sys; print(sys.argv)") == (0, "['-c']\n")
        status, output = run("import budgetdraft.base.names as n; n.LEFT = 1; x = 2; assert x == 3, 'shown'")
        assert status == 1 and "AssertionError: shown" in output
        assert run("import budgetdraft.base.names as n; print(hasattr(n, 'LEFT'), 'x' in dir())") == (
            0,
            "False False\n",
        )
        assert run("import sys; sys.exit(3)")[0] == 3


@pytest.mark.real
@pytest.mark.parametrize("doc, index", SNIPPETS, ids=[f"{d.relative_to(ROOT)}:{i}" for d, i in SNIPPETS])
def test_every_python_block_of_the_docs_runs_as_written(doc, index, run_block):
    """Each ```python block of README.md and docs/ runs as written, in a fresh process (a block may register a policy
    or load models: nothing leaks into the tests or into another block; `run_block`, conftest.forked_runner), its own asserts checking what it
    shows (lossless output); only `STAND_INS` are replaced."""
    block = python_blocks(doc)[index]
    for name, stand_in in STAND_INS.items():
        block = block.replace(name, stand_in)
    status, output = run_block(block)
    assert status == 0, f"{doc.name} block {index}:\n{block}\n{output[-3000:]}"


def test_the_documented_drafter_protocol_is_the_librarys():
    """architecture.md lists the Drafter protocol and the records it reads: the same members as the library's."""
    from budgetdraft.decoding import drafter

    block = next(b for b in python_blocks(ROOT / "docs" / "architecture.md") if "class Drafter(Protocol)" in b)
    scope: dict = {}
    exec(block, scope)  # noqa: S102 - defines the documented classes
    for name in ("Drafter", "Reads", "VerifierPrefill"):
        documented, library = scope[name], getattr(drafter, name)
        members = {m for m in vars(documented) if not m.startswith("_")} | set(documented.__annotations__)
        assert members == {m for m in vars(library) if not m.startswith("_")} | set(library.__annotations__), name


def test_the_cell_counts_the_docs_state_are_the_plans():
    """The default's cell counts in README.md and docs/pipeline.md are its plan's (`budgetdraft.pipeline.plan`), not
    numbers typed once and left behind."""
    import yaml

    from budgetdraft.base import names
    from budgetdraft.evaluation import cellfile
    from budgetdraft.pipeline.configcheck import check_config
    from budgetdraft.pipeline.plan import Plan

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    check_config(cfg, schema=str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    files = Plan(cfg).cells.all_cells()
    shared = [f for f in files if cellfile.path_key(f)["replicate"] == names.SHARED]
    cells = {re.sub(r"/r\d+/", "/", f) for f in files}
    stated = re.search(r"one file per measured cell \(([\d,]+) in the default\)", README.read_text())
    assert stated and int(stated[1].replace(",", "")) == len(files)
    pipeline = (ROOT / "docs" / "pipeline.md").read_text()
    m = re.search(
        r"([\d,]+) grid cells \(([\d,]+) cell files: (\d+) cells × (\d+) training replicates \+ (\d+) on the first "
        r"replicate only \+ (\d+) shared",
        pipeline,
    )
    assert m, "docs/pipeline.md no longer states the default's cell counts"
    grid, total, per, reps, first, one = (int(x.replace(",", "")) for x in m.groups())
    replicates = Counter(re.sub(r"/r\d+/", "/", f) for f in files if f not in shared)
    assert (grid, total, per, reps, first, one) == (
        len(cells),
        len(files),
        sum(n == cfg["replicates"] for n in replicates.values()),
        cfg["replicates"],
        sum(n == 1 for n in replicates.values()),
        len(shared),
    )
