"""A dataset's config `name` is plain text: LaTeX specials in it (`Q&A 100% \\input{x}`, a `$`) come out escaped in
the .tex tables, printed as written in the figures' titles, and as the same text in the report's HTML pages
(workflow/report/render.py), which no longer crash on them. Cells: test_paper's synthetic fixtures."""

import importlib.util
import re
from pathlib import Path

import pytest
from test_paper import SETTINGS, build_text, cells  # noqa: F401 - the module-scoped cell fixture

from budgetdraft.report import paper
from budgetdraft.report.figures import plain_title
from budgetdraft.report.tables import latex_text

ROOT = Path(__file__).resolve().parents[1]
NAME = r"Q&A 100% \input{x} $5 #1 a_b ~^"
ESCAPED = r"Q\&A 100\% \textbackslash{}input\{x\} \$5 \#1 a\_b \textasciitilde{}\textasciicircum{}"
HOSTILE = {**SETTINGS, "datasets": {"d1": "DS-One", "d2": NAME}}


def load_render():
    spec = importlib.util.spec_from_file_location("render", ROOT / "workflow" / "report" / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_latex_text_escapes_each_special():
    assert latex_text(NAME) == ESCAPED
    assert latex_text("LongBench 2.0") == "LongBench 2.0"


def without_escapes(tex: str) -> str:
    """The text with every escaped special removed: what is left must hold no special character."""
    return re.sub(r"\\(textbackslash|textasciitilde|textasciicircum)\{\}|\\[&%$#_{}]", "", tex)


TABLES = ("main", "comparison", "single_budget", "vram_gamma", "vram")


@pytest.fixture(scope="module")
def hostile_tables(cells, tmp_path_factory) -> dict[str, str]:  # noqa: F811
    """Each of TABLES built from the cells with the hostile dataset name (and traced: build_text's trace_file
    re-derives it too), once for the tests below: the report page's test had built three of them again."""
    root = tmp_path_factory.mktemp("hostile")
    return {artifact: build_text(cells, artifact, root, settings=HOSTILE) for artifact in TABLES}


@pytest.mark.parametrize("artifact", TABLES)
def test_tables_print_a_name_with_latex_specials_escaped(hostile_tables, artifact):
    text = hostile_tables[artifact]
    assert ESCAPED in text and NAME not in text
    for line in text.splitlines():
        if ESCAPED in line:  # nothing raw left of the name: & % $ # _ ~ ^ \input
            assert "input" not in without_escapes(line.replace(ESCAPED, "")), line


def test_the_report_page_of_such_a_table_shows_the_name_as_written(hostile_tables):
    render = load_render()
    for artifact in ("main", "comparison", "single_budget"):
        page = render.table_page(hostile_tables[artifact], artifact)
        assert r"Q&amp;A 100% \input{x} $5 #1 a_b ~^" in page, artifact
    assert render.inline_html("costs $5 (no math)") == "costs $5 (no math)"  # a lone $ is a dollar, not a crash
    assert render.split_cells(r"a \& b & \{c & d\} & e") == [r"a \& b ", r" \{c ", r" d\} ", " e"]
    assert render.braced(r"{a \} b}", 0) == (r"a \} b", 8)


def test_figure_titles_print_a_dollar_as_written(cells, tmp_path):  # noqa: F811
    assert plain_title("US$ 5") == r"US\$ 5"
    for artifact in ("fig_collapse", "fig_gamma"):
        out = tmp_path / f"{artifact}.pdf"
        settings = {**HOSTILE, "datasets": {"d1": r"A $\input{x}$ B", "d2": NAME}}  # unescaped: a mathtext error
        assert paper.build(artifact, list(cells.values()), settings, out)[0] == out
        assert paper.trace_file(out)


@pytest.mark.filterwarnings("ignore:Argument .writer_name.:PendingDeprecationWarning")  # Snakemake's call
def test_a_dataset_key_ending_in_an_underscore_is_text_in_the_figure_caption():
    """A dataset key may end in `_` (the schema's `^[A-Za-z0-9_]+$`); written bare into the caption's RST it is a
    hyperlink reference to nothing, and docutils put an error box into the report (issue 38). The caption is
    rendered as Snakemake's report renders it: Jinja (its Environment's options), then docutils."""
    from types import SimpleNamespace

    from docutils.core import publish_parts
    from jinja2 import Environment

    config = {"collapse": {"dataset": "gs_", "gamma": 3}, "budgets": [64, 1024], "contexts": {"1K": 1024}}
    snakemake = SimpleNamespace(config={**config, "replicates": 2}, wildcards=SimpleNamespace(figure="collapse"))
    template = (ROOT / "workflow" / "report" / "figure.rst").read_text()
    text = Environment(trim_blocks=True, lstrip_blocks=True).from_string(template).render(snakemake=snakemake)
    body = publish_parts(text, writer_name="html")["body"]  # as Snakemake calls it
    assert "system-message" not in body and "Unknown target name" not in body, body
    assert '<tt class="docutils literal">gs_</tt>' in body or "<code>gs_</code>" in body, body
