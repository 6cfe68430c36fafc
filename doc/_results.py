"""Figures of ``benchmarks/results/*.md`` for the user guide.

The guide states measured figures (scores, ratios, bytes of a benchmark run) through the
``:result:`` role and the ``result-table`` directive, which read them from the result
pages at build time: a figure is never typed by hand, and a rerun of a benchmark updates
every page that quotes it. A reference names a cell::

    page|section|row|column[|format]

* ``page``: a result page without ``.md`` (``grid``);
* ``section``: the start of a heading of that page (``Summary``); the tables under it,
  up to the next heading of any level, are searched;
* ``row``: the row's leading cells joined by ``/`` (``digits/iid`` or ``FeCA``);
* ``column``: a header of the table, exactly as written;

(a row's cells and a header are compared without their Markdown code marks: the row
``| 200,000 | clients in turn (`n_jobs=None`) |`` is ``200,000/clients in turn (n_jobs=None)``,
a backtick being no character of a role's text);
* ``format`` (optional): a format specification applied to the cell's first number
  (``.2f``, ``,d``); without it the cell is quoted verbatim; ``mean`` quotes the part
  before ``±``.

A reference that matches no cell, or more than one, is an error (the docs build with
``-W``, and ``tests/test_docs_figures.py`` resolves every reference of the guide).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


class ResultError(LookupError):
    """A reference to a result that does not name exactly one cell."""


def _cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@functools.cache
def tables(page):
    """The tables of ``page``: a list of ``(heading, header, rows)``, rows as lists of cells."""
    path = RESULTS / f"{page}.md"
    if not path.exists():
        raise ResultError(f"no result page {path.name} in benchmarks/results")
    found, heading, lines = [], "", path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: "):
            header, rows = _cells(line), []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            found.append((heading, header, rows))
            continue
        i += 1
    return found


def _plain(cell):
    return cell.replace("`", "")


def _format(cell, spec, reference):
    if not spec:
        return cell
    if spec == "mean":
        return cell.split("±")[0].strip()
    number = _NUMBER.search(cell)
    if number is None:
        raise ResultError(f"{reference}: the cell {cell!r} holds no number to format")
    value = float(number.group().replace(",", ""))
    if spec.endswith("d"):
        value = int(round(value))
    return format(value, spec)


def lookup(reference):
    """The text of the cell ``reference`` names (see the module docstring)."""
    parts = [part.strip() for part in reference.split("|")]
    if len(parts) not in (4, 5):
        raise ResultError(f"{reference!r}: expected page|section|row|column[|format]")
    page, section, row, column, *spec = parts
    keys = [key.strip() for key in row.split("/")]
    matches = []
    for heading, header, rows in tables(page):
        header = [_plain(cell) for cell in header]
        if not heading.startswith(section) or column not in header:
            continue
        j = header.index(column)
        matches += [cells[j] for cells in rows if [_plain(c) for c in cells[: len(keys)]] == keys]
    if len(matches) != 1:
        raise ResultError(
            f"{reference!r} names {len(matches)} cells of benchmarks/results/{page}.md, not one"
        )
    return _format(matches[0], spec[0] if spec else "", reference)


ROLE = re.compile(r":result:`([^`]+)`")


def references(text):
    """Every ``:result:`` reference of an RST text."""
    return ROLE.findall(text)
