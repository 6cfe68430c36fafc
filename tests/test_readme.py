"""The README's examples run as written: its Python blocks and its inline fit calls."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_blocks_run():
    blocks = _python_blocks(README.read_text())
    assert blocks, "the README has no Python example"
    namespace = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    est = namespace["est"]
    assert est.labels_.shape == (len(namespace["X"]),)


def test_readme_inline_fit_calls_run():
    """Inline calls such as ``KFed(..., partition=...).fit(X, y)`` are code a user copies."""
    text = README.read_text()
    calls = [c for c in re.findall(r"`([^`\n]*\.fit\([^`\n]*\))`", text)]
    assert calls, "the README names no inline fit call"
    namespace = {}
    exec(
        "from sklearn.datasets import make_blobs\n"
        "from skfedclust import *\n"
        "from skfedclust.partition import *\n"
        "X, y = make_blobs(600, centers=4, random_state=0)\n",
        namespace,
    )
    for call in calls:
        fitted = eval(call, namespace)
        assert np.unique(fitted.labels_).size > 1, call
