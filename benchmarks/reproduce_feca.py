"""Reproduce FeCA's S-set results (Xu et al., "Jigsaw Game: Federated Clustering", TMLR 2024).

Tables reproduced, side by side with the paper's numbers:

* Table 1: ℓ2 distance (÷1e4, Hungarian-matched) between the recovered and the
  ground-truth centers on S1–S4, IID / Dirichlet(0.3) / Dirichlet(0.1), 10 clients;
* Table 4: Purity and NMI of the nearest-center labels for the same runs;
* Tables 5 and 6 (S1): no one-fit-many removal, theoretical radius;
* Tables 8 and 9 (S1): varying number of clients.

Every run uses one seed (0..9) for the partition and every k-means, and every
method sees the same partitions. Writes ``benchmarks/results/feca.md``
(``feca_quick.md`` with ``--quick``: 3 seeds, fewer client counts).

    python benchmarks/reproduce_feca.py --quick
    python benchmarks/reproduce_feca.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import machine_line, markdown_table, write_result  # noqa: E402

from skfedclust import FeCA, FederatedFuzzyCMeans, KFed, MAvg  # noqa: E402
from skfedclust.datasets import load_s_sets  # noqa: E402
from skfedclust.metrics import centroid_distance, purity  # noqa: E402
from skfedclust.partition import DirichletPartition, IIDPartition  # noqa: E402

K = 15
M = 10
SCENARIOS = ["IID", "(0.3)", "(0.1)"]

# --------------------------------------------------------------------------- #
# The paper's numbers (spec feca.md §6.5); None where the source is unreadable.
# --------------------------------------------------------------------------- #
PAPER_L2 = {  # method -> set -> [IID, (0.3), (0.1)] as (mean, std)
    "M-Avg": {
        1: [(7.2, 4.3), (45.8, 5.0), (63.0, 2.8)],
        2: [(14.7, 7.1), (51.4, 8.9), (64.0, 11.1)],
        3: [(16.4, 6.8), (35.5, 5.7), (46.7, 5.3)],
        4: [(14.2, 3.7), (28.7, 3.3), (40.1, 6.4)],
    },
    "FFCMv1 (Rd=1)": {
        1: [(12.2, 15.8), (80.7, 13.3), (81.1, 15.7)],
        2: [(16.7, 20.4), (70.9, 13.3), (89.7, 16.0)],
        3: [(16.6, 15.2), (58.1, 11.9), (77.4, 8.9)],
        4: [(11.4, 9.5), (45.0, 8.9), (63.1, 10.8)],
    },
    "FFCMv1 (Rd=10)": {
        1: [(3.3, 1.4), (50.3, 8.8), (66.1, 12.4)],
        2: [(9.6, 19.1), (56.9, 12.3), (60.3, 18.2)],
        3: [(11.4, 15.5), (45.9, 8.8), (66.6, 12.9)],
        4: [(4.8, 1.3), (45.0, 12.3), (52.0, 11.9)],
    },
    "FFCMv2 (Rd=1)": {
        1: [(23.1, 19.4), (75.7, 16.8), (77.0, 14.4)],
        2: [(16.1, 16.9), (71.9, 13.5), (79.9, 12.6)],
        3: [(18.2, 12.6), (62.7, 12.6), (79.1, 10.2)],
        4: [None, (48.9, 9.7), (60.4, 9.6)],
    },
    "FFCMv2 (Rd=10)": {
        1: [(2.6, 0.4), (42.9, 14.8), (54.2, 14.6)],
        2: [(32.9, 0.5), (58.1, 13.5), (59.4, 25.8)],
        3: [(4.5, 0.7), (49.4, 19.3), (56.7, 16.7)],
        4: [None, (44.6, 9.1), (49.9, 7.3)],
    },
    "k-FED (k'=5)": {
        1: [(84.6, 15.8), (59.4, 12.3), (59.8, 16.9)],
        2: [(75.9, 17.7), (64.1, 13.1), (63.9, 11.6)],
        3: [(73.1, 14.3), (65.6, 15.2), (68.8, 12.8)],
        4: [None, (43.4, 6.3), (47.5, 8.6)],
    },
    "FeCA": {
        1: [(1.0, 0.1), (6.8, 3.7), (22.3, 15.6)],
        2: [(1.9, 0.1), (13.6, 16.1), (38.8, 3.4)],
        3: [(3.6, 0.7), (23.6, 8.8), (33.2, 6.7)],
        4: [None, (24.5, 7.2), (31.5, 5.8)],
    },
    "Centralized k-means": {
        1: [(14.3, 18.7), None, None],
        2: [(8.4, 14.7), None, None],
        3: [None, None, None],
        4: [None, None, None],
    },
}


def _cells(text):
    """'.99 .79 .69 | ...' -> {1: [0.99, 0.79, 0.69], ...}; '?' marks an unreadable cell."""
    sets = [block.split() for block in text.split("|")]
    return {i + 1: [None if v == "?" else float(v) for v in block] for i, block in enumerate(sets)}


PAPER_PURITY = {  # method -> set -> [IID, (0.3), (0.1)]
    "M-Avg": _cells(".99 .79 .69 | .93 .74 .68 | .80 .66 .61 | .75 .64 .57"),
    "FFCMv1 (Rd=1)": _cells(".97 .69 .66 | .95 .68 .58 | .83 .60 .54 | .79 .60 .53"),
    "FFCMv1 (Rd=10)": _cells(".98 .78 .68 | .96 .74 .71 | .85 .66 .57 | .80 .61 .55"),
    "FFCMv2 (Rd=1)": _cells(".95 .69 .66 | .95 .63 .61 | .83 .58 .52 | .78 .57 .54"),
    "FFCMv2 (Rd=10)": _cells(".99 .80 .76 | .97 .70 .72 | .86 .65 .61 | .80 .60 .59"),
    "k-FED (k'=5)": _cells(".62 .76 .75 | .60 .71 .71 | .55 .61 .60 | .55 .62 .58"),
    "FeCA": _cells(".99 .98 .96 | .97 .95 .90 | .86 .80 .78 | .80 .73 .65"),
    "Centralized k-means": _cells(".97 ? ? | .96 ? ? | .83 ? ? | .77 ? ?"),
}

PAPER_NMI = {  # "?" where the seed text is garbled (spec §6.5)
    "M-Avg": _cells(".98 .85 .79 | .92 .80 .78 | .77 .71 .69 | .70 .65 .62"),
    "FFCMv1 (Rd=1)": _cells(".98 .80 .78 | .93 .77 .71 | .78 .67 .64 | .72 .63 .60"),
    "FFCMv1 (Rd=10)": _cells(".98 .85 .80 | .94 .80 .78 | .79 .71 .66 | .72 .64 .61"),
    "FFCMv2 (Rd=1)": _cells(".97 .80 .78 | .93 .75 .72 | .78 .67 .63 | .71 .62 ?"),
    "FFCMv2 (Rd=10)": _cells(".99 .87 .85 | .95 .78 .79 | .79 .70 .68 | ? ? ?"),
    "k-FED (k'=5)": _cells(".80 .84 .83 | .75 .80 .80 | .66 .69 .68 | ? ? ?"),
    "FeCA": _cells(".99 ? ? | .95 .94 .90 | .80 .77 .75 | ? ? ?"),
    "Centralized k-means": _cells("? ? ? | ? ? ? | ? ? ? | ? ? ?"),
}

PAPER_TABLE8 = [10.7, 3.1, 2.6, 2.1, 2.0, 1.7, 1.8, 1.6, 1.4, 1.4,
                1.3, 1.4, 1.3, 1.4, 1.2, 1.2, 1.1, 1.1, 1.0, 1.0]  # fmt: skip
PAPER_TABLE8_STD = [14.3, 0.6, 0.4, 0.3, 0.3, 0.3, 0.2, 0.4, 0.2, 0.3,
                    0.2, 0.3, 0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1]  # fmt: skip
PAPER_TABLE9 = [14.3, 1.1, 1.2, 1.1, 1.1, 1.2, 1.1, 1.1, 1.0, 1.0]
PAPER_TABLE9_STD = [18.7, 0.3, 0.3, 0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1]
PAPER_TABLE6 = {"theoretical": [(1.1, 0.1), (31.8, 23.8), (58.9, 15.1)]}
PAPER_TABLE5_L2 = {"without removal": 44.1, "with removal": 1.0}  # from MSE 12977.2 and 6.7


# --------------------------------------------------------------------------- #
# Methods
# --------------------------------------------------------------------------- #
def methods():
    """Name -> factory(seed, partition) of every method of Table 1."""

    def ffcm(aggregation, rounds):
        return lambda s, p: FederatedFuzzyCMeans(
            K, aggregation=aggregation, n_rounds=rounds, partition=p, random_state=s
        )

    return {
        "M-Avg": lambda s, p: MAvg(K, partition=p, random_state=s),
        "FFCMv1 (Rd=1)": ffcm("v1", 1),
        "FFCMv1 (Rd=10)": ffcm("v1", 10),
        "FFCMv2 (Rd=1)": ffcm("v2", 1),
        "FFCMv2 (Rd=10)": ffcm("v2", 10),
        "k-FED (k'=5)": lambda s, p: KFed(K, n_local_clusters=5, partition=p, random_state=s),
        "FeCA": lambda s, p: FeCA(K, partition=p, random_state=s),
    }


def partition_for(scenario, seed):
    if scenario == "IID":
        return IIDPartition(M, random_state=seed)
    alpha = {"(0.3)": 0.3, "(0.1)": 0.1}[scenario]
    return DirichletPartition(M, alpha, min_size=10, random_state=seed)


def evaluate(centers, labels, data):
    return {
        "l2": centroid_distance(data.centers, centers) / 1e4,
        "k": len(centers),
        "purity": purity(data.target, labels),
        "nmi": normalized_mutual_info_score(data.target, labels),
    }


def run_table1(sets, seeds):
    """results[method][set][scenario] -> list of metric dicts."""
    results = {}
    for i in sets:
        data = load_s_sets(i)
        for scenario in SCENARIOS:
            for seed in seeds:
                part = partition_for(scenario, seed)
                for name, make in methods().items():
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est = make(seed, part).fit(data.data, data.target)
                    res = evaluate(est.cluster_centers_, est.labels_, data)
                    results.setdefault(name, {}).setdefault(i, {}).setdefault(scenario, [])
                    results[name][i][scenario].append(res)
            # Centralized k-means: one k-means++ start, as the paper's numbers suggest.
            if scenario == "IID":
                for seed in seeds:
                    km = KMeans(K, n_init=1, random_state=seed).fit(data.data)
                    res = evaluate(km.cluster_centers_, km.labels_, data)
                    cell = results.setdefault("Centralized k-means", {}).setdefault(i, {})
                    cell.setdefault(scenario, []).append(res)
            print(f"S{i} {scenario} done", flush=True)
    return results


def run_ablations(seeds):
    """Tables 5 and 6 on S1."""
    data = load_s_sets(1)
    out = {}
    variants = {
        "FeCA (empirical radius, Alg. 4)": dict(),
        "FeCA (theoretical radius, Alg. 3)": dict(radius="theoretical"),
        "FeCA, random init n_init=1": dict(init="random", n_init=1),
        "FeCA without removal, random init n_init=1": dict(
            init="random", n_init=1, eliminate=False
        ),
    }
    for name, params in variants.items():
        for scenario in SCENARIOS:
            for seed in seeds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = FeCA(K, partition=partition_for(scenario, seed), random_state=seed)
                    est.set_params(**params).fit(data.data, data.target)
                res = evaluate(est.cluster_centers_, est.labels_, data)
                out.setdefault(name, {}).setdefault(scenario, []).append(res)
    return out


def run_clients_study(client_counts, seeds, protocol):
    """Tables 8 (5% blocks) and 9 (1/M each) on S1, FeCA with one Lloyd step for labels."""
    data = load_s_sets(1)
    n = len(data.data)
    out = {}
    for m in client_counts:
        for seed in seeds:
            perm = np.random.RandomState(seed).permutation(n)
            if protocol == "5%":
                blocks = [perm[j * n // 20 : (j + 1) * n // 20] for j in range(m)]
            else:
                blocks = np.array_split(perm, m)
            clients = [data.data[b] for b in blocks]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = FeCA(K, random_state=seed).fit(clients)
                refined = FeCA(K, final_lloyd_step=True, random_state=seed).fit(clients)
            # Purity/NMI after one Lloyd step, on all of S1.
            labels = refined.predict(data.data)
            res = evaluate(raw.cluster_centers_, labels, data)
            out.setdefault(m, []).append(res)
    return out


# --------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------- #
def fmt_ms(values, digits=1):
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f}"


def paper_ms(cell):
    return "—" if cell is None else f"{cell[0]:.1f} ± {cell[1]:.1f}"


def verdict(ours, paper):
    """beat / match / miss against the paper's mean ± std (lower is better)."""
    if paper is None:
        return "n/a"
    mean, std = paper
    ours_mean = float(np.mean(ours))
    if ours_mean < mean - max(std, 0.1 * mean):
        return "beat"
    if ours_mean <= mean + max(2 * std, 0.1 * mean):
        return "match"
    return "miss"


