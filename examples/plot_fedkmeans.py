"""
Federated k-means by secure sums against scikit-learn's KMeans
==============================================================

:class:`skfedclust.FederatedKMeans` runs Lloyd's algorithm over clients that keep their
rows: every iteration each client adds, per cluster, the sum of its rows' deviations from
the center, their number and their squared distances, and a secure sum gives the server
only the totals. From the same initial centers it returns scikit-learn's
:class:`~sklearn.cluster.KMeans` clustering of the pooled rows. Here five clients hold
skewed shares of six clusters; we compare the two fits and count the bytes an iteration
costs with and without secure aggregation.
"""

# %%
# Five clients with skewed shares of the clusters
# -----------------------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skfedclust import FederatedKMeans, KFed
from skfedclust.partition import DirichletPartition

X, y = make_blobs(3000, centers=6, cluster_std=1.2, random_state=0)
rows = list(DirichletPartition(5, alpha=0.5, random_state=0).split(X, y))
clients = [X[r] for r in rows]
pooled = np.vstack(clients)
print("rows per client:", [len(c) for c in clients])

# %%
# Same start, same result
# -----------------------
# k-FED's one-shot centers as the common start (the estimator's default initialisation).
start = KFed(6, random_state=0).fit(clients).cluster_centers_
fed = FederatedKMeans(6, init=start, random_state=0).fit(clients)
km = KMeans(6, init=start, n_init=1).fit(pooled)
print("largest center difference:", np.abs(fed.cluster_centers_ - km.cluster_centers_).max())
print("same labels:", bool(np.all(fed.labels_ == km.labels_)))
print("iterations:", fed.n_iter_, km.n_iter_, " inertia:", fed.inertia_, km.inertia_)

fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), sharex=True, sharey=True)
for ax, labels, centers, title in [
    (axes[0], km.labels_, km.cluster_centers_, "KMeans on the pooled rows"),
    (axes[1], fed.labels_, fed.cluster_centers_, "FederatedKMeans, 5 clients"),
]:
    ax.scatter(pooled[:, 0], pooled[:, 1], c=labels, s=3, cmap="tab10")
    ax.scatter(centers[:, 0], centers[:, 1], c="k", marker="x", s=80)
    ax.set_title(title)
plt.tight_layout()

# %%
# Bytes per iteration
# -------------------
# Fits of one and of two iterations from the same start (``tol=0``): the difference is
# one iteration. With secure sums each client uploads a masked vector of
# ``k d + 2 k + 1`` numbers and exchanges Shamir shares of its self mask with its
# neighbours; without them, it uploads the same numbers in the clear.


def iteration_bytes(secure):
    reports = [
        FederatedKMeans(
            6, init=start, max_iter=it, tol=0, secure_aggregation=secure, random_state=0
        )
        .fit(clients)
        .communication_
        for it in (1, 2)
    ]
    return {k: reports[1][k] - reports[0][k] for k in ("bytes_up", "bytes_down", "bytes_peer")}


costs = {"secure sums": iteration_bytes(True), "in the clear": iteration_bytes(False)}
for name, cost in costs.items():
    print(f"{name:>12}: {cost}")

fig, ax = plt.subplots(figsize=(6, 3.5))
bottom = np.zeros(2)
for key in ("bytes_up", "bytes_down", "bytes_peer"):
    values = np.array([costs[name][key] for name in costs])
    ax.bar(list(costs), values, bottom=bottom, label=key.replace("bytes_", ""))
    bottom += values
ax.set_ylabel("bytes per Lloyd iteration (5 clients)")
ax.legend()
plt.tight_layout()
plt.show()
