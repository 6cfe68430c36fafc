"""Reproduce OmniFC's Iris results (Yan, Liu & Zhang) and run the same grid on digits.

Tables reproduced, side by side with the paper's numbers:

* Tables 1 and 5 (Iris rows): Kappa and NMI of OmniFC-SC/KM/FCM/NMF, the
  centralized methods and k-FED (the federated baseline available here) for
  Non-IID levels p in {0, .25, .5, .75, 1}, m = 3 clients (k*), with 4 extra
  share-holding parties (``n_parties=7``: the paper's Iris setting cannot
  decode with l = t = 2, spec §7 A3);
* Tables 2 and 6 (Iris row): k-medoids, DBSCAN and Ward linkage, central vs OmniFC;
* the same grid on scikit-learn's digits (n = 1797, d = 64, 10 clients) as a
  stand-in for MNIST, which is not available offline (no paper numbers);
* Table 7: RMSE of the reconstructed distance matrix against n (digits).

Rows are L2-normalised (spec §6.2). Each cell is mean ± std over seeds; the
seed drives the partition, the clients' noise and the clusterers. Writes
``benchmarks/results/omnifc.md`` (``omnifc_quick.md`` with ``--quick``).

    python benchmarks/reproduce_omnifc.py --quick
    python benchmarks/reproduce_omnifc.py
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import DBSCAN, KMeans, SpectralClustering
from sklearn.datasets import load_digits, load_iris
from sklearn.decomposition import NMF
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import euclidean_distances, normalized_mutual_info_score
from sklearn.preprocessing import normalize

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import machine_line, markdown_table, mean_std, write_result  # noqa: E402

from skfedclust import KFed, OmniFCClustering  # noqa: E402
from skfedclust._omnifc_clusterers import FuzzyCMeans, HierarchicalLinkage, KMedoids  # noqa: E402
from skfedclust.metrics import kappa  # noqa: E402
from skfedclust.partition import NonIIDLevelPartition  # noqa: E402
from skfedclust.secure import lcc_squared_distances  # noqa: E402

LEVELS = [0.0, 0.25, 0.5, 0.75, 1.0]
#: Kernel width of spectral clustering on unit-norm rows. The paper does not give
#: it; scikit-learn's default gamma = 1 gives Kappa 0.72 on Iris, gamma = 10 the
#: paper's 0.95 (spec §6.8). The same gamma is used centrally and in OmniFC.
SC_GAMMA = 10.0
#: DBSCAN radius on unit-norm rows: spec §6.8 finds eps in [0.1, 0.2] matches the
#: paper on Iris; on digits eps = 0.35 is the largest that does not merge everything.
DBSCAN_EPS = {"Iris": 0.15, "digits": 0.35}
#: Fuzzifier of FCM: the authors' previous code uses 1.1; with the package default
#: 2.0, FCM on 64-d digits collapses to near-uniform memberships (Kappa 0.1-0.3).
FCM_M = 1.1
#: k-means restarts: 10, scikit-learn's default when the paper was written (now 1).
KM_N_INIT = 10
#: The field for the reproduction: q = 13 on unit-norm rows, close to the q ~ 12 the
#: paper's Table 7 implies. At the default prime (q = 9) Ward on Iris differs from
#: central Ward on a few near-tied rows (Kappa 0.92 instead of 0.94).
PRIME = 2**30 - 35

# --------------------------------------------------------------------------- #
# The paper's Iris numbers (spec §6.7), per p_noniid; None where not reported.
# --------------------------------------------------------------------------- #
PAPER_KAPPA = {
    "SC_central": [0.95, None, None, None, None],
    "OmniFC-SC": [0.95] * 5,
    "KM_central": [0.95, None, None, None, None],
    "k-FED": [0.38, 0.95, 0.93, 0.95, 0.71],
    "OmniFC-KM": [0.95] * 5,
    "FCM_central": [0.95, None, None, None, None],
    "OmniFC-FCM": [0.95] * 5,
    "NMF_central": [0.57, None, None, None, None],
    "OmniFC-NMF": [0.95] * 5,
}
PAPER_NMI = {
    "SC_central": [0.90, None, None, None, None],
    "OmniFC-SC": [0.90] * 5,
    "KM_central": [0.90, None, None, None, None],
    "k-FED": [0.66, 0.90, 0.87, 0.90, 0.70],
    "OmniFC-KM": [0.90] * 5,
    "FCM_central": [0.90, None, None, None, None],
    "OmniFC-FCM": [0.90] * 5,
    "NMF_central": [0.56, None, None, None, None],
    "OmniFC-NMF": [0.90] * 5,
}
PAPER_TABLE2 = {  # method -> (Kappa, NMI)
    "KMed central": (0.94, 0.86),
    "KMed OmniFC": (0.94, 0.86),
    "DBSCAN central": (0.50, 0.73),
    "DBSCAN OmniFC": (0.50, 0.73),
    "HC central": (0.94, 0.89),
    "HC OmniFC": (0.95, 0.90),
}
PAPER_RMSE = 0.0002  # Table 7, every n (MNIST)

GRID_COLUMNS = list(PAPER_KAPPA)


# --------------------------------------------------------------------------- #
# Data
# --------------------------------------------------------------------------- #
def load(name):
    if name == "Iris":
        X, y = load_iris(return_X_y=True)
    else:
        X, y = load_digits(return_X_y=True)
    return normalize(X), y


def scores(y, labels):
    return kappa(y, labels), normalized_mutual_info_score(y, labels)


# --------------------------------------------------------------------------- #
# Runs
# --------------------------------------------------------------------------- #
OMNIFC_METHODS = {
    "OmniFC-SC": ("spectral", {"gamma": SC_GAMMA}),
    "OmniFC-KM": ("kmeans", {"n_init": KM_N_INIT}),
    "OmniFC-FCM": ("fcm", {"m": FCM_M}),
    "OmniFC-NMF": ("nmf", None),
}


def central_runs(X, y, k, seed):
    """The centralized references on the pooled rows."""
    out = {}
    sc = SpectralClustering(k, gamma=SC_GAMMA, random_state=seed).fit(X)
    out["SC_central"] = scores(y, sc.labels_)
    out["KM_central"] = scores(y, KMeans(k, n_init=KM_N_INIT, random_state=seed).fit(X).labels_)
    out["FCM_central"] = scores(y, FuzzyCMeans(k, m=FCM_M, random_state=seed).fit(X).labels_)
    W = NMF(k, random_state=seed).fit_transform(X)
    out["NMF_central"] = scores(y, np.argmax(W, axis=1))
    return out


def federated_runs(X, y, k, seed, level, n_parties):
    """OmniFC (four clusterers) and k-FED on one Non-IID partition."""
    partition = NonIIDLevelPartition(level, random_state=seed)
    out, labels = {}, {}
    for name, (clusterer, params) in OMNIFC_METHODS.items():
        est = OmniFCClustering(
            k,
            clusterer=clusterer,
            clusterer_params=params,
            partition=partition,
            n_parties=n_parties,
            prime=PRIME,
            random_state=seed,
        ).fit(X, y)
        out[name] = scores(y, est.labels_)
        labels[name] = est.labels_
    kfed = KFed(k, partition=partition, random_state=seed).fit(X, y)
    out["k-FED"] = scores(y, kfed.labels_)
    return out, labels


def distance_method_runs(X, y, k, seed, n_parties, eps):
    """Tables 2/6: k-medoids, DBSCAN and Ward, central vs OmniFC."""
    D_plain = euclidean_distances(X)
    central = {
        "KMed central": KMedoids(k).fit(X).labels_,
        "DBSCAN central": DBSCAN(eps=eps).fit(X).labels_,
        "HC central": HierarchicalLinkage(k).fit(D_plain).labels_,
    }
    partition = NonIIDLevelPartition(0.0, random_state=seed)
    ours = {}
    for name, clusterer, params in (
        ("KMed OmniFC", "kmedoids", None),
        ("DBSCAN OmniFC", "dbscan", {"eps": eps}),
        ("HC OmniFC", "agglomerative", None),
    ):
        est = OmniFCClustering(
            k,
            clusterer=clusterer,
            clusterer_params=params,
            partition=partition,
            n_parties=n_parties,
            prime=PRIME,
            random_state=seed,
        ).fit(X, y)
        ours[name] = est.labels_
    return {name: scores(y, lab) for name, lab in {**central, **ours}.items()}, central, ours


def grid(name, seeds, levels):
    X, y = load(name)
    k = len(np.unique(y))
    n_parties = 7 if k < 7 else None
    results = {col: {lv: [] for lv in levels} for col in GRID_COLUMNS}
    invariant = {m: True for m in OMNIFC_METHODS}
    for seed in seeds:
        central = central_runs(X, y, k, seed)
        first = None
        for lv in levels:
            fed, labels = federated_runs(X, y, k, seed, lv, n_parties)
            for col, val in {**fed, **(central if lv == levels[0] else {})}.items():
                results[col][lv].append(val)
            if first is None:
                first = labels
            for m in OMNIFC_METHODS:
                invariant[m] &= bool(np.array_equal(first[m], labels[m]))
        print(f"  {name} seed {seed} done", flush=True)
    table2 = {}
    for seed in seeds:
        sc, _, _ = distance_method_runs(X, y, k, seed, n_parties, DBSCAN_EPS[name])
        for key, val in sc.items():
            table2.setdefault(key, []).append(val)
    return results, table2, invariant


def rmse_rows(ns, primes):
    X, _ = load("digits")
    rows = []
    for n in ns:
        Xn = X[:n]
        truth = euclidean_distances(Xn, squared=True)
        cells = []
        for prime in primes:
            D, _ = lcc_squared_distances(np.array_split(Xn, 10), prime=prime, random_state=0)
            cells.append(float(np.sqrt(np.mean((D - truth) ** 2))))
        rows.append([n] + [f"{c:.2e}" for c in cells] + [f"{PAPER_RMSE:.0e}"])
    return rows


# --------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------- #
def cell(values, idx, paper=None):
    text = mean_std([v[idx] for v in values], "{:.2f}") if values else "—"
    return text if paper is None else f"{text} ({paper:.2f})"


def grid_table(results, levels, metric, paper):
    idx = 0 if metric == "Kappa" else 1
    rows = []
    for lv in levels:
        row = [f"{lv:.2f}"]
        for col in GRID_COLUMNS:
            pv = paper[col][LEVELS.index(lv)] if paper else None
            row.append(cell(results[col][lv], idx, pv))
        rows.append(row)
    return markdown_table(["p"] + GRID_COLUMNS, rows)


def table2_table(table2, paper):
    rows = []
    for key, vals in table2.items():
        pk, pn = paper[key] if paper else (None, None)
        rows.append([key, cell(vals, 0, pk), cell(vals, 1, pn)])
    return markdown_table(["method", "Kappa", "NMI"], rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, 3 levels on digits")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    t0 = time.perf_counter()
    seeds = [0, 1] if args.quick else [0, 1, 2, 3, 4]
    digit_levels = [0.0, 0.5, 1.0] if args.quick else LEVELS

    digit_seeds = seeds[:3]  # digits fits take minutes each on a shared 2-core machine
    iris, iris_t2, iris_inv = grid("Iris", seeds, LEVELS)
    digits, digits_t2, digits_inv = grid("digits", digit_seeds, digit_levels)
    ns = [250, 500, 1000, 1797] if args.quick else [250, 500, 750, 1000, 1500, 1797]
    primes = [2**23 - 15, 2**30 - 35]
    rmse = rmse_rows(ns, primes)
    elapsed = time.perf_counter() - t0

    mode = "quick" if args.quick else "full"
    invariant_text = ", ".join(
        f"{m}: {'identical' if iris_inv[m] and digits_inv[m] else 'DIFFERENT'}"
        for m in OMNIFC_METHODS
    )
    body = f"""