def table1_markdown(results, sets):
    blocks, tally = [], {}
    for i in sets:
        header = (
            ["Method"]
            + [f"S{i} {s} ours" for s in SCENARIOS]
            + [f"S{i} {s} paper" for s in SCENARIOS]
        )
        rows = []
        for name in list(methods()) + ["Centralized k-means"]:
            cells = results.get(name, {}).get(i, {})
            ours = []
            for j, s in enumerate(SCENARIOS):
                if s not in cells:
                    ours.append("—")
                    continue
                l2 = [r["l2"] for r in cells[s]]
                ks = [r["k"] for r in cells[s]]
                v = verdict(l2, PAPER_L2[name][i][j])
                tally.setdefault(name, {}).setdefault(v, 0)
                tally[name][v] += 1
                note = f" (min k {min(ks)})" if min(ks) < K else ""
                ours.append(f"{fmt_ms(l2)}{note} [{v}]")
            paper = [paper_ms(PAPER_L2[name][i][j]) for j in range(3)]
            rows.append([name] + ours + paper)
        blocks.append(markdown_table(header, rows))
    return "\n\n".join(blocks), tally


def table4_markdown(results, sets, key, paper):
    header = ["Method"] + [f"S{i} ours / paper" for i in sets]
    rows = []
    for name in list(methods()) + ["Centralized k-means"]:
        row = [name]
        for i in sets:
            cells = results.get(name, {}).get(i, {})
            ours = [
                f"{np.mean([r[key] for r in cells[s]]):.2f}" if s in cells else "—"
                for s in SCENARIOS
            ]
            theirs = ["—" if v is None else f"{v:.2f}" for v in paper[name][i]]
            row.append(" ".join(ours) + " / " + " ".join(theirs))
        rows.append(row)
    return markdown_table(header, rows)


