"""Reproduce DC-Clustering's Table 2 and the Iris and Heart-statlog rows of Tables 4-6.

Kawamata et al., "A new type of federated clustering: A non-model-sharing
approach" (arXiv:2506.10244). Two configurations of :class:`skfedclust.DCClustering`
are run side by side:

* **DC (paper text)**: the setup the paper describes: uniform anchors over
  each feature's range, ``n_features - 1`` PCA components per party, affine
  alignment (the package defaults);
* **DC (lossless)**: all PCA components and isotropic anchors
  (``anchor_range="global"``), the configuration that reproduces the
  paper's reported numbers.

Usage::

    python benchmarks/reproduce_dc.py            # 10 seeds for Table 2, 100 trials for Tables 4-6
    python benchmarks/reproduce_dc.py --quick    # 3 seeds, 20 trials

Writes ``benchmarks/results/dc.md``. Heart-statlog is read with
:func:`skfedclust.datasets.load_heart_statlog` (``SKFEDCLUST_DATA`` points to
the data folder).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans, SpectralClustering
from sklearn.datasets import load_iris, make_blobs
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from skfedclust import DCClustering, KumarFederatedKMeans
from skfedclust.datasets import load_heart_statlog
from skfedclust.metrics import clustering_accuracy

RESULTS = Path(__file__).parent / "results" / "dc.md"

CONFIGS = {
    "DC (paper text)": {},
    "DC (lossless)": {"anchor_range": "global", "n_components_intermediate": None},
}

# Paper values (ARI, NMI, ACC); Table 2 is a single run, Tables 4 and 6 mean (SD).
PAPER_TABLE2 = {
    ("Blobs", "IID"): {
        "Local (1,1)": (0.786, 0.777, 0.920),
        "Local (1,2)": (0.877, 0.853, 0.956),
        "Central": (1.0, 1.0, 1.0),
        "Proposed": (1.0, 1.0, 1.0),
    },
    ("Blobs", "non-IID"): {
        "Local (1,1)": (0.295, 0.357, 0.591),
        "Local (1,2)": (0.571, 0.761, 0.673),
        "Local (2,1)": (0.141, 0.209, 0.511),
        "Local (2,2)": (0.142, 0.209, 0.508),
        "Central": (1.0, 1.0, 1.0),
        "Proposed": (1.0, 1.0, 1.0),
    },
    ("Rings", "IID"): {
        "Local (1,1)": (0.261, 0.294, 0.579),
        "Local (1,2)": (0.253, 0.286, 0.575),
        "Central": (1.0, 1.0, 1.0),
        "Proposed": (1.0, 1.0, 1.0),
    },
    ("Rings", "non-IID"): {
        "Local (1,1)": (0.261, 0.294, 0.579),
        "Local (1,2)": (0.253, 0.286, 0.575),
        "Local (2,1)": (-0.001, 0.001, 0.351),
        "Local (2,2)": (-0.002, 0.001, 0.348),
        "Central": (1.0, 1.0, 1.0),
        "Proposed": (1.0, 1.0, 1.0),
    },
}

PAPER_TABLES = {
    ("Iris", "kmeans"): {
        "Local (1,1)": "0.683 (0.245) | 0.773 (0.169) | 0.854 (0.124)",
        "Kumar et al.": "0.735 (0.105) | 0.737 (0.085) | 0.893 (0.051)",
        "Proposed": "0.752 (0.015) | 0.775 (0.013) | 0.904 (0.007)",
        "Central": "0.730 (0.001) | 0.758 (0.002) | 0.893 (0.001)",
    },
    ("Iris", "spectral"): {
        "Local (1,1)": "0.464 (0.185) | 0.610 (0.143) | 0.755 (0.106)",
        "Hernández-Pereira et al.": "0.008 (0.076) | 0.021 (0.080) | 0.392 (0.056)",
        "Proposed": "0.787 (0.052) | 0.806 (0.032) | 0.918 (0.024)",
        "Central": "0.759 (0.000) | 0.806 (0.000) | 0.907 (0.000)",
    },
    ("Heart-statlog", "kmeans"): {
        "Local (1,1)": "0.045 (0.098) | 0.064 (0.074) | 0.623 (0.077)",
        "Kumar et al.": "0.057 (0.066) | 0.041 (0.051) | 0.610 (0.056)",
        "Proposed": "0.030 (0.000) | 0.020 (0.000) | 0.593 (0.000)",
        "Central": "0.030 (0.000) | 0.020 (0.000) | 0.593 (0.000)",
    },
    ("Heart-statlog", "spectral"): {
        "Local (1,1)": "0.039 (0.094) | 0.059 (0.071) | 0.611 (0.079)",
        "Hernández-Pereira et al.": "0.001 (0.007) | 0.003 (0.005) | 0.527 (0.021)",
        "Proposed": "0.049 (0.000) | 0.034 (0.000) | 0.615 (0.001)",
        "Central": "0.049 (0.000) | 0.034 (0.000) | 0.615 (0.000)",
    },
}


def scores(y, labels):
    # NMI with scikit-learn's default (arithmetic) normalisation: it matches the
    # paper's central values; the geometric one of eq. 22 differs by < 1e-3 here.
    return (
        adjusted_rand_score(y, labels),
        normalized_mutual_info_score(y, labels),
        clustering_accuracy(y, labels),
    )


def central(X, k, clusterer, seed):
    if clusterer == "kmeans":
        return KMeans(k, n_init=10, random_state=seed).fit_predict(X)
    return SpectralClustering(k, affinity="nearest_neighbors", random_state=seed).fit_predict(X)


def dc_labels(grid, k, clusterer, config, seed):
    est = DCClustering(k, clusterer=clusterer, random_state=seed, **CONFIGS[config])
    return est.fit(grid).labels_


# --------------------------------------------------------------------------- #
# Experiment I: synthetic data, 2 row groups x 2 feature blocks
# --------------------------------------------------------------------------- #
def minor_features(n, rng):
    cov = np.full((4, 4), 0.01) + np.eye(4) * 0.09  # diagonal 0.1, off-diagonal 0.01
    return rng.multivariate_normal(np.zeros(4), cov, n)


def synthetic(name, seed):
    """1500 points, 3 clusters; columns: major 1, minor 1-2 | major 2, minor 3-4."""
    rng = np.random.RandomState(seed)
    if name == "Blobs":
        major, y = make_blobs(
            1500, centers=[(0, 5), (4, 0), (8, 10)], cluster_std=0.8, random_state=seed
        )
    else:  # three concentric rings, radii 2, 4, 6 (make_circles only makes two)
        y = np.repeat([0, 1, 2], 500)
        radius = 2.0 * (y + 1) + rng.normal(0, 0.1, 1500)
        angle = rng.uniform(0, 2 * np.pi, 1500)
        major = np.c_[radius * np.cos(angle), radius * np.sin(angle)]
    minor = minor_features(1500, rng)
    X = np.c_[major[:, :1], minor[:, :2], major[:, 1:], minor[:, 2:]]
    return X, y


def row_groups(y, split, rng):
    if split == "IID":
        order = rng.permutation(len(y))
        return [np.sort(order[:750]), np.sort(order[750:])]
    # Row 1: all of cluster 0 and half of cluster 1; row 2: the rest.
    half = rng.permutation(np.flatnonzero(y == 1))
    first = np.sort(np.concatenate([np.flatnonzero(y == 0), half[:250]]))
    return [first, np.setdiff1d(np.arange(len(y)), first)]


def experiment_one(n_seeds):
    results = {}
    for data, clusterer in (("Blobs", "kmeans"), ("Rings", "spectral")):
        for split in ("IID", "non-IID"):
            rows = {}
            for seed in range(n_seeds):
                X, y = synthetic(data, seed)
                groups = row_groups(y, split, np.random.RandomState(seed))
                blocks = [np.arange(3), np.arange(3, 6)]
                grid = [[X[np.ix_(g, b)] for b in blocks] for g in groups]
                y_grid = y[np.concatenate(groups)]
                n_local = 2 if split == "IID" else 4
                for p in range(n_local):
                    i, j = divmod(p, 2)
                    local = central(grid[i][j], 3, clusterer, seed)
                    rows.setdefault(f"Local ({i + 1},{j + 1})", []).append(
                        scores(y[groups[i]], local)
                    )
                rows.setdefault("Central", []).append(scores(y, central(X, 3, clusterer, seed)))
                for config in CONFIGS:
                    labels = dc_labels(grid, 3, clusterer, config, seed)
                    rows.setdefault(config, []).append(scores(y_grid, labels))
            results[(data, split)] = {m: np.array(v) for m, v in rows.items()}
            print(f"Table 2 {data} {split} done", flush=True)
    return results


# --------------------------------------------------------------------------- #
# Experiment II: Iris and Heart-statlog, 10 row groups x 2 feature blocks
# --------------------------------------------------------------------------- #
def lattice(n_samples, n_features, rng):
    groups = [np.sort(g) for g in np.array_split(rng.permutation(n_samples), 10)]
    # np.array_split gives the first block the extra feature for odd counts.
    blocks = [np.sort(b) for b in np.array_split(rng.permutation(n_features), 2)]
    return groups, blocks


def experiment_two(X, y, n_trials, n_kumar_trials):
    k = len(np.unique(y))
    results = {"kmeans": {}, "spectral": {}}
    for trial in range(n_trials):
        rng = np.random.RandomState(trial)
        groups, blocks = lattice(len(X), X.shape[1], rng)
        grid = [[X[np.ix_(g, b)] for b in blocks] for g in groups]
        y_grid = y[np.concatenate(groups)]
        for clusterer in ("kmeans", "spectral"):
            rows = results[clusterer]
            local = central(grid[0][0], k, clusterer, trial)
            rows.setdefault("Local (1,1)", []).append(scores(y[groups[0]], local))
            if clusterer == "kmeans" and trial < n_kumar_trials:
                # Baseline on the column-1 parties only, as in the paper.
                kumar = KumarFederatedKMeans(k, n_rounds=10, random_state=trial)
                labels = kumar.fit([X[np.ix_(g, blocks[0])] for g in groups]).labels_
                rows.setdefault("Kumar et al. (reconstruction)", []).append(scores(y_grid, labels))
            for config in CONFIGS:
                labels = dc_labels(grid, k, clusterer, config, trial)
                rows.setdefault(config, []).append(scores(y_grid, labels))
            rows.setdefault("Central", []).append(scores(y, central(X, k, clusterer, trial)))
    return {c: {m: np.array(v) for m, v in rows.items()} for c, rows in results.items()}


# --------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------- #
def fmt(values):
    return " | ".join(f"{m:.3f} ± {s:.3f}" for m, s in zip(values.mean(0), values.std(0)))


def table_two_md(results, n_seeds):
    lines = [
        f"## Table 2: synthetic data, 2 row groups × 2 feature blocks ({n_seeds} seeds)",
        "",
        "Paper: one run. Ours: mean ± std over seeds (data, split, anchors and k-means "
        "seeds redrawn). *Proposed* in the paper is compared with both configurations.",
        "",
    ]
    for (data, split), rows in results.items():
        algo = "k-means" if data == "Blobs" else "spectral clustering"
        lines += [
            f"### {data} ({algo}), {split}",
            "",
            "| Method | Paper ARI / NMI / ACC | Ours ARI | Ours NMI | Ours ACC |",
            "|---|---|---|---|---|",
        ]
        paper = PAPER_TABLE2[(data, split)]
        for method, values in rows.items():
            key = "Proposed" if method.startswith("DC") else method
            ref = " / ".join(f"{v:.3f}" for v in paper[key]) if key in paper else "-"
            lines.append(f"| {method} | {ref} | {fmt(values)} |")
        lines.append("")
    return lines


def paired_row(method, paper, values):
    """Paper and our value side by side for each metric."""
    ours = [f"{m:.3f} ± {s:.3f}" for m, s in zip(values.mean(0), values.std(0))]
    cells = [c for pair in zip(paper, ours) for c in pair]
    return f"| {method} | " + " | ".join(cells) + " |"


def table_dataset_md(name, results, n_trials, n_kumar):
    lines = []
    for clusterer, table in (("kmeans", "Table 4 (k-means)"), ("spectral", "Table 6 (SC)")):
        paper = PAPER_TABLES[(name, clusterer)]
        lines += [
            f"### {name}, {table}: 10 row groups × 2 feature blocks, {n_trials} trials",
            "",
            f"Paper: mean (SD) over 100 trials. Ours: mean ± std over {n_trials} trials "
            f"(the Kumar et al. reconstruction over the first {n_kumar} of them).",
            "",
            "| Method | ARI paper | ARI ours | NMI paper | NMI ours | ACC paper | ACC ours |",
            "|---|---|---|---|---|---|---|",
        ]
        for method, values in results[clusterer].items():
            key = "Proposed" if method.startswith("DC") else method.split(" (recon")[0]
            ref = paper[key].split(" | ") if key in paper else ["-"] * 3
            lines.append(paired_row(method, ref, values))
        if clusterer == "spectral":
            ref = paper["Hernández-Pereira et al."].split(" | ")
            lines.append(
                f"| Hernández-Pereira et al. | {ref[0]} | not reproduced | {ref[1]} | - | "
                f"{ref[2]} | - |"
            )
        lines.append("")
    return lines


DISCUSSION = """## Where we match, beat or miss the paper, and why

