"""The far-rows rule for empty clusters, shared by both coordinator modes of FederatedKMeans.

An iteration that leaves a cluster empty moves it to the mean of the far
rows (beyond the mean squared distance) of the cluster of largest inertia,
computed from sums alone: no row leaves a client.
"""

import numpy as np


def relocate_empty(centers, new, sums, counts, inertia, far):
    """Move each empty cluster to the mean of a donor cluster's far rows.

    ``far`` is ``(donors, far_sums, far_counts)``; the far rows leave their
    donor cluster, as scikit-learn's relocated row leaves its cluster.
    """
    empty = np.flatnonzero(counts == 0)
    donors, far_sums, far_counts = far
    for e, j, s, m in zip(empty, donors, far_sums, far_counts):
        if m == 0 or m >= counts[j]:
            continue
        new[e] = centers[j] + s / m
        new[j] = centers[j] + (sums[j] - s) / (counts[j] - m)
    return new


def donor_clusters(counts, inertia):
    """Donor clusters for the empty ones: the largest inertia first, two rows at least."""
    n_empty = int(np.count_nonzero(counts == 0))
    order = np.argsort(-inertia, kind="stable")
    able = [int(j) for j in order if counts[j] >= 2 and inertia[j] > 0]
    return able[:n_empty]