def clients_markdown(study, paper, paper_std):
    header = ["M", "ℓ2 ours", "ℓ2 paper", "Purity / NMI ours (1 Lloyd step)"]
    rows = []
    for m, res in study.items():
        p = f"{paper[m - 1]:.1f} ± {paper_std[m - 1]:.1f}" if m <= len(paper) else "—"
        pur = np.mean([r["purity"] for r in res])
        nmi = np.mean([r["nmi"] for r in res])
        rows.append([m, fmt_ms([r["l2"] for r in res]), p, f"{pur:.3f} / {nmi:.3f}"])
    return markdown_table(header, rows)


def ablation_markdown(ablations):
    header = ["variant (S1)"] + SCENARIOS + ["paper IID / (0.3) / (0.1)"]
    paper = {
        "FeCA (empirical radius, Alg. 4)": "1.0 / 6.8 / 22.3",
        "FeCA (theoretical radius, Alg. 3)": "1.1 / 31.8 / 58.9",
        "FeCA without removal, random init n_init=1": "≈ 44.1 (IID, from MSE 12977.2)",
        "FeCA, random init n_init=1": "—",
    }
    rows = []
    for name, cells in ablations.items():
        row = [name]
        for s in SCENARIOS:
            l2 = [r["l2"] for r in cells[s]]
            ks = [r["k"] for r in cells[s]]
            note = f" (min k {min(ks)})" if min(ks) < K else ""
            row.append(fmt_ms(l2) + note)
        rows.append(row + [paper[name]])
    return markdown_table(header, rows)


