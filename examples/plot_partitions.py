"""
What each partition specification does to a data set
=====================================================

Federated clustering methods are compared under simulated client splits. This example
draws one 2-D data set with four classes and colours each point by the client that holds
it, for every horizontal specification of :mod:`skfedclust.partition`, and shows which
classes each client ends up with.
"""

# %%
# One data set, six splits
# ------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_blobs

from skfedclust.partition import (
    DirichletPartition,
    IIDPartition,
    NonICDPartition,
    NonIIDLevelPartition,
)

X, y = make_blobs(800, centers=[[0, 0], [6, 0], [0, 6], [6, 6]], cluster_std=1.3, random_state=0)

specs = {
    "IID, 4 clients": IIDPartition(4, random_state=0),
    "Dirichlet(α=1), 4 clients": DirichletPartition(4, alpha=1.0, random_state=0),
    "Dirichlet(α=0.1), 4 clients": DirichletPartition(4, alpha=0.1, random_state=0),
    "Non-IID level p=0.5": NonIIDLevelPartition(0.5, random_state=0),
    "Non-IID level p=1": NonIIDLevelPartition(1.0, random_state=0),
    "Non-ICD, 4 clients": NonICDPartition(4, random_state=2),
}

fig, axes = plt.subplots(2, 3, figsize=(12, 8), sharex=True, sharey=True)
for ax, (title, spec) in zip(axes.ravel(), specs.items()):
    for client, rows in enumerate(spec.split(X, y)):
        ax.scatter(*X[rows].T, s=6, label=f"client {client}")
    ax.set_title(title)
axes[0, 0].legend(loc="lower right", markerscale=3, fontsize=8)
fig.suptitle("Points coloured by the client that holds them")
fig.tight_layout()

# %%
# Class mix of each client
# ------------------------
# Each bar is a client; its segments count the samples of each class it holds. IID
# clients hold every class in equal parts; smaller Dirichlet α and larger Non-IID level
# concentrate clients on fewer classes; Non-ICD clients hold fragments (k-means
# sub-clusters) of a random subset of classes.
fig, axes = plt.subplots(1, len(specs), figsize=(15, 3), sharey=True)
for ax, (title, spec) in zip(axes, specs.items()):
    rows = list(spec.split(X, y))
    counts = np.array([np.bincount(y[r], minlength=4) for r in rows])
    bottom = np.zeros(len(rows))
    for c in range(4):
        ax.bar(range(len(rows)), counts[:, c], bottom=bottom, label=f"class {c}")
        bottom += counts[:, c]
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("client")
axes[0].set_ylabel("samples")
axes[-1].legend(fontsize=7)
fig.tight_layout()
plt.show()
