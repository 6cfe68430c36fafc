"""Test configuration: the data loaders read the repository's benchmark data, and a node's
privacy ledger is written to a directory of each test's own, never to the user's home."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("SKFEDCLUST_DATA", str(Path(__file__).parent / "benchmarks" / "data"))

# Nodes keep a ledger in the per-user state directory by default. Anything run
# outside a test (module level, worker processes started once per session)
# writes to this session's directory; each test (and each page's examples)
# gets its own below, so that one test's fits never refuse another's.
_SESSION_STATE = tempfile.mkdtemp(prefix="skfedclust-state-")
atexit.register(shutil.rmtree, _SESSION_STATE, ignore_errors=True)
os.environ["SKFEDCLUST_STATE_DIR"] = _SESSION_STATE


@pytest.fixture(autouse=True)
def _node_state_directory(tmp_path_factory, monkeypatch):
    """``SKFEDCLUST_STATE_DIR`` of this test alone (a node's default ledger is under it)."""
    state = tmp_path_factory.mktemp("skfedclust-state")
    monkeypatch.setenv("SKFEDCLUST_STATE_DIR", str(state))
    return state
