"""
Federated k-means by centroid sharing: rounds, and weighting the centroids
==========================================================================

:class:`skfedclust.KumarFederatedKMeans` runs a few rounds of centroid sharing: every
client runs k-means on its rows (from the global centroids after the first round) and
uploads its centroids; the server runs k-means on all of them and sends the global
centroids back. As described, the server gives every client centroid the same weight,
whatever the number of rows behind it; ``weighted=True`` sends each centroid's count
too. On standardized digits (64 features, three IID clients, ten clusters) the
unweighted method collapses round after round, and the weighted one does not.
"""

# %%
# Quality and cluster sizes after 1, 2 and 5 rounds
# -------------------------------------------------
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.metrics import normalized_mutual_info_score
from sklearn.preprocessing import StandardScaler

from skfedclust import KumarFederatedKMeans

X, y = load_digits(return_X_y=True)
X = StandardScaler().fit_transform(X)
rounds = [1, 2, 5]
results = {}
for weighted in (False, True):
    for n_rounds in rounds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # k-means on outlying singletons warns
            model = KumarFederatedKMeans(
                10, n_rounds=n_rounds, weighted=weighted, partition=3, random_state=0
            ).fit(X)
        results[weighted, n_rounds] = model
        print(
            f"weighted={weighted!s:5} rounds={n_rounds:2}: "
            f"NMI {normalized_mutual_info_score(y, model.labels_):.3f}, "
            f"largest cluster {np.bincount(model.labels_).max()} of {len(X)} rows, "
            f"{model.communication_['bytes_up']} bytes up"
        )
central = KMeans(10, n_init=10, random_state=0).fit(X)
print(f"KMeans on the pooled rows: NMI {normalized_mutual_info_score(y, central.labels_):.3f}")

# %%
# The sizes of the ten clusters
# -----------------------------
# Sorted cluster sizes after each number of rounds: a flat profile is ten digits, a
# single tall bar one cluster that swallowed the rest.
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, weighted in zip(axes, (False, True)):
    for i, n_rounds in enumerate(rounds):
        sizes = np.sort(np.bincount(results[weighted, n_rounds].labels_, minlength=10))[::-1]
        ax.bar(np.arange(10) + 0.27 * (i - 1), sizes, width=0.27, label=f"{n_rounds} rounds")
    ax.axhline(len(X) / 10, color="k", ls=":", lw=1)
    ax.set_title(f"weighted={weighted}")
    ax.set_xlabel("clusters, largest first")
axes[0].set_ylabel("rows")
axes[0].legend()
fig.tight_layout()
plt.show()

# %%
# Unweighted, a local cluster of one outlying row counts as much as one of hundreds: in
# 64 dimensions the server spends global clusters on such outliers and merges the dense
# ones, and the next round's local k-means, started from these centroids, keeps the
# outliers apart. Weighted by their counts, the centroids carry the rows behind them and
# the rounds keep the quality of the first. The counts cost ``n_clusters`` integers per
# upload (see the :ref:`User Guide <kumar>`).
