"""Shared helpers of the benchmark scripts."""

from __future__ import annotations

import os
import platform
import sys
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


def emit(lines, out=None):
    """Print a results page (a list of lines) and write it to ``out`` when given."""
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if out:
        Path(out).write_text(text)


def write_result(name, title, body):
    """Write ``benchmarks/results/<name>.md``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(f"# {title}\n\n{body.strip()}\n")
    print(f"wrote {path}")
    return path


#: How the reproduction pages decide a verdict (quoted in each page's header).
VERDICT_RULE = (
    "A cell is a **match** when |our mean − the paper's mean| ≤ 2σ + r/2, with "
    "σ = sqrt(s_p²/n_p + s_o²/n_o): s_p and n_p the paper's reported spread and number of "
    "runs, s_o the sample standard deviation of our n_o runs, and r the resolution the "
    "paper prints (r/2 only absorbs the paper's rounding). Where the paper reports no "
    "spread, our own s_o stands in for s_p; where it reports a single run, n_p = 1. "
    "Otherwise the cell is **higher** or **lower** (our mean against the paper's), and "
    "the distance is given in σ. No relative tolerance is used."
)


def match_verdict(ours, ref_mean=None, ref_std=None, ref_n=1, *, resolution=0.0, ref_values=None):
    """Verdict of our runs against a reference mean: ``("match"|"higher"|"lower", z)``.

    ``σ = sqrt(ref_std²/ref_n + s²/n)`` with ``s`` the sample std of ``ours``
    (``n`` runs); ``ref_std=None`` uses ``s`` for the reference's unknown spread.
    ``ref_values`` gives the reference as runs of its own (mean, sample std and
    count taken from them). A match is ``|diff| ≤ 2σ + resolution / 2``; ``z`` is
    ``diff / σ`` (``±inf`` when σ is 0 and the values differ, 0 when they agree).
    """

    def sample_std(values):
        # Runs that agree up to float round-off have no spread.
        if values.size < 2 or np.ptp(values) <= 1e-9 * max(1.0, float(np.abs(values).max())):
            return 0.0
        return float(values.std(ddof=1))

    ours = np.asarray(ours, dtype=float)
    n = ours.size
    s = sample_std(ours)
    if ref_values is not None:
        ref = np.asarray(ref_values, dtype=float)
        ref_mean = float(ref.mean())
        ref_std = sample_std(ref)
        ref_n = ref.size
    if ref_std is None:
        ref_std = s
    sigma = float(np.sqrt(ref_std**2 / ref_n + s**2 / n))
    diff = float(ours.mean()) - float(ref_mean)
    if abs(diff) <= 2 * sigma + resolution / 2:
        label = "match"
    else:
        label = "higher" if diff > 0 else "lower"
    if sigma > 0:
        z = diff / sigma
    else:
        z = 0.0 if abs(diff) <= resolution / 2 else float(np.copysign(np.inf, diff))
    return label, z


def format_z(z):
    """``+2.3σ``; ``exact`` for 0 at σ = 0 is not distinguished from a true 0."""
    if np.isinf(z):
        return "σ = 0"
    return f"{z:+.1f}σ"


def coverage_table(rows):
    """The Coverage table: (paper table/figure, status, where or why) rows."""
    return markdown_table(["paper table / figure", "status", "where / why"], rows)


def git_commit():
    """The package version a run used, for the results pages.

    ``SKFEDCLUST_COMMIT`` names it when the run imports a clean export of one
    commit (``git archive <commit> skfedclust`` on ``PYTHONPATH``); otherwise the
    checked-out commit, flagged when ``skfedclust/`` has uncommitted changes.
    """
    import subprocess

    if os.environ.get("SKFEDCLUST_COMMIT"):
        return f"{os.environ['SKFEDCLUST_COMMIT']} (clean export)"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "../skfedclust"],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" with uncommitted changes to skfedclust/" if dirty else "")


def cache_threadpool_scan():
    """Make the package's per-step ``threadpool_limits(1)`` cheap; results are unchanged.

    The protocol runtime wraps every client step in ``threadpoolctl.threadpool_limits``,
    which rescans the loaded shared libraries on each call (about 40 ms here, seconds per
    fit on small data). The benchmarks scan once and apply the same limits through one
    ``ThreadpoolController``. Call after importing skfedclust and scikit-learn.
    """
    import importlib

    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()

    def limits(limits=None, user_api=None):
        return controller.limit(limits=limits, user_api=user_api)

    for name in ("skfedclust.federation._runtime", "skfedclust._federation"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "threadpool_limits"):
            module.threadpool_limits = limits


def run_environment():
    """Settings of the environment that shape a run, as a sentence ('' when none are set)."""
    parts = []
    if os.environ.get("OMP_NUM_THREADS"):
        parts.append(f"`OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}`")
    if os.environ.get("SKFEDCLUST_COMMIT"):
        parts.append(
            f"the package exported from commit {os.environ['SKFEDCLUST_COMMIT']} "
            "(`git archive` into a folder on `PYTHONPATH`)"
        )
    return ("Run with " + " and ".join(parts) + ".") if parts else ""