DISCUSSION = """
## Where we match, beat or miss the paper, and why

The discussion below was written from the full run (seeds 0–9) whose tables are above.

**FeCA, Table 1.** Our FeCA implements Algorithms 2, 4 and 5 with the spec's resolutions
(client k-means++ with 10 restarts, RMS spread, removal of the candidate only, points of
removed clusters discarded). Every readable FeCA cell is within the paper's mean + 2 std
(the spec's acceptance bound), and S2 IID beats the paper (1.5 vs 1.9). On IID data FeCA
reaches the global k-means optimum of S1, S2 and S3 (0.9–1.0, 1.5, 3.6). S4 IID has a
large spread (7.0 ± 6.7). Eight of the ten seeds give 3.7–5.2, near the optimum, but one
gives 26.9. In such runs a client's k-means stops at a local solution whose one-fit-many
centroid fails the `G_i ≥ G_j` test.
That centroid keeps a large radius, and at the server its ball swallows the centroids of
two true clusters. We traced one such run on S3: a server group of 18 centroids, with two
single-centroid groups filling the top 15. That is Algorithm 5 as specified, not a defect
of the implementation. Under Dirichlet(0.3) we match the paper (S1 7.1 vs 6.8, S2 13.9 vs
13.6, S3 21.3 vs 23.6, S4 20.2 vs 24.5). Under Dirichlet(0.1) our means on S1 (40.6) and S3
(42.1) are above the paper's (22.3, 33.2), though inside the bound. With k' = 15 on
clients that hold few clusters, each client splits its clusters into many-fit-one
centroids whose radii (half their mutual distance) cannot cover each other. So a cluster
held mostly by one client ends up in several small server groups that compete with real
clusters for the top 15.

**FeCA, Table 4.** Purity and NMI match the paper on IID (.99/.99, .97/.95, .85/.79,
.79/.72) and Dirichlet(0.3) data. They are lower under Dirichlet(0.1) (S1 .89 vs .96,
S3 .72 vs .78), consistent with the ℓ2 above.

**Orderings.** FeCA beats k-FED (k'=5) on IID data on every set, and its error grows
from IID to Dir(0.3) to Dir(0.1) on every set. FeCA is at or below M-Avg everywhere except
S4 IID, where the runs described above lift its mean (7.0) above M-Avg's (5.3).

**Where the paper's main claim does not reproduce.** The paper reports FeCA best in every
setting. Against our baselines this holds on IID data only. Under Dirichlet skew our k-FED
(k'=5) and FFCM-v2 (Rd=10) are better than FeCA on most cells, for example S1 (0.1): k-FED
12.5, FFCM-v2 19.2, FeCA 40.6, where the paper has 59.8, 54.2 and 22.3. The baselines are
reconstructions, because the paper names each in one sentence. We made reasonable,
stronger choices: clients run k-means++ with 10 restarts; k-FED seeds by farthest point
from a random client and runs one Lloyd step; FFCM is seeded by k-means++ on one client.
The spec's prototype saw the same with its k-FED. The paper's baseline numbers cannot
be recovered from its text, so we report ours as they are and mark them `[beat]` where
they are lower.

**Baselines on IID data.** Our M-Avg and FFCM (Rd=10) reach the optimum on IID data
(S1 0.9), far below the paper's 7.2 and 3.3. Those values, and the paper's centralized S1
14.3, only fit clients and centralized runs that often stop at local solutions, i.e. a
weaker initialization than ours. Our centralized k-means is one k-means++ start: S1
1.0 ± 0.0 (paper 14.3 ± 18.7) and S2 18.0 ± 16.6 (paper 8.4 ± 14.7), both inside the
paper's wide spread. FFCM with Rd=1 depends entirely on its seeding, which the paper
does not give.

**Ablations (Tables 5, 6).**
- Removal matters when clients reach local solutions. With one random start per client,
  FeCA gets 7.4 ± 12.0 on S1 IID with removal and 31.8 ± 10.0 without, 4.3× worse. The
  paper has 1.0 and ≈ 44.1. The spec's check asks ≥ 5×; we narrowly miss it on the mean
  because one seed gives 43.2 with removal. The median with removal is 3.0, over 10× below.
- The theoretical radius (Algorithm 3) outputs fewer than 15 centers under skew (min 10
  and 6), as the paper's Table 6 direction implies. Its lower ℓ2 there comes from summing
  fewer matched pairs.

**Number of clients (Tables 8, 9).**
- Table 8 (5% blocks): we match the paper within 0.3 for every M from 2 to 20, and the
  error falls steadily with M.
- Our M=1 is FeCA on one client; the paper's M=1 is centralized k-means on the same
  sample.
- Purity/NMI after one Lloyd step are ≥ .997/.993 (paper .99/.99).
- Table 9 (1/M each): ≤ 1.0 for every M (paper 1.0–1.2).

**Communication.** FeCA, M-Avg and k-FED use one round. FFCM uses `n_rounds` rounds plus
one set-up exchange, in which the seed client uploads its k-means++ centers.
"""


