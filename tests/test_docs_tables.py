"""Every table of the documentation has a header row docutils keeps.

reStructuredText loses content silently: in a simple table, a row whose first cell is
blank continues the row above, so a header that starts with a blank cell is parsed as
an empty header (its labels vanish from the page, and no warning says so). This test
parses every page with docutils alone (no Sphinx build) and checks each table's header.
"""

from pathlib import Path

import pytest
from docutils import nodes
from docutils.core import publish_doctree
from docutils.parsers.rst import Directive, directives

DOC = Path(__file__).resolve().parents[1] / "doc"
#: Written by the build (sphinx-gallery, autosummary, conf.py), or templates rather than
#: pages: the pages checked are the same whether or not the docs were built.
NOT_PAGES = {"_build", "generated", "auto_examples", "benchmark_results", "_templates"}
GENERATED = {"sg_execution_times.rst", "user_guide/_generated_step_audit.rst"}
PAGES = sorted(
    p
    for p in DOC.rglob("*.rst")
    if not NOT_PAGES & set(p.relative_to(DOC).parts[:-1])
    and p.relative_to(DOC).as_posix() not in GENERATED
)
#: Sphinx directives whose content is reStructuredText (checked like the page).
NESTED = {"seealso", "only", "versionadded", "versionchanged", "deprecated"}


class _AnyOption(dict):
    """Accepts every option of a directive docutils does not know, as text."""

    def __contains__(self, name):
        return True

    def __getitem__(self, name):
        return directives.unchanged


class _SphinxDirective(Directive):
    """Stands in for a Sphinx directive: parses its content if that is reStructuredText."""

    optional_arguments = 10
    final_argument_whitespace = True
    has_content = True
    option_spec = _AnyOption()

    def run(self):
        if self.name not in NESTED:
            return []  # code, toctrees, autodoc: no table of the page
        container = nodes.container()
        self.state.nested_parse(self.content, self.content_offset, container)
        return [container]


def _tolerant_lookup(lookup):
    def directive(name, language_module, document):
        found, messages = lookup(name, language_module, document)
        return (found or _SphinxDirective), messages

    return directive


def doctree(text, source):
    """The docutils tree of a page, Sphinx's directives and roles tolerated."""
    original = directives.directive
    directives.directive = _tolerant_lookup(original)
    try:
        # Unknown roles (:class:, :doc:) become "problematic" nodes that keep their text;
        # report_level 5 keeps those and the unknown includes quiet.
        return publish_doctree(
            text,
            source_path=str(source),
            settings_overrides={
                "report_level": 5,
                "halt_level": 5,
                "file_insertion_enabled": False,
            },
        )
    finally:
        directives.directive = original


def table_problems(tree):
    """What is wrong with each table's header: missing, or with an empty cell."""
    problems = []
    for table in tree.findall(nodes.table):
        first = next(iter(table.findall(nodes.entry)), None)
        line = next((n.line for n in table.findall() if n.line), "?")
        where = f"table near line {line}"
        preview = first.astext()[:40] if first is not None else ""
        thead = next(iter(table.findall(nodes.thead)), None)
        if thead is None:
            problems.append(f"{where} (first cell {preview!r}) has no header row")
            continue
        for row in thead.findall(nodes.row):
            cells = [entry.astext().strip() for entry in row.findall(nodes.entry)]
            if not all(cells):
                problems.append(f"{where} has an empty header cell: {cells}")
    return problems


def test_the_pages_are_found():
    names = {p.relative_to(DOC).as_posix() for p in PAGES}
    assert {"index.rst", "install.rst", "user_guide/fedkmeans.rst"} <= names
    assert not any(n.startswith(("generated/", "auto_examples/")) for n in names)
    assert not GENERATED & names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOC).as_posix())
def test_every_table_has_a_full_header_row(page):
    text = page.read_text(encoding="utf-8")
    tree = doctree(text, page)
    # The parse sees the page's tables (at least its list-tables), not a fallback.
    assert len(list(tree.findall(nodes.table))) >= text.count(".. list-table::")
    assert table_problems(tree) == [], page.relative_to(DOC).as_posix()


def test_the_generated_step_audit_table_has_a_full_header_row():
    # Included by the Security page; written at build time from the code.
    from skfedclust.utils._step_audit import audit_table_rst

    tree = doctree(audit_table_rst(), DOC / "user_guide" / "security.rst")
    assert list(tree.findall(nodes.table))
    assert table_problems(tree) == []


@pytest.mark.parametrize(
    "text",
    [
        # The first header cell blank: docutils reads the header line as a continuation
        # and the header row comes out empty.
        "====  ====  ====\n      a     b\n====  ====  ====\nx     1     2\n====  ====  ====\n",
        # No header at all.
        "====  ====\nx     1\ny     2\n====  ====\n",
        # A grid table whose header has an empty cell.
        "+---+---+\n|   | a |\n+===+===+\n| x | 1 |\n+---+---+\n",
        # A list-table without header rows.
        ".. list-table::\n\n   * - x\n     - 1\n",
        # Inside a Sphinx directive docutils does not know.
        ".. seealso::\n\n   ====  ====\n   x     1\n   ====  ====\n",
    ],
    ids=["blank-first-header-cell", "no-header", "grid-empty-cell", "list-table", "nested"],
)
def test_the_check_catches_a_lost_header(text):
    problems = table_problems(doctree(text, DOC / "example.rst"))
    assert len(problems) == 1, problems


def test_the_check_passes_full_headers():
    text = (
        "=====  ====  ====\nwhat   a     b\n=====  ====  ====\n"
        "x      1     2\n=====  ====  ====\n\n"
        ".. list-table::\n   :header-rows: 1\n\n   * - what\n     - a\n   * - x\n     - 1\n"
    )
    tree = doctree(text, DOC / "example.rst")
    assert len(list(tree.findall(nodes.table))) == 2
    assert table_problems(tree) == []


def test_the_changelog_is_a_page_of_the_docs_and_the_readme_links_it():
    root = DOC.parent
    page = (DOC / "changelog.md").read_text(encoding="utf-8")
    # The page includes the file itself (myst-parser), so it cannot fall behind it.
    assert "{include} ../CHANGELOG.md" in page
    assert (root / "CHANGELOG.md").is_file()
    toctree = (DOC / "index.rst").read_text(encoding="utf-8").split(".. toctree::")[1]
    assert "\n   changelog\n" in toctree
    conf = (DOC / "conf.py").read_text(encoding="utf-8")
    assert '"myst_parser"' in conf
    assert "](CHANGELOG.md)" in (root / "README.md").read_text(encoding="utf-8")
