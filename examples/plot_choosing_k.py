"""
Choosing the number of clusters without pooling the data
========================================================

Internal indices score a clustering from the data alone, which is how the number of
clusters is usually chosen. In a federation nobody holds the data, but the
Calinski-Harabasz and Davies-Bouldin indices, a simplified silhouette and the inertia
need only sums over the rows:
:func:`skfedclust.select_n_clusters <skfedclust.model_selection.select_n_clusters>` fits
one federated estimator per candidate ``k`` and computes each index from secure sums, in
which the server learns per-cluster totals and nothing of a single client.

This example draws five blobs, splits them over six clients with a Dirichlet label skew,
and plots each index against ``k`` for federated M-Avg next to the same index of
scikit-learn's :class:`~sklearn.cluster.KMeans` on the pooled data.
"""

# %%
# The data and the search
# -----------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score, silhouette_score

from skfedclust import MAvg, select_n_clusters
from skfedclust.metrics import simplified_silhouette_score
from skfedclust.partition import DirichletPartition

centers = [[0, 0], [8, 0], [0, 8], [8, 8], [4, 14]]
X, y = make_blobs(1500, centers=centers, cluster_std=1.2, random_state=4)
partition = DirichletPartition(6, alpha=1.0)
candidates = list(range(2, 10))

federated = {
    criterion: select_n_clusters(
        MAvg(random_state=0),
        X,
        y,
        candidates=candidates,
        criterion=criterion,
        partition=partition,
    )
    for criterion in ("calinski_harabasz", "davies_bouldin", "silhouette", "inertia")
}
for criterion, result in federated.items():
    comm = result.communication
    print(
        f"{criterion:>17}: best k = {result.best}, {comm['rounds']} rounds, "
        f"{comm['bytes_total'] / 1e6:.2f} MB in total"
    )

# %%
# The same indices on the pooled data
# -----------------------------------
# scikit-learn's k-means on the pooled rows, scored with scikit-learn's indices; for the
# silhouette both its own (all pairwise distances) and the simplified one (distances to
# the centers), which is the one a federation can compute.
pooled = {"calinski_harabasz": [], "davies_bouldin": [], "silhouette": [], "inertia": []}
full_silhouette = []
for k in candidates:
    km = KMeans(k, n_init=10, random_state=0).fit(X)
    pooled["calinski_harabasz"].append(calinski_harabasz_score(X, km.labels_))
    pooled["davies_bouldin"].append(davies_bouldin_score(X, km.labels_))
    pooled["silhouette"].append(simplified_silhouette_score(X, km.labels_, km.cluster_centers_))
    pooled["inertia"].append(km.inertia_)
    full_silhouette.append(silhouette_score(X, km.labels_))

# %%
# Each index against k
# --------------------
titles = {
    "calinski_harabasz": "Calinski-Harabasz (higher is better)",
    "davies_bouldin": "Davies-Bouldin (lower is better)",
    "silhouette": "simplified silhouette (higher is better)",
    "inertia": "inertia (elbow)",
}
fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
for ax, (criterion, title) in zip(axes.ravel(), titles.items()):
    result = federated[criterion]
    ax.plot(candidates, result.scores, "o-", label="M-Avg, 6 clients (secure sums)")
    ax.plot(candidates, pooled[criterion], "s--", label="k-means, pooled (scikit-learn)")
    if criterion == "silhouette":
        ax.plot(candidates, full_silhouette, "^:", label="silhouette_score, pooled")
    ax.axvline(result.best, color="grey", lw=0.8)
    ax.set_title(title)
    ax.set_xlabel("number of clusters k")
    ax.legend(fontsize=8)
fig.suptitle("Five blobs over six clients: the indices against k")
fig.tight_layout()
plt.show()

# %%
# Every federated curve peaks (or bends) at the true five clusters, as the pooled ones
# do. The federated values differ from the pooled ones only because M-Avg's centers are
# not k-means' centers: given the same labels, the federated Calinski-Harabasz and
# Davies-Bouldin indices equal scikit-learn's (see the user guide).
print("true number of clusters:", len(np.unique(y)))
