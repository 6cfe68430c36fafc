"""
Federated fuzzy c-means: centralized FCM, one step per round
============================================================

:class:`skfedclust.FederatedFuzzyCMeans` runs rounds of fuzzy c-means over the clients:
each client runs a fuzzy c-means iteration on its own rows from the current centers and
gives its local centers with their fuzzy masses ``Σ_i u_ij^m``, and the new centers are
aggregated from them. With ``aggregation="v1"`` (the default) they are the mass-weighted
average of the local centers, which the nodes compute themselves from masked totals
(``coordinator="blind"``: the coordinator neither chooses a round's centers nor sees its
totals): with one local iteration per round that is exactly centralized fuzzy c-means,
whatever the split of the rows. ``aggregation="v2"`` instead runs k-means on all local
centers, index-free, on the server. Five label-skewed clients hold four overlapping
clusters.
"""

# %%
# Federated v1 against fuzzy c-means on the pooled rows
# -----------------------------------------------------
import matplotlib.pyplot as plt
import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import kmeans_plusplus
from sklearn.datasets import make_blobs

from skfedclust import FederatedFuzzyCMeans
from skfedclust.partition import DirichletPartition

X, y = make_blobs(900, centers=4, cluster_std=1.5, random_state=2)
spec = DirichletPartition(5, alpha=0.3, random_state=0)
print("rows per client:", [len(rows) for rows in spec.split(X, y)])

# By default the nodes compute the start too, and it never leaves them
# (initial_centers_ is None). To compare with fuzzy c-means on the pooled rows from the
# same start, the start is given: k-means++ seeds of the pooled rows.
start, _ = kmeans_plusplus(X, 4, random_state=0)
v1 = FederatedFuzzyCMeans(4, n_rounds=15, init=start, partition=spec, random_state=0).fit(X, y)
print("coordinator:", v1.coordinator_)


def memberships(X, centers, m=2.0):
    """Fuzzy memberships u_ij of every row to every center."""
    d2 = np.maximum(((X[:, None, :] - centers[None]) ** 2).sum(-1), 1e-300)
    inverse = d2 ** (-1.0 / (m - 1.0))
    return inverse / inverse.sum(axis=1, keepdims=True)


def pooled_fcm(X, centers, n_iter, m=2.0):
    """Bezdek's fuzzy c-means on the pooled rows, from given centers."""
    for _ in range(n_iter):
        um = memberships(X, centers, m) ** m
        centers = (um.T @ X) / um.sum(axis=0)[:, None]
    return centers


def largest_gap(centers, reference):
    """The largest difference between matched centers (v2's come in any order)."""
    cost = np.abs(centers[:, None, :] - reference[None, :, :]).max(axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return cost[rows, cols].max()


# The same start and as many iterations as rounds.
central = pooled_fcm(X, start, v1.n_iter_)
print("largest difference to pooled FCM:", largest_gap(v1.cluster_centers_, central))
c = v1.communication_
print(
    "rounds:",
    c["rounds"],
    " bytes to the server:",
    c["bytes_up"],
    " between nodes:",
    c["bytes_peer"],
)

# %%
# v2: k-means on the local centers
# --------------------------------
v2 = FederatedFuzzyCMeans(
    4, aggregation="v2", n_rounds=15, init=start, partition=spec, random_state=0
)
v2.fit(X, y)
print("v2 largest difference to pooled FCM:", largest_gap(v2.cluster_centers_, central))

# %%
# The memberships
# ---------------
# Each row is coloured by its cluster of largest membership, and drawn the fainter the
# lower that membership: the rows between clusters are the uncertain ones.
fig, axes = plt.subplots(1, 2, figsize=(10, 4.8), sharex=True, sharey=True)
for ax, (name, model) in zip(axes, [("v1 (weighted average)", v1), ("v2 (k-means)", v2)]):
    u = memberships(X, model.cluster_centers_)
    colours = plt.cm.tab10(u.argmax(axis=1))
    colours[:, 3] = (u.max(axis=1) - 0.25) / 0.75  # alpha from 0 (undecided) to 1
    ax.scatter(*X.T, s=6, c=colours)
    ax.scatter(*central.T, marker="x", s=90, c="k", label="pooled FCM")
    ax.scatter(*model.cluster_centers_.T, s=120, facecolor="none", edgecolor="tab:red", lw=2)
    ax.set_title(name)
    ax.set_xticks([])
    ax.set_yticks([])
axes[0].legend(loc="lower left")
fig.tight_layout()
plt.show()

# %%
# v1 reproduces centralized fuzzy c-means to rounding: each client's masses and
# mass-weighted sums are exactly what the pooled iteration adds up. v2 does not aim at
# that: it clusters the clients' local centers, which under label skew describe
# different subsets of the clusters (see the :ref:`User Guide <ffcm>`).
