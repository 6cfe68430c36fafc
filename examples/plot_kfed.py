"""
k-FED: one-shot federated k-means on clients that each see a few clusters
=========================================================================

:class:`skfedclust.KFed` clusters in one round: every client runs k-means with ``k'``
clusters on its own rows and uploads the centers; the server seeds ``k`` global centers
with one client's centers and the local centers farthest from the seeds, runs Lloyd on
the pooled local centers and sends the global centers back. Its paper's point is that
heterogeneity helps: when each client holds only a few of the ``k`` clusters, a small
``k'`` finds them exactly. Here eight clients each hold two of eight clusters.
"""

# %%
# Eight clients, two clusters each
# --------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skfedclust import KFed
from skfedclust.metrics import centroid_distance

centers = np.array([[np.cos(a), np.sin(a)] for a in np.arange(8) * np.pi / 4]) * 10
X, y = make_blobs(1600, centers=centers, cluster_std=1.0, random_state=0)
# Client c holds half of cluster c and half of cluster c + 1: neighbouring clusters,
# as a region's clients might.
members = [np.flatnonzero(y == j) for j in range(8)]
first = [m[: len(m) // 2] for m in members]
second = [m[len(m) // 2 :] for m in members]
clients = [X[np.concatenate([first[c], second[(c + 1) % 8]])] for c in range(8)]
print("rows per client:", [len(c) for c in clients])

# %%
# k' = 2 (the clusters a client holds) against k' = k = 8
# -------------------------------------------------------
# With ``k' = 2`` every local center is a true cluster center; with ``k' = 8`` each
# client splits its two clusters into eight pieces, and the server must sort them out.
# The center error is the matched ℓ2 distance to the true centers
# (:func:`~skfedclust.metrics.centroid_distance`).
models = {
    "k-FED, k'=2": KFed(8, n_local_clusters=2, random_state=0).fit(clients),
    "k-FED, k'=8": KFed(8, random_state=0).fit(clients),
}
pooled = np.vstack(clients)
central = KMeans(8, n_init=1, random_state=0).fit(pooled)
for name, model in models.items():
    comm = model.communication_
    print(
        f"{name}: center error {centroid_distance(centers, model.cluster_centers_):.2f}, "
        f"{comm['rounds']} round, {comm['bytes_up']} bytes up"
    )
error = centroid_distance(centers, central.cluster_centers_)
print(f"KMeans on the pooled rows: center error {error:.2f}")

# %%
# What the server receives and what it returns
# --------------------------------------------
# Small dots: the pooled rows. Coloured circles: the local centers the clients uploaded
# (one colour per client). Red crosses: the global centers.
fig, axes = plt.subplots(1, 2, figsize=(10, 4.8), sharex=True, sharey=True)
for ax, (name, model) in zip(axes, models.items()):
    ax.scatter(*pooled.T, s=2, c="lightgray")
    for c, local in enumerate(model.local_centers_):
        ax.scatter(*local.T, s=30, color=plt.cm.tab10(c % 10), edgecolor="k", linewidth=0.3)
    ax.scatter(*model.cluster_centers_.T, marker="x", s=90, c="tab:red", linewidth=2)
    ax.set_title(f"{name}: {sum(len(lc) for lc in model.local_centers_)} local centers")
    ax.set_xticks([])
    ax.set_yticks([])
fig.tight_layout()
plt.show()

# %%
# With ``k' = 2`` the local centers already sit on the true centers, and the server only
# has to merge each pair of duplicates: one round, two centers per client, and the
# centers of k-means on the pooled rows. With ``k' = 8`` each client uploads eight pieces
# of its two clusters; the seeds, one client's eight centers, all lie in two clusters,
# and Lloyd on the pieces stops in a poor solution. Choosing ``k'`` near the number of
# clusters a client holds is what k-FED asks of its users (see the
# :ref:`User Guide <kfed>`).
