"""Line coverage of the package under the README's test command, every never-run line explained.

Usage::

    python benchmarks/coverage_report.py [--out benchmarks/results/coverage.md] [--json FILE]

Runs the README's test command (``python -m pytest``: every test but those marked
``deployment``, the docstring examples and the user guide's examples, on two workers) with
``--cov=skfedclust`` from the repository root; pyproject.toml's ``[tool.coverage.*]`` sets
what is measured (Python processes the tests start included, no line excluded by a comment).
The page gives the total, a table per module and every never-run line with its reason,
taken from the reviewed list of ``coverage_reasons.py``. ``--json FILE`` renders an existing
``--cov-report=json`` report instead of running the tests.

Exits 1 when a never-run line has no reason, or a reason matches no never-run line: the list
is kept in step with the code.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from fnmatch import fnmatchcase as fnmatch
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import emit, git_commit, machine_line, markdown_table  # noqa: E402
from coverage_reasons import CATEGORIES, REASONS  # noqa: E402

COMMAND = ["-m", "pytest", "-p", "no:cacheprovider", "--cov=skfedclust"]


def measure():
    """Run the tests under coverage; return the JSON report and the wall-clock seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "coverage.json"
        env = {**os.environ, "COVERAGE_FILE": str(Path(tmp) / ".coverage")}
        argv = [sys.executable, *COMMAND, f"--cov-report=json:{report}"]
        started = time.perf_counter()
        run = subprocess.run(argv, cwd=ROOT, env=env)
        seconds = time.perf_counter() - started
        if run.returncode != 0:
            sys.exit(f"the tests failed (exit status {run.returncode}); no page written")
        return json.loads(report.read_text()), seconds