Mode: **{mode}** (`python benchmarks/reproduce_omnifc.py{" --quick" if args.quick else ""}`),
seeds {seeds} (Iris), {digit_seeds} (digits), {elapsed:.0f} s. {machine_line()}

Each cell: our mean ± std over seeds, the paper's number in parentheses (the paper
reports single runs). Rows are L2-normalised; Iris has m = 3 data-holding clients
(one per class, as in the paper) plus 4 share-holding parties without data
(`n_parties=7`), because l = t = 2 needs 7 parties to decode (spec §7 A3); D does
not depend on this choice. OmniFC runs with `prime=2**30 - 35` (precision 'auto' gives
q = 13). Spectral clustering uses gamma = {SC_GAMMA:g} centrally and in OmniFC; k-means
n_init = {KM_N_INIT}; FCM m = {FCM_M} with 3 starts; DBSCAN eps = {DBSCAN_EPS["Iris"]} (Iris),
{DBSCAN_EPS["digits"]} (digits), min_samples = 5; HC is Ward linkage; k-medoids is alternate
with the heuristic init (scikit-learn-extra's defaults). The same settings are used
centrally and in OmniFC.

OmniFC labels across the Non-IID levels of a seed: {invariant_text}.

## Iris — Table 1 (Kappa)

{grid_table(iris, LEVELS, "Kappa", PAPER_KAPPA)}

## Iris — Table 5 (NMI)

{grid_table(iris, LEVELS, "NMI", PAPER_NMI)}

## Iris — Tables 2 and 6 (Kappa, NMI)

{table2_table(iris_t2, PAPER_TABLE2)}

## digits (stand-in for MNIST; no paper numbers) — Kappa

{grid_table(digits, digit_levels, "Kappa", None)}

## digits — NMI

{grid_table(digits, digit_levels, "NMI", None)}

## digits — Tables 2 and 6 analogue

{table2_table(digits_t2, None)}

## Table 7 analogue: RMSE of D against n (digits, L2-normalised)

RMSE over all n² entries between the decoded D and the squared distances of the
real rows, at the default prime (precision 'auto' gives q = 9 on these rows) and at
p = 2**30 - 35 (q = 13). The paper reports 2e-4 on MNIST at every n.

{markdown_table(["n", "RMSE, p = 2**23 - 15", "RMSE, p = 2**30 - 35", "paper (MNIST)"], rmse)}
"""
    name = "omnifc_quick" if args.quick else "omnifc"
    path = write_result(name, "OmniFC reproduction (Iris, digits)", body)
    notes = HERE / "results" / "omnifc_notes.md"
    if notes.exists():
        path.write_text(path.read_text() + "\n" + notes.read_text())


if __name__ == "__main__":
    main()