**The configuration the paper describes does not give the paper's numbers; a lossless
variant does.** With the setup in the paper's text (anchors uniform over each feature's own
range, `n_features - 1` PCA components per party; *DC (paper text)*), in the full run:

* on Iris, k-means happens to reach the paper's mean ARI (0.751 against 0.752) but varies
  from trial to trial about as much as the baselines (SD 0.11 against the paper's 0.015);
  spectral clustering is well below the paper (0.67 against 0.787, SD 0.14);
* the three rings of Table 2 are not recovered at all (ARI near 0 where the paper reports
  1.000), and blobs are slightly below 1;
* on Heart-statlog it is far *better* than central clustering (k-means ARI 0.29 against
  0.030), whereas the paper reports DC equal to central clustering to three decimals with
  SD 0.000.

The reason is the geometry of the collaborative representation. Each party drops a
different direction, so the row groups are aligned only approximately and the result
depends on which features share a party. And the collaborative space is the data whitened
by the anchors' covariance, so anchors drawn over each feature's own range make DC cluster
min-max scaled data, not the raw data central clustering sees. That helps on Heart-statlog,
whose raw features have very different scales, and ruins the rings, whose minor noise
features are stretched to the same range as the rings.

With all PCA components and one range for every feature (*DC (lossless)*:
`n_components_intermediate=None, anchor_range="global"`), the collaborative representation
is an affine image of the raw pooled data, whitened by a nearly isotropic anchor covariance,
so DC clustering equals central clustering up to anchor noise. That configuration
reproduces the qualitative features of the reported results: ARI 1.000 on blobs and rings
in both splits of Table 2; Iris spectral clustering at the central value with a small
spread; Heart-statlog equal to central clustering with a spread near zero (SD 0.005 to
0.008 rather than the paper's 0.000: with only 270 anchors their covariance is not exactly
isotropic). It does not reach the paper's Iris k-means mean (0.726 ± 0.014 against
0.752 ± 0.015), which lies above central clustering (0.730); none of our lossless runs
exceeds central there, so we read that gap as an undocumented detail of the authors' code
(available only on request) or trial noise, not as something the method can do.