def scopes(source):
    """``(first line, last line, qualified name)`` of every function and class of a module."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append((first, child.end_lineno, name))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def innermost(line, found):
    """The qualified name of the innermost function or class holding ``line``."""
    best = None
    for first, last, name in found:
        if first <= line <= last and (best is None or first >= best[0]):
            best = (first, name)
    return "<module>" if best is None else best[1]


def missed_blocks(path, executed, missing):
    """A module's never-run lines as blocks: ``(scope, lines)``.

    A block is a run of never-run statements of one scope with no executed
    statement between them.
    """
    source = (ROOT / path).read_text(encoding="utf-8")
    found = scopes(source)
    missing = set(missing)
    blocks = []
    for line in sorted(set(executed) | missing):
        if line not in missing:
            blocks.append(None)
            continue
        scope = innermost(line, found)
        if blocks and blocks[-1] is not None and blocks[-1][0] == scope:
            blocks[-1][1].append(line)
        else:
            blocks.append((scope, [line]))
    text = source.splitlines()
    return [(scope, lines, text[lines[0] - 1].strip()) for scope, lines in filter(None, blocks)]


def reason_for(path, scope, first_line):
    """The index of the most specific reason for a block, or None.

    The most specific: the scope that names the most (``*`` names nothing), then the
    longest ``block``, then the exact module before a pattern, then the first listed.
    """
    matches = []
    for i, entry in enumerate(REASONS):
        block = entry.get("block") or ""
        if fnmatch(path, entry["module"]) and fnmatch(scope, entry["scope"]):
            if block in first_line:
                named = len(entry["scope"].replace("*", ""))
                matches.append((named, len(block), entry["module"] == path, -i))
    return -max(matches)[3] if matches else None


def spans(lines):
    """``12–18, 30`` from the sorted first and last lines of blocks."""
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in lines)


def render(report, seconds, commit):
    files = {path: data for path, data in report["files"].items() if data["summary"]}
    totals = report["totals"]
    rows, sections, unexplained, used = [], [], [], set()
    per_category = Counter()
    for path in sorted(files, key=lambda p: (-files[p]["summary"]["missing_lines"], p)):
        summary = files[path]["summary"]
        n, missed = summary["num_statements"], summary["missing_lines"]
        if n == 0:
            continue
        rows.append([f"`{path}`", n, missed, f"{summary['percent_covered']:.1f}"])
        if not missed:
            continue
        grouped = defaultdict(list)
        for scope, lines, first_line in missed_blocks(
            path, files[path]["executed_lines"], files[path]["missing_lines"]
        ):
            index = reason_for(path, scope, first_line)
            if index is None:
                unexplained.append(f"{path}:{lines[0]} ({scope}): {first_line}")
                grouped[None].append((scope, lines))
            else:
                used.add(index)
                grouped[index].append((scope, lines))
                per_category[REASONS[index]["category"]] += len(lines)
        items = []
        for index, blocks in sorted(grouped.items(), key=lambda kv: min(b[1][0] for b in kv[1])):
            names = list(dict.fromkeys(f"`{scope}`" for scope, _ in blocks))
            where = spans((lines[0], lines[-1]) for _, lines in blocks)
            count = sum(len(lines) for _, lines in blocks)
            if index is None:
                why = "**no reason given**"
            else:
                entry = REASONS[index]
                why = CATEGORIES[entry["category"]]
                why += f": {entry['note']}" if entry.get("note") else "."
            items.append(f"- {', '.join(names)} — lines {where} ({count}): {why}")
        sections += [f"### `{path}`", "", *items, ""]
    stale = [
        f"{entry['module']} {entry['scope']} {entry.get('block') or ''}".strip()
        for i, entry in enumerate(REASONS)
        if i not in used
    ]
    lines = [
        f"# Test coverage (commit {commit})",
        "",
        "Command: `python benchmarks/coverage_report.py`, which runs the README's test command "
        "(`python -m pytest -p no:cacheprovider`: every test but those marked `deployment`, the "
        "docstring examples and the user guide's examples, on two workers) with pytest-cov "
        "(`--cov=skfedclust`; the settings are pyproject.toml's `[tool.coverage.*]`). Python "
        "processes the tests start are measured too; no line is excluded by a comment. "
        f"{machine_line()} The run took {seconds / 60:.1f} minutes.",
        "",
        f"**{totals['percent_covered']:.1f} % of the package's lines ran**: "
        f"{totals['num_statements']} statements, {totals['missing_lines']} never run. Each "
        "never-run line is listed below with its reason, from the reviewed list of "
        "`benchmarks/coverage_reasons.py`; the script fails when a never-run line has no reason "
        "or a reason matches no never-run line. numba compiles its kernels before they run, "
        "so their lines show as never run although the tests call them (compiled).",
        "",
        "## Never-run lines by reason",
        "",
        markdown_table(
            ["reason", "never-run statements"],
            [[CATEGORIES[c], n] for c, n in per_category.most_common()]
            + ([["**no reason given**", len(unexplained)]] if unexplained else []),
        ),
        "",
        "## Per module",
        "",
        "Most never-run lines first.",
        "",
        markdown_table(["module", "statements", "never run", "% run"], rows),
        "",
        "## Never-run lines and why",
        "",
        "Per module: the functions (`<module>` for module-level code), their never-run lines "
        "(first–last line of each block; the count of statements in parentheses) and the reason.",
        "",
        *sections,
    ]
    return lines, unexplained, stale


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(HERE / "results" / "coverage.md"))
    parser.add_argument("--json", default=None, help="render this JSON report, run nothing")
    args = parser.parse_args()
    if args.json:
        report, seconds = json.loads(Path(args.json).read_text()), float("nan")
    else:
        report, seconds = measure()
    lines, unexplained, stale = render(report, seconds, git_commit())
    emit(lines, args.out)
    for line in unexplained:
        print(f"never run, no reason: {line}", file=sys.stderr)
    for entry in stale:
        print(f"reason matching no never-run line: {entry}", file=sys.stderr)
    return 1 if unexplained or stale else 0


if __name__ == "__main__":
    sys.exit(main())