def _mean_l2(results, name, i, scenario):
    cells = results.get(name, {}).get(i, {}).get(scenario)
    return None if not cells else float(np.mean([r["l2"] for r in cells]))


def orderings_markdown(results, sets):
    """The spec's robust orderings (§8 check 5), each marked holds / fails."""
    rows = []
    for i in sets:
        feca = {s: _mean_l2(results, "FeCA", i, s) for s in SCENARIOS}
        mavg = {s: _mean_l2(results, "M-Avg", i, s) for s in SCENARIOS}
        kfed = _mean_l2(results, "k-FED (k'=5)", i, "IID")
        if kfed is None or None in feca.values() or None in mavg.values():
            continue
        ok_mavg = all(feca[s] <= mavg[s] + 0.5 for s in SCENARIOS)
        ok_mavg_strict = all(feca[s] < mavg[s] for s in SCENARIOS[1:])
        ok_kfed = feca["IID"] < kfed
        ok_mono = feca["IID"] < feca["(0.3)"] < feca["(0.1)"]
        rows.append(
            [
                f"S{i}",
                ("holds" if ok_mavg and ok_mavg_strict else "fails"),
                ("holds" if ok_kfed else "fails"),
                ("holds" if ok_mono else "fails")
                + f" ({feca['IID']:.1f} / {feca['(0.3)']:.1f} / {feca['(0.1)']:.1f})",
            ]
        )
    header = [
        "set",
        "FeCA ≤ M-Avg + 0.5 everywhere, < on non-IID",
        "FeCA < k-FED (IID)",
        "FeCA IID < (0.3) < (0.1)",
    ]
    return markdown_table(header, rows)


