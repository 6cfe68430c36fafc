"""Shared helpers of the benchmark scripts."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
RESULTS = HERE / "results"
os.environ.setdefault("SKFEDCLUST_DATA", str(HERE / "data"))


def timed(func):
    """Run ``func()`` once; return ``(result, seconds)``."""
    start = time.perf_counter()
    result = func()
    return result, time.perf_counter() - start


def mean_std(values, fmt="{:.3f}"):
    """``mean ± std`` (population std) of a list of numbers."""
    values = np.asarray(values, dtype=float)
    if values.size == 0 or np.all(np.isnan(values)):
        return "—"
    return f"{fmt.format(np.nanmean(values))} ± {fmt.format(np.nanstd(values))}"


def machine_line():
    """One line describing where the numbers were measured."""
    import sklearn

    import skfedclust

    return (
        f"Measured on {platform.machine()} with {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, NumPy {np.__version__}, scikit-learn "
        f"{sklearn.__version__}, skfedclust {skfedclust.__version__}."
    )


def markdown_table(header, rows):
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_result(name, title, body):
    """Write ``benchmarks/results/<name>.md``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(f"# {title}\n\n{body.strip()}\n")
    print(f"wrote {path}")
    return path
