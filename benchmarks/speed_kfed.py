"""k-FED fit time against centralized k-means with the same total restarts."""

from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skfedclust import KFed


def cases(quick):
    n, d, m, k = (20_000, 20, 10, 10) if quick else (100_000, 50, 10, 10)
    X, _ = make_blobs(n, n_features=d, centers=k, random_state=0)
    return [
        {
            "name": f"KFed n={n:,} d={d} {m} clients k={k}",
            "federated": lambda: KFed(k, n_init=1, partition=m, random_state=0).fit(X),
            # Each client runs one k-means restart; the centralized run gets as many.
            "reference": lambda: KMeans(k, n_init=m, random_state=0).fit(X),
            "reference_name": f"KMeans(n_init={m})",
            "goal_ratio": None,
        }
    ]