The lossless variant is not a free fix: with all components kept, a party's map is
invertible and the second layer of the paper's privacy argument (dimensionality reduction)
disappears; see the User Guide. The package keeps the paper's text as the default and
offers the lossless setting explicitly.

**Baselines.** *Local (1,1)* clusters one party's raw block (15 samples for Iris, 27 for
Heart-statlog); it lands on the paper's means and spreads for both data sets. The local
values of Table 2 differ from the paper because the paper does not give its generator
parameters (centres, noise, seeds); ours use blob centres (0, 5), (4, 0), (8, 10) and rings
of radii 2, 4, 6, which makes our local blobs easier. *Kumar et al.* is our reconstruction
(`KumarFederatedKMeans`, 10 rounds on the column-1 parties, first 30 trials of a full run);
it lands within the paper's spread on Iris and Heart-statlog. The Hernández-Pereira et al.
federated spectral clustering baseline is described too briefly in the paper to rebuild and
the original was not available, so it is not reported rather than approximated.
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds and 20 trials")
    args = parser.parse_args()
    n_seeds, n_trials = (3, 20) if args.quick else (10, 100)
    # The reconstructed Kumar et al. baseline runs 110 k-means fits per trial, by far the
    # slowest method here: it gets the first 30 trials of a full run.
    n_kumar = min(n_trials, 30)
    warnings.filterwarnings("ignore", message="Graph is not fully connected")
    t0 = time.perf_counter()

    table2 = experiment_one(n_seeds)
    iris = experiment_two(*load_iris(return_X_y=True), n_trials, n_kumar)
    print("Iris done", flush=True)
    heart = experiment_two(*load_heart_statlog(return_X_y=True), n_trials, n_kumar)
    print("Heart-statlog done", flush=True)

    mode = "quick (--quick)" if args.quick else "full"
    lines = [
        "# DC-Clustering: reproduction of Kawamata et al. (Tables 2, 4 and 6)",
        "",
        f"Run: {mode}; {time.perf_counter() - t0:.0f} s; produced by "
        "`python benchmarks/reproduce_dc.py" + (" --quick" if args.quick else "") + "`.",
        "",
        "*DC (paper text)*: package defaults (per-feature uniform anchors, "
        "`n_features - 1` PCA components, affine alignment). *DC (lossless)*: "
        '`anchor_range="global", n_components_intermediate=None`. NMI uses the arithmetic '
        "normalisation, ACC the Hungarian matching. Both DC configurations are compared with "
        "the paper's *Proposed* row. Speed against central k-means: `dc_speed.md`.",
        "",
        *table_two_md(table2, n_seeds),
        "## Tables 4 and 6: open data sets",
        "",
        *table_dataset_md("Iris", iris, n_trials, n_kumar),
        *table_dataset_md("Heart-statlog", heart, n_trials, n_kumar),
        DISCUSSION,
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
