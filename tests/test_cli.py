"""The demo command prints one row per estimator and the centralized reference."""

import subprocess
import sys

import pytest

from skfedclust._cli import main, parse_args
from skfedclust.utils import all_estimators


def test_demo_prints_every_estimator(capsys):
    assert main(["--dataset", "iris", "--partition", "iid", "--clients", "3"]) == 0
    out = capsys.readouterr().out
    for name, _ in all_estimators():
        assert name in out
    assert "KMeans (centralized)" in out
    assert "rounds" in out and "NMI" in out


def test_demo_explains_methods_that_cannot_run(capsys):
    main(["--dataset", "wine", "--partition", "vertical", "--clients", "2"])
    out = capsys.readouterr().out
    assert "KFed" in out and "n/a: KFed supports horizontal federations only" in out


def test_demo_rejects_unknown_options():
    with pytest.raises(SystemExit):
        parse_args(["--partition", "diagonal"])


def test_python_dash_m_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "skfedclust", "--dataset", "blobs", "--clients", "2"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "KMeans (centralized)" in result.stdout
