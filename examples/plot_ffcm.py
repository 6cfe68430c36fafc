"""
Federated fuzzy c-means: centralized FCM, one step per round
============================================================

:class:`skfedclust.FederatedFuzzyCMeans` broadcasts the centers every round; each client
runs a fuzzy c-means iteration on its own rows and returns its local centers with their
fuzzy masses ``Σ_i u_ij^m``, and the server aggregates. With ``aggregation="v1"`` (the
default) the new centers are the mass-weighted average of the local centers, added up by
secure sums: with one local iteration per round that is exactly centralized fuzzy
c-means, whatever the split of the rows. ``aggregation="v2"`` instead runs k-means on all
local centers, index-free. Five label-skewed clients hold four overlapping clusters.
"""

# %%
# Federated v1 against fuzzy c-means on the pooled rows
# -----------------------------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_blobs

from skfedclust import FederatedFuzzyCMeans
from skfedclust.partition import DirichletPartition

X, y = make_blobs(900, centers=4, cluster_std=1.5, random_state=2)
spec = DirichletPartition(5, alpha=0.3, random_state=0)
print("rows per client:", [len(rows) for rows in spec.split(X, y)])

v1 = FederatedFuzzyCMeans(4, n_rounds=15, partition=spec, random_state=0).fit(X, y)


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


# The same start (the estimator's initial_centers_) and as many iterations as rounds.
central = pooled_fcm(X, v1.initial_centers_, v1.n_iter_)
print("largest difference to pooled FCM:", np.abs(v1.cluster_centers_ - central).max())
print("rounds:", v1.communication_["rounds"], " bytes up:", v1.communication_["bytes_up"])

# %%
# v2: k-means on the local centers
# --------------------------------
v2 = FederatedFuzzyCMeans(4, aggregation="v2", n_rounds=15, partition=spec, random_state=0)
v2.fit(X, y)
print("v2 largest difference to pooled FCM:", np.abs(v2.cluster_centers_ - central).max())

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
