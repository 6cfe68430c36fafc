"""A small demo data set, split among the nodes of a simulation or a local try.

Three Gaussian blobs in two dimensions (600 rows, drawn with NumPy only so
that a node does not import a data-set module for every message). A node
takes the contiguous share ``partition_id`` of ``num_partitions``: the same
rows ``prepare_data.py`` writes to ``org_<partition_id>.npy``.
"""

import numpy as np

CENTERS = np.array([[-6.0, -2.0], [0.0, 6.0], [6.0, -2.0]])


def demo_data(n_samples=600, seed=0):
    """The rows of the demo data set, in a fixed order."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(len(CENTERS), size=n_samples)
    return CENTERS[labels] + rng.normal(scale=0.8, size=(n_samples, CENTERS.shape[1]))


def demo_share(partition_id, num_partitions, n_samples=600):
    """Rows of share ``partition_id`` out of ``num_partitions`` (contiguous, near-equal)."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} is not in 0..{num_partitions - 1}")
    bounds = np.linspace(0, n_samples, num_partitions + 1).astype(int)
    return demo_data(n_samples)[bounds[partition_id] : bounds[partition_id + 1]]
