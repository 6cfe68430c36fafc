"""Demo: cluster a built-in data set with every estimator and print a comparison.

Run ``python -m skfedclust --help`` (or ``skfedclust-demo --help``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from sklearn import datasets as sk_datasets
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.preprocessing import StandardScaler

from . import datasets, partition
from .metrics import clustering_accuracy
from .utils import all_estimators

DATASETS = ["iris", "wine", "breast_cancer", "digits", "blobs", "s1", "s2", "s3", "s4", "heart"]
PARTITIONS = ["iid", "dirichlet", "noniid", "nonicd", "vertical", "hybrid"]

#: Per-estimator settings the demo needs beyond n_clusters, partition and seed.
DEMO_PARAMS = {
    # OmniFC's secret sharing needs 2l+2t-1 = 7 share-holding parties.
    "OmniFCClustering": lambda args: {"n_parties": max(7, args.clients)},
}


def load(name, seed):
    """Return ``(X, y)`` of a demo data set."""
    if name == "blobs":
        return sk_datasets.make_blobs(600, centers=4, n_features=4, random_state=seed)
    if name in ("s1", "s2", "s3", "s4"):
        return datasets.load_s_sets(int(name[1]), return_X_y=True)
    if name == "heart":
        return datasets.load_heart_statlog(return_X_y=True)
    return getattr(sk_datasets, f"load_{name}")(return_X_y=True)


def make_partition(args):
    """The partition specification chosen on the command line."""
    m, seed = args.clients, args.seed
    if args.partition == "iid":
        return partition.IIDPartition(m, random_state=seed)
    if args.partition == "dirichlet":
        return partition.DirichletPartition(m, args.alpha, min_size=5, random_state=seed)
    if args.partition == "noniid":
        return partition.NonIIDLevelPartition(args.p, n_clients=m, random_state=seed)
    if args.partition == "nonicd":
        return partition.NonICDPartition(m, random_state=seed)
    if args.partition == "vertical":
        return partition.VerticalPartition(m)
    return partition.HybridPartition(max(m // 2, 1), 2, random_state=seed)


def run_one(name, estimator, X, y):
    """Fit one estimator; return a table row (or a row that says why it could not run)."""
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(X, y)
    except (ValueError, TypeError) as exc:
        return {"method": name, "error": str(exc).splitlines()[0][:70]}
    elapsed = time.perf_counter() - start
    labels = estimator.labels_
    comm = getattr(estimator, "communication_", None) or {}
    return {
        "method": name,
        "NMI": normalized_mutual_info_score(y, labels),
        "ARI": adjusted_rand_score(y, labels),
        "ACC": clustering_accuracy(y, labels),
        "time": elapsed,
        "up": comm.get("bytes_up"),
        "down": comm.get("bytes_down"),
        "rounds": comm.get("rounds"),
    }


def _bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def format_table(rows):
    """Render rows as a fixed-width text table."""
    header = f"{'method':<26}{'NMI':>7}{'ARI':>7}{'ACC':>7}{'fit s':>8}{'up':>11}{'down':>11}"
    lines = [header + f"{'rounds':>8}", "-" * (len(header) + 8)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['method']:<26}  n/a: {r['error']}")
            continue
        rounds = "-" if r["rounds"] is None else str(r["rounds"])
        lines.append(
            f"{r['method']:<26}{r['NMI']:>7.3f}{r['ARI']:>7.3f}{r['ACC']:>7.3f}"
            f"{r['time']:>8.2f}{_bytes(r['up']):>11}{_bytes(r['down']):>11}{rounds:>8}"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m skfedclust",
        description="Cluster a data set with every federated estimator and compare them.",
    )
    parser.add_argument("--dataset", choices=DATASETS, default="iris")
    parser.add_argument("--partition", choices=PARTITIONS, default="iid")
    parser.add_argument("--clients", type=int, default=3, help="number of clients")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.3, help="Dirichlet concentration")
    parser.add_argument("--p", type=float, default=0.5, help="Non-IID level of 'noniid'")
    parser.add_argument("--n-jobs", type=int, default=None, dest="n_jobs")
    parser.add_argument("--no-scale", action="store_true", help="skip standardisation")
    return parser.parse_args(argv)


def main(argv=None):
    """Entry point of the demo."""
    args = parse_args(argv)
    try:
        X, y = load(args.dataset, args.seed)
    except OSError as exc:
        print(f"cannot load {args.dataset}: {exc}", file=sys.stderr)
        return 2
    if not args.no_scale:
        X = StandardScaler().fit_transform(X)
    k = len(np.unique(y))
    spec = make_partition(args)
    print(
        f"{args.dataset}: {X.shape[0]} samples, {X.shape[1]} features, {k} clusters; "
        f"partition {spec!r}\n"
    )
    rows = []
    for name, cls in all_estimators():
        params = {"n_clusters": k, "partition": spec, "random_state": args.seed}
        params.update(DEMO_PARAMS.get(name, lambda a: {})(args))
        if "n_jobs" in cls().get_params():
            params["n_jobs"] = args.n_jobs
        rows.append(run_one(name, cls(**params), X, y))
    reference = KMeans(n_clusters=k, n_init=10, random_state=args.seed)
    central = run_one("KMeans (centralized)", reference, X, y)
    rows.append(central)
    print(format_table(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
