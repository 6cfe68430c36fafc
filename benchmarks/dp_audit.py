"""Empirical privacy audit of the DP estimators: lower bounds on epsilon from neighbours.

Usage::

    python benchmarks/dp_audit.py [--trials 200] [--out benchmarks/results/dp_audit.md]

Each mechanism runs ``--trials`` times on a data set and on its neighbour (one
row replaced by the corner of the public box, the worst case of the
replace-one relation); :func:`skfedclust.secure.audit_epsilon` bounds epsilon
from below with 95% confidence. A bound below the claim is consistent with it;
the rows without noise show what the same test finds when nothing is
private.
"""

import argparse
import sys
import time
import warnings

import numpy as np
from _common import emit, git_commit

from skfedclust import FederatedKMeans, FedSpectralClustering
from skfedclust.secure import audit_epsilon

EPSILON, DELTA = 1.0, 1e-5


def neighbours(n=20, d=2, corner=4.0):
    rng = np.random.RandomState(0)
    X = np.vstack([rng.normal(c, 0.3, (n, d)) for c in (-2.0, 0.0, 2.0)])
    other = X.copy()
    other[0] = corner
    return X, other


def clients(data):
    return [data[::3], data[1::3], data[2::3]]


def fedkmeans(private):
    def release(data, seed):
        params = dict(privacy="dp", epsilon=EPSILON, delta=DELTA, bounds=(-4.0, 4.0))
        est = FederatedKMeans(3, max_iter=3, random_state=seed, **(params if private else {})).fit(
            clients(data)
        )
        return float(est.cluster_centers_.sum())

    return release


def fedsc(mode):
    params = {
        "data": dict(privacy="data", epsilon=EPSILON, delta=DELTA, clip_norm=8.0),
        "factors": dict(
            privacy="factors",
            epsilon=EPSILON,
            delta=DELTA,
            bandwidth=2.0,
            z_update="gradient",
            learning_rate=0.1,
        ),
        None: dict(bandwidth=2.0),
    }[mode]

    def release(data, seed):
        est = FedSpectralClustering(
            3, n_rounds=1, n_components=4, kmeans_n_init=1, random_state=seed, **params
        ).fit(clients(data))
        return float(np.sum(est.dictionary_))

    return release


MECHANISMS = [
    ("FederatedKMeans(privacy='dp')", EPSILON, fedkmeans(True), 20),
    ("FedSpectralClustering(privacy='data')", EPSILON, fedsc("data"), 10),
    ("FedSpectralClustering(privacy='factors')", EPSILON, fedsc("factors"), 10),
    ("FederatedKMeans (no DP)", None, fedkmeans(False), 20),
    ("FedSpectralClustering (no DP)", None, fedsc(None), 10),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    # Small private fits warn that a cluster drowned in the noise; the audit needs none of it.
    warnings.simplefilter("ignore")
    commit = git_commit()
    lines = [
        f"# Empirical privacy audit (commit {commit})",
        "",
        f"Command: `python benchmarks/dp_audit.py --trials {args.trials}` at commit {commit}. "
        f"Each mechanism ran {args.trials} times on three clients' blobs and {args.trials} "
        "times on the neighbour with one row replaced by the corner of the public box; "
        "`skfedclust.secure.audit_epsilon` gives the lower bound on epsilon (95% confidence, "
        f"delta = {DELTA:g}). The statistic is the sum of the released centers "
        "(FederatedKMeans) or of the dictionary (FedSC).",
        "",
        "| mechanism | claimed epsilon | rows per client | lower bound | FPR bound | "
        "FNR bound | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, claim, release, n in MECHANISMS:
        X, other = neighbours(n=n)
        started = time.perf_counter()
        result = audit_epsilon(
            release, (X, other), n_trials=args.trials, delta=DELTA, random_state=0
        )
        seconds = time.perf_counter() - started
        lines.append(
            f"| {name} | {'none' if claim is None else f'{claim:g}'} | {n} | "
            f"{result.epsilon_lower:.3f} | {result.false_positive_rate:.3f} | "
            f"{result.false_negative_rate:.3f} | {seconds:.0f} |"
        )
        sys.stderr.write(lines[-1] + "\n")
    lines += [
        "",
        "Reading: a bound below the claim is consistent with it, not a proof. The rows "
        "without DP show the power of each test: where the bound is well above 0 the "
        "statistic tells the neighbours apart without noise, and the bound with DP stays "
        "below the claim; where it is 0 even without DP, the statistic does not see the "
        "replaced row through the estimator's own randomness, and that row of the audit says "
        "nothing either way.",
    ]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
