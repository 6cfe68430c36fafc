"""FeCA fit time against centralized k-means.

Two cases on n=100,000, d=50, 10 IID clients (quick: n=20,000, d=20):

* the same total restarts (the convention of every speed case): FeCA with one
  k-means restart per client (10 restarts in all) against ``KMeans(n_init=10)``;
* the same restarts per sample (stricter): FeCA with its default ``n_init=10``
  on every client against ``KMeans(n_init=10)``.
"""

from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skfedclust import FeCA


def cases(quick):
    n, d, m, k = (20_000, 20, 10, 10) if quick else (100_000, 50, 10, 10)
    X, _ = make_blobs(n, n_features=d, centers=k, random_state=0)
    return [
        {
            "name": f"FeCA n_init=1 n={n:,} d={d} {m} clients k={k}",
            "federated": lambda: FeCA(k, n_init=1, partition=m, random_state=0).fit(X),
            # Each client runs one k-means restart; the centralized run gets as many.
            "reference": lambda: KMeans(k, n_init=m, random_state=0).fit(X),
            "reference_name": f"KMeans(n_init={m})",
            "goal_ratio": 1.5,
        },
        {
            "name": f"FeCA n_init=10 n={n:,} d={d} {m} clients k={k}",
            "federated": lambda: FeCA(k, n_init=10, partition=m, random_state=0).fit(X),
            # Every sample takes part in 10 restarts in both runs.
            "reference": lambda: KMeans(k, n_init=10, random_state=0).fit(X),
            "reference_name": "KMeans(n_init=10)",
            "goal_ratio": 1.5,
        },
    ]
