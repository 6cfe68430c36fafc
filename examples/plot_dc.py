"""
DC-Clustering on a hybrid split of 2-D data
===========================================

Two institutions (row groups) hold different samples; inside each institution one party
holds the x coordinate and another the y coordinate (two feature blocks), so no party sees
a single complete record. :class:`skfedclust.DCClustering` clusters the four parties'
data in one round through shared synthetic anchors. We compare it with *local* clustering
(party (1, 1) alone: the x coordinate of the first institution's samples) and with
*central* clustering of the pooled data, for blobs with k-means and for three rings with
spectral clustering. The row split is non-IID: the first institution holds two of the
three clusters, the second the other one and part of the middle one.
"""

# %%
# Data and the lattice
# --------------------
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans, SpectralClustering
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from skfedclust import DCClustering

rng = np.random.RandomState(0)
blobs, y_blobs = make_blobs(600, centers=[(0, 5), (4, 0), (8, 10)], cluster_std=0.8, random_state=0)
radius = np.repeat([1.0, 2.0, 3.0], 300) + rng.normal(0, 0.05, 900)
angle = rng.uniform(0, 2 * np.pi, 900)
rings, y_rings = np.c_[radius * np.cos(angle), radius * np.sin(angle)], np.repeat([0, 1, 2], 300)


def non_iid_rows(y):
    """Row group 1: all of cluster 0 and half of cluster 1; row group 2: the rest."""
    half = rng.permutation(np.flatnonzero(y == 1))
    first = np.sort(np.r_[np.flatnonzero(y == 0), half[: len(half) // 2]])
    return [first, np.setdiff1d(np.arange(len(y)), first)]


def lattice(X, groups):
    """Row groups x feature blocks: party (i, j) holds feature j of row group i."""
    return [[X[rows][:, [0]], X[rows][:, [1]]] for rows in groups]


# %%
# Fit local, DC and central clustering
# ------------------------------------
# Each party holds a single feature, which cannot be reduced by the private PCA; the
# estimator warns that the feature is shared unreduced (so this split has no
# dimensionality-reduction privacy layer). We silence that warning here, and the one
# spectral clustering gives for the disconnected 1-D neighbour graph of the local party.
warnings.simplefilter("ignore", UserWarning)
cases = {
    "Blobs, k-means": (blobs, y_blobs, "kmeans"),
    "Rings, spectral clustering": (rings, y_rings, "spectral"),
}
results = {}
for title, (X, y, clusterer) in cases.items():
    groups = non_iid_rows(y)
    order = np.concatenate(groups)
    dc = DCClustering(3, clusterer=clusterer, random_state=0).fit(lattice(X, groups))
    if clusterer == "kmeans":
        local = KMeans(3, n_init=10, random_state=0).fit_predict(X[groups[0]][:, [0]])
        central = KMeans(3, n_init=10, random_state=0).fit_predict(X)
    else:
        model = SpectralClustering(3, affinity="nearest_neighbors", random_state=0)
        local = model.fit_predict(X[groups[0]][:, [0]])
        central = model.fit_predict(X)
    results[title] = {
        "groups": groups,
        "Local: party (1, 1) alone": (X[groups[0]], local, y[groups[0]]),
        "DC-Clustering (4 parties, 1 round)": (X[order], dc.labels_, y[order]),
        "Central (pooled data)": (X, central, y),
    }
    print(
        f"{title}: {dc.communication_['rounds']} round, "
        f"{dc.communication_['n_messages']} messages (peer messages set up the anchors)"
    )

# %%
# Plot
# ----
# The first column shows who holds what: marker = row group; each row group's x and y
# coordinates sit with two different parties. Local clustering sees one coordinate of one
# institution's samples; DC-Clustering matches central clustering.
fig, axes = plt.subplots(2, 4, figsize=(15, 7.5))
for row, (title, res) in zip(axes, results.items()):
    X_all = cases[title][0]
    for g, (rows, marker) in enumerate(zip(res["groups"], ("o", "^"))):
        row[0].scatter(*X_all[rows].T, s=8, marker=marker, label=f"row group {g + 1}")
    row[0].set_title(f"{title}\nthe lattice (x and y held apart)")
    row[0].legend(loc="best", fontsize=8)
    for ax, name in zip(row[1:], list(res)[1:]):
        X, labels, y = res[name]
        ax.scatter(*X.T, c=labels, s=8, cmap="viridis")
        ax.set_title(f"{name}\nARI = {adjusted_rand_score(y, labels):.2f}")
for ax in axes.ravel():
    ax.set_xticks([])
    ax.set_yticks([])
fig.tight_layout()
plt.show()
