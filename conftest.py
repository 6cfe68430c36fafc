"""Test configuration: the data loaders read the repository's benchmark data."""

import os
from pathlib import Path

os.environ.setdefault("SKFEDCLUST_DATA", str(Path(__file__).parent / "benchmarks" / "data"))
