"""Fit time of each method as a ratio to its centralized scikit-learn equivalent.

Every ``benchmarks/speed_<method>.py`` module exposes ``cases(quick) -> list[dict]``
with keys ``name``, ``federated`` and ``reference`` (zero-argument callables),
``reference_name`` and ``goal_ratio`` (or None). Both callables of a case are timed in
the same run, on the same machine, so the ratio is meaningful even where absolute times
are not. Writes ``benchmarks/results/speed_ratios.md`` (``speed.md`` is
``speed_scale.py``'s, every estimator at three sizes, and ``grid_speed.md`` the grid
runner's, ``benchmarks/run.py``); list a new results page in ``doc/benchmarks.rst``.

    python benchmarks/bench_speed.py --quick
    python benchmarks/bench_speed.py --only kfed feca
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import machine_line, markdown_table, timed, write_result  # noqa: E402


def discover(only=None):
    """The speed-case modules, by method name."""
    modules = {}
    for path in sorted(HERE.glob("speed_*.py")):
        method = path.stem.removeprefix("speed_")
        if only and method not in only:
            continue
        module = importlib.import_module(path.stem)
        if hasattr(module, "cases"):  # speed_scale.py is a runner of its own
            modules[method] = module
    return modules


def paired_times(federated, reference, repeat):
    """Alternate reference and federated fits; return the median of each and of the ratios.

    The machine is shared and noisy: alternating the two in pairs exposes both
    to the same load, and the median pair ratio is robust to a disturbed pair.
    """
    t_fed, t_ref = [], []
    for _ in range(repeat):
        t_ref.append(timed(reference)[1])
        t_fed.append(timed(federated)[1])
    ratios = [f / r for f, r in zip(t_fed, t_ref)]
    return statistics.median(t_fed), statistics.median(t_ref), statistics.median(ratios)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", nargs="+", default=None, help="method names")
    parser.add_argument("--repeat", type=int, default=3, help="alternating pairs per case")
    args = parser.parse_args(argv)

    rows = []
    for module in discover(args.only).values():
        for case in module.cases(args.quick):
            t_fed, t_ref, ratio = paired_times(case["federated"], case["reference"], args.repeat)
            goal = case.get("goal_ratio")
            verdict = "—" if goal is None else ("met" if ratio <= goal else "not met")
            rows.append(
                [
                    case["name"],
                    f"{t_fed:.2f}",
                    case["reference_name"],
                    f"{t_ref:.2f}",
                    f"{ratio:.2f}×",
                    "—" if goal is None else f"≤ {goal}×",
                    verdict,
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    header = ["case", "federated s", "reference", "reference s", "ratio", "goal", "goal met"]
    body = "\n\n".join(
        [
            "Fit time of each federated estimator against the centralized scikit-learn "
            f"equivalent timed in the same run: {args.repeat} alternating pairs, medians "
            "of the times and of the pair ratios. "
            + ("Quick sizes (smoke run)." if args.quick else "Full sizes."),
            machine_line(),
            f"Command: `python benchmarks/bench_speed.py {' '.join(argv or sys.argv[1:])}`",
            markdown_table(header, rows),
        ]
    )
    name = "speed_ratios_quick" if args.quick else "speed_ratios"
    if args.only:
        name += "_" + "_".join(args.only)
    write_result(name, "Speed: ratios to centralized scikit-learn", body)


if __name__ == "__main__":
    main()