def speed_section():
    """The FeCA rows of the last speed run (``benchmarks/bench_speed.py --only feca``)."""
    path = HERE / "results" / "speed_feca.md"
    if not path.exists():
        return "Run `python benchmarks/bench_speed.py --only feca` to measure the fit time."
    lines = path.read_text().splitlines()
    table = [line for line in lines if line.startswith("|")]
    command = next((line for line in lines if line.startswith("Command")), "")
    return "\n\n".join(
        [
            "FeCA fit time as a ratio to centralized `KMeans` timed in the same run "
            "(from `benchmarks/results/speed_feca.md`; goal ≤ 1.5×). " + command,
            "\n".join(table),
        ]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, fewer client counts")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite the Markdown from the saved raw results without rerunning",
    )
    args = parser.parse_args(argv)
    seeds = range(3) if args.quick else range(10)
    sets = [1, 2, 3, 4]
    counts = [1, 2, 5, 10, 20] if args.quick else list(range(1, 21))
    counts9 = [1, 2, 5, 10] if args.quick else list(range(1, 11))
    name = "feca_quick" if args.quick else "feca"
    raw_path = HERE / "results" / f"{name}_raw.json"
    if args.render_only:
        raw = json.loads(raw_path.read_text())
    else:
        t0 = time.perf_counter()
        raw = {
            "table1": run_table1(sets, seeds),
            "ablations": run_ablations(seeds),
            "table8": run_clients_study(counts, seeds, "5%"),
            "table9": run_clients_study(counts9, seeds, "1/M"),
        }
        raw["elapsed"] = time.perf_counter() - t0
        raw_path.write_text(json.dumps(raw, default=float))
        raw = json.loads(raw_path.read_text())
    # JSON turns integer keys into strings; turn them back.
    results = {
        m: {int(i): cells for i, cells in by_set.items()} for m, by_set in raw["table1"].items()
    }
    ablations = raw["ablations"]
    table8 = {int(m): v for m, v in raw["table8"].items()}
    table9 = {int(m): v for m, v in raw["table9"].items()}
    elapsed = raw["elapsed"]

    t1, tally = table1_markdown(results, sets)
    tally_rows = [
        [name] + [str(c.get(v, 0)) for v in ("beat", "match", "miss", "n/a")]
        for name, c in tally.items()
    ]
    cmd = "python benchmarks/reproduce_feca.py" + (" --quick" if args.quick else "")
    body = "\n\n".join(
        [
            (
                f"**{'Quick' if args.quick else 'Full'} run**: seeds 0–{len(seeds) - 1}, "
                f"M = {M} clients, k = k' = {K}, raw S-set coordinates. "
                f"Command: `{cmd}` ({elapsed / 60:.1f} min). {machine_line()}"
            ),
            "Each cell of ours is mean ± std (population) over the seeds; `[beat]` = below "
            "the paper's mean by more than its std, `[match]` = within two paper stds "
            "above it (or 10%), `[miss]` otherwise. `min k` flags runs that output fewer "
            "than 15 centers (ℓ2 then sums fewer pairs).",
            "## Table 1: ℓ2 distance ×1e4 to the ground-truth centers (lower is better)",
            t1,
            "Verdicts per method (cells):",
            markdown_table(["method", "beat", "match", "miss", "n/a"], tally_rows),
            "Orderings the paper's claims imply (means over the seeds, same partitions for "
            "every method):",
            orderings_markdown(results, sets),
            "## Table 4: Purity (IID (0.3) (0.1), ours / paper)",
            table4_markdown(results, sets, "purity", PAPER_PURITY),
            "## Table 4: NMI (IID (0.3) (0.1), ours / paper; — = unreadable in the source)",
            table4_markdown(results, sets, "nmi", PAPER_NMI),
            "## Tables 5 and 6: ablations on S1 (ℓ2 ×1e4)",
            ablation_markdown(ablations),
            "## Table 8: S1, each client holds a disjoint 5% block",
            clients_markdown(table8, PAPER_TABLE8, PAPER_TABLE8_STD),
            "## Table 9: S1, IID, each client holds 1/M of the data",
            clients_markdown(table9, PAPER_TABLE9, PAPER_TABLE9_STD),
            "## Speed",
            speed_section(),
            DISCUSSION,
        ]
    )
    write_result(name, "FeCA on the S-sets: reproduction of Xu et al. (TMLR 2024)", body)


if __name__ == "__main__":
    main()
