"""Differentially private FederatedKMeans: accuracy against epsilon, beside diffprivlib's KMeans.

Run ``python benchmarks/dp_fedkmeans.py [--quick]``; writes
``benchmarks/results/dp_fedkmeans.md``.

For each data set and budget ``epsilon`` (``delta = 1e-5`` for ours; diffprivlib's
``KMeans`` is pure ``epsilon``-DP with the Laplace mechanism, so ours is the
weaker guarantee at the same ``epsilon``), over ten seeds:

- ``FederatedKMeans(privacy="dp")`` on 5 IID clients, secure sums on,
  ``dp_max_iter="auto"``, from the two private starts: ``"sphere-packing"``
  (centers spread in the bounds, no budget) and ``"random"`` (Gaussian draws
  from noisy moments, one release's share of the budget);
- diffprivlib's central ``KMeans`` (a trusted curator holds every row) on the
  pooled rows, with the same bounds;
- non-private references: ``FederatedKMeans(init="random")`` (federated Lloyd,
  equal to scikit-learn's) and ``KMeans(n_init=10)``.

Reported: ARI against the true classes, and the k-means cost of the returned
centers on the pooled rows relative to ``KMeans(n_init=10)``'s (the measure
FedDP-KMeans reports). Bounds are the data's per-feature range, taken as
public knowledge (the setting where diffprivlib's bounds are given too).

diffprivlib 0.6.6 imports its decision trees from private scikit-learn
modules that scikit-learn 1.7 removed; its k-means does not use them, so the
script stands a placeholder in for that one module before importing it.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
import warnings

import numpy as np
from _common import machine_line, markdown_table, write_result
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris, load_wine, make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler

from skfedclust import FederatedKMeans
from skfedclust.clusterers import squared_distances

EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0, 100.0)
NOTE = """\
ARI against the true classes, mean ± standard deviation over the seeds; cost: the k-means
cost of the returned centers on the pooled rows over that of `KMeans(n_init=10)`, median
over the seeds. Ours: `FederatedKMeans(privacy='dp')` from `init='sphere-packing'` or
`init='random'`, 5 IID clients, secure sums, (epsilon, 1e-5)-DP for replace-one
neighbours. diffprivlib: its central `KMeans`, epsilon-DP (pure), one trusted curator.
Bounds: the per-feature range of the data, taken as public. Iterations: those of the
last sphere-packing fit (`dp_max_iter="auto"`; a fit stops early when its centers stop
moving).

"""


def diffprivlib_kmeans():
    forest = types.ModuleType("diffprivlib.models.forest")
    forest.RandomForestClassifier = forest.DecisionTreeClassifier = None
    sys.modules.setdefault("diffprivlib.models.forest", forest)
    from diffprivlib.models import KMeans as DPKMeans

    return DPKMeans


def datasets():
    X, y = make_blobs(3000, centers=4, n_features=2, cluster_std=1.0, random_state=0)
    yield "blobs (n=3000, k=4, d=2)", X, y, 4
    X, y = make_blobs(5000, centers=8, n_features=10, cluster_std=1.5, random_state=1)
    yield "blobs (n=5000, k=8, d=10)", X, y, 8
    iris = load_iris()
    yield "iris (standardized)", StandardScaler().fit_transform(iris.data), iris.target, 3
    wine = load_wine()
    yield "wine (standardized)", StandardScaler().fit_transform(wine.data), wine.target, 3


def cost(X, centers):
    return float(squared_distances(X, centers).min(axis=1).sum())


def run(quick):
    DPKMeans = diffprivlib_kmeans()
    seeds = range(3 if quick else 10)
    epsilons = EPSILONS[::2] if quick else EPSILONS
    sections = []
    for name, X, y, k in datasets():
        bounds = (X.min(axis=0), X.max(axis=0))
        ids = np.arange(len(X)) % 5
        best = KMeans(k, n_init=10, random_state=0).fit(X)
        reference = best.inertia_
        plain = [
            FederatedKMeans(k, init="random", random_state=s).fit(X, client_ids=ids) for s in seeds
        ]
        rows = []
        timings = []
        for eps in epsilons:
            ours, moments, theirs = [], [], []
            for s in seeds:
                for init, results in (("sphere-packing", ours), ("random", moments)):
                    start = time.perf_counter()
                    fk = FederatedKMeans(
                        k, init=init, privacy="dp", epsilon=eps, bounds=bounds, random_state=s
                    ).fit(X, client_ids=ids)
                    timings.append(time.perf_counter() - start)
                    results.append(
                        (adjusted_rand_score(y, fk.labels_), cost(X, fk.cluster_centers_))
                    )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    dk = DPKMeans(k, epsilon=eps, bounds=bounds, random_state=s).fit(X)
                theirs.append((adjusted_rand_score(y, dk.labels_), cost(X, dk.cluster_centers_)))
            ours, moments, theirs = np.array(ours), np.array(moments), np.array(theirs)
            rows.append(
                [f"{eps:g}"]
                + [f"{r[:, 0].mean():.3f} ± {r[:, 0].std():.3f}" for r in (ours, moments, theirs)]
                + [f"{np.median(r[:, 1]) / reference:.2f}" for r in (ours, moments, theirs)]
                + [str(fk.n_iter_)]
            )
        plain_ari = np.mean([adjusted_rand_score(y, p.labels_) for p in plain])
        plain_cost = np.median([cost(X, p.cluster_centers_) for p in plain]) / reference
        dash = "–"
        rows.append(["∞ (no DP, random)", f"{plain_ari:.3f}", dash, dash, f"{plain_cost:.2f}"])
        rows[-1] += [dash] * 3
        central_ari = adjusted_rand_score(y, best.labels_)
        rows.append(["KMeans(n_init=10)", f"{central_ari:.3f}", dash, dash, "1.00"] + [dash] * 3)
        table = markdown_table(
            [
                "epsilon",
                "ARI, sphere-packing",
                "ARI, random",
                "ARI, diffprivlib",
                "cost, sphere-packing",
                "cost, random",
                "cost, diffprivlib",
                "iterations",
            ],
            rows,
        )
        sections.append(
            f"## {name}\n\n{table}\n\nMedian fit time (ours): {np.median(timings) * 1000:.0f} ms.\n"
        )
    return sections


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, 3 budgets")
    args = parser.parse_args()
    sections = run(args.quick)
    body = (
        "Command: `python benchmarks/dp_fedkmeans.py`"
        + (" --quick" if args.quick else "")
        + f"\n\n{machine_line()}\n\n"
        + NOTE
        + "\n".join(sections)
    )
    write_result("dp_fedkmeans", "Differentially private federated k-means", body)


if __name__ == "__main__":
    main()
