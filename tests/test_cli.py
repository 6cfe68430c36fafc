"""The demo command: its table, its warnings notes and its argument checks."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClusterMixin

from skfedclust import _cli
from skfedclust._cli import main, parse_args
from skfedclust.utils import all_estimators


def test_demo_prints_every_estimator(capsys):
    assert main(["--dataset", "iris", "--partition", "iid", "--clients", "3"]) == 0
    out = capsys.readouterr().out
    for name, _ in all_estimators():
        assert name in out
    assert "KMeans (centralized)" in out
    for column in ("NMI", "ARI", "ACC", "fit s", "up", "down", "rounds"):
        assert column in out


def test_demo_explains_methods_that_cannot_run(capsys):
    main(["--dataset", "wine", "--partition", "vertical", "--clients", "2"])
    out = capsys.readouterr().out
    assert "KFed" in out and "n/a: KFed supports horizontal federations only" in out


def test_demo_rejects_unknown_options():
    with pytest.raises(SystemExit):
        parse_args(["--partition", "diagonal"])


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--clients", "0"], "--clients"),
        (["--clients", "-2"], "--clients"),
        (["--clients", "two"], "--clients"),
        (["--alpha", "-1"], "--alpha"),
        (["--alpha", "0"], "--alpha"),
        (["--alpha", "nan"], "--alpha"),
        (["--p", "1.5"], "--p"),
        (["--p", "-0.1"], "--p"),
        (["--seed", "-1"], "--seed"),
        (["--seed", "1.5"], "--seed"),
        (["--n-jobs", "0"], "--n-jobs"),
        (["--dataset", "mnist"], "--dataset"),
        (["--partition", "diagonal"], "--partition"),
        # Checks that need the data set: more clients than rows, or than features.
        (["--dataset", "iris", "--clients", "151"], "--clients"),
        (["--dataset", "iris", "--partition", "vertical", "--clients", "5"], "--clients"),
    ],
)
def test_bad_values_exit_2_with_one_line_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert f"argument {flag}:" in lines[0]


def test_bad_value_exit_status_of_the_command():
    result = subprocess.run(
        [sys.executable, "-m", "skfedclust", "--clients", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "--clients" in result.stderr and result.stdout == ""


def test_help_shows_every_default(monkeypatch, capsys):
    # A wide terminal, so that no "(default: x)" is wrapped over two lines.
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for default in ("iris", "iid", "3", "0", "0.3", "0.5", "None", "False"):
        assert f"(default: {default})" in out
    assert out.count("(default:") == 8


class _Noisy(ClusterMixin, BaseEstimator):
    """Warns like a federated method whose clients all hit the same condition."""

    def __init__(self, n_clusters=2, partition=None, random_state=None):
        self.n_clusters = n_clusters
        self.partition = partition
        self.random_state = random_state

    def fit(self, X, y=None):
        for client in range(3):
            warnings.warn(f"client {client} is noisy\nsecond line", UserWarning, stacklevel=2)
        warnings.warn("something else happened", RuntimeWarning, stacklevel=2)
        self.labels_ = np.zeros(len(X), dtype=int)
        return self


class _AlsoNoisy(_Noisy):
    pass


def test_each_distinct_warning_is_shown_once(monkeypatch, capsys):
    monkeypatch.setattr(_cli, "all_estimators", lambda: [("Noisy", _Noisy), ("Other", _AlsoNoisy)])
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        assert main(["--dataset", "iris", "--clients", "2"]) == 0
    assert not escaped, "the demo must not let warnings through to stderr"
    out = capsys.readouterr().out
    table, notes = out.split("notes (warnings, each shown once):")
    assert "Noisy [1,2]" in table and "Other [1,2]" in table
    assert "KMeans (centralized)" in table
    # Category and first line only; the three clients' variants of one warning are one note.
    assert notes.count("UserWarning: client 0 is noisy (6 times)") == 1
    assert "client 1" not in notes and "second line" not in notes
    assert notes.count("RuntimeWarning: something else happened (2 times)") == 1


def test_no_notes_without_warnings():
    rows = [{"method": "A", "NMI": 1.0, "ARI": 1.0, "ACC": 1.0, "time": 0.1,
             "up": 10, "down": 2048, "rounds": 1, "warnings": []}]  # fmt: skip
    text = _cli.format_table(rows)
    assert "notes" not in text and "2.0 KB" in text


def test_python_dash_m_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "skfedclust", "--dataset", "blobs", "--clients", "2"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "KMeans (centralized)" in result.stdout


def _table_rows(out):
    """The table's rows, by method: the numbers of each (NMI, ARI, ACC, ...)."""
    table = out.split("\n\n")[1]
    rows = {}
    for line in table.splitlines()[2:]:
        name, numbers = line[:30].strip(), line[30:].split()
        rows[name] = numbers
    return rows


def test_the_legend_explains_every_column_and_every_start(capsys):
    assert main(["--dataset", "iris", "--clients", "3"]) == 0
    out = capsys.readouterr().out
    legend = out.split("columns:")[1].split("starts:")[0]
    for column in ("NMI", "ARI", "ACC", "fit s", "up", "down", "KB", "rounds"):
        assert f"\n  {column} " in legend, column
    assert "mutual information" in legend and "Rand" in legend and "matching" in legend
    assert "seconds" in legend and "1024 bytes" in legend
    starts = out.split("starts:")[1]
    rows = _table_rows(out)
    assert len(rows) == len(all_estimators()) + 3
    for method in rows:
        assert f"\n  {method} " in starts, method
    assert "same array" in starts


@pytest.mark.parametrize("argv", [["--dataset", "iris"], ["--dataset", "wine", "--seed", "3"]])
def test_kmeans_from_federated_kmeans_start_agrees_with_it(argv, capsys):
    assert main([*argv, "--partition", "dirichlet", "--clients", "4"]) == 0
    rows = _table_rows(capsys.readouterr().out)
    # NMI, ARI and ACC to the table's three decimals: the same labels.
    assert rows["KMeans (same start)"][:3] == rows["FederatedKMeans (same start)"][:3]
    # Nothing is sent by the pooled fit.
    assert rows["KMeans (same start)"][-3:] == ["-", "-", "-"]


def test_no_same_start_row_where_federated_kmeans_cannot_run(capsys):
    main(["--dataset", "wine", "--partition", "vertical", "--clients", "2"])
    out = capsys.readouterr().out
    assert "n/a: FederatedKMeans supports horizontal" in out
    assert "KMeans (same start)" not in _table_rows(out)
    assert "FederatedKMeans (same start)" not in _table_rows(out)


def test_the_fuzzy_c_means_start_follows_its_init():
    from skfedclust import FederatedFuzzyCMeans

    seeded = _cli.describe_start("FederatedFuzzyCMeans", FederatedFuzzyCMeans(init="k-means++"))
    assert "k-means++" in seeded and "its rows" in seeded
    given = _cli.describe_start("FederatedFuzzyCMeans", FederatedFuzzyCMeans(init=np.zeros((2, 2))))
    assert given == "the given centers"
    nodes = _cli.describe_start("FederatedFuzzyCMeans", FederatedFuzzyCMeans())
    assert "run by the nodes" in nodes and "local k-means" in nodes
    server = FederatedFuzzyCMeans(coordinator="sees-totals")
    assert "by the server" in _cli.describe_start("FederatedFuzzyCMeans", server)
    assert _cli.describe_start("NotAMethod", None) is None
