"""How long each command of examples/flower_app/RUNNING.md takes, run as written.

    python benchmarks/running_times.py

Runs every block of the guide in order, the all-methods run included, as
``tests/test_running_guide.py`` does (a home folder of its own, free ports in
place of the guide's, the package's installed environment in place of
``pip install``; see that module's docstring), checks what each block wrote,
and writes ``benchmarks/results/running_times.md``: the wall time of every
block. A block that keeps running (the SuperLink, a SuperNode) is timed until
it is started (the SuperLink's, until it listens). Needs the ``test`` extra
(pytest, Flower).
"""

import os
import sys
import tempfile
from pathlib import Path

from _common import git_commit, write_result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_running_guide import run_guide  # noqa: E402


def main():
    import flwr

    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="running-times-") as workdir:
        seconds = run_guide(workdir, full=True)
    load_after = "/".join(f"{x:.1f}" for x in os.getloadavg())
    rows = []
    for block, s in seconds:
        command = next(
            line
            for line in block.text.splitlines()[1:]
            if not line.startswith(("cd ", "source ", "python -m skfedclust.flower show"))
        )
        words = command.split()
        what = " ".join(words[:4]) + (" ..." if len(words) > 4 else "")
        kind = "started" if block.keeps_running else "ran"
        rows.append(
            f"| {block.id} | {block.terminal} | {kind} | `{what}` | {s:.1f} | {s / 60:.1f} |"
        )
    total = sum(s for _, s in seconds)
    body = [
        f"`python benchmarks/running_times.py` (package at commit {git_commit()}, Flower "
        f"{flwr.__version__}, {os.cpu_count()} cores shared with other work). Every block of "
        "`examples/flower_app/RUNNING.md`, in order, as `tests/test_running_guide.py` runs "
        "them (the install block creates the virtual environment and uses the installed "
        "package instead of `pip install`); the all-methods run (`run-all`) included. A "
        "block that keeps running is timed until started (the SuperLink until it listens). "
        f"Load average (1/5/15 min) before the run: {load_before}; after: {load_after}.",
        "",
        "## Times",
        "",
        "| block | terminal | kind | first command | seconds | minutes |",
        "| --- | --- | --- | --- | ---: | ---: |",
        *rows,
        "",
        f"Total: {total / 60:.1f} minutes.",
    ]
    write_result("running_times", "Flower: the commands of RUNNING.md, timed", "\n".join(body))


if __name__ == "__main__":
    main()
