"""Demo: cluster a built-in data set with every estimator and print a comparison.

Run ``python -m skfedclust --help`` (or ``skfedclust-demo --help``).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
import time
import warnings

import numpy as np
from sklearn import datasets as sk_datasets
from sklearn.base import clone
from sklearn.cluster import KMeans, kmeans_plusplus
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
    # Unweighted server re-clustering collapses on high-dimensional data (see the
    # estimator's Notes); the weighted variant is what its docs recommend there.
    "KumarFederatedKMeans": lambda args: {"weighted": True},
}


#: The start of every method, as the demo runs it: where its centers (or its
#: clustering) begin. One line each, under the table; a callable reads the
#: estimator's parameters.
STARTS = {
    "DCClustering": "k-means++ (10 restarts) on the analyst's collaborative representation",
    "FeCA": "k-means++ on every client's rows; the server groups the clients' centroids",
    "FedSpectralClustering": (
        "a random dictionary around the clients' mean; k-means on the spectral embedding"
    ),
    "FederatedFuzzyCMeans": lambda est: _ffcm_start(**est.get_params()),
    "FederatedKMeans": (
        "init='auto': local k-means on every client, weighted k-means++ (10 restarts) "
        "on the local centers, run by the nodes (coordinator blind: the start stays on them)"
    ),
    "GOLDClustering": "competitive penalized learning from many seeds on every client",
    "KFed": "local k-means; seeds: one client's centers, then the farthest local centers",
    "KumarFederatedKMeans": "local k-means++ (10 restarts); the server re-clusters the centroids",
    "MAvg": "k-means++ (10 restarts) on every client; centroids matched and averaged",
    "OmniFCClustering": "spectral clustering of the exact distances (k-means on the embedding)",
    "KMeans (centralized)": "k-means++ on the pooled rows, best of 10 restarts",
    "FederatedKMeans (same start)": (
        "k-means++ on the pooled rows (drawn for this comparison), given as an array init"
    ),
    "KMeans (same start)": (
        "that same array, one run on the pooled rows: FederatedKMeans runs the same "
        "Lloyd iterations, so the two rows agree"
    ),
}


def _ffcm_start(init, coordinator="auto", **_):
    if isinstance(init, str) and init.startswith("k-means++"):
        return "k-means++ seeding by one randomly chosen client on its rows"
    if isinstance(init, str) and coordinator == "sees-totals":
        return (
            "local k-means on every client (means, no row), weighted k-means on them by the server"
        )
    if isinstance(init, str):
        return (
            "local k-means on every client (means, no row), weighted k-means on them, run by "
            "the nodes (coordinator blind: the start stays on them)"
        )
    return "the given centers"


def describe_start(name, estimator):
    """The line of :data:`STARTS` for one method, or None; some depend on the parameters."""
    start = STARTS.get(name)
    return start(estimator) if callable(start) else start


#: What the columns say, printed under the table.
LEGEND = [
    ("NMI", "normalized mutual information with the true classes (0 to 1, 1 = the classes)"),
    ("ARI", "adjusted Rand index (0 = chance agreement, 1 = the classes)"),
    ("ACC", "accuracy under the best one-to-one matching of clusters to classes"),
    ("fit s", "wall-clock seconds of fit: the whole simulated protocol, on this machine"),
    ("up", "bytes all clients sent to the server over the fit (not the bytes between clients)"),
    ("down", "bytes the server sent to the clients, summed over the fit"),
    ("KB", "1024 bytes (B: bytes; MB: 1024 KB)"),
    ("rounds", "exchanges in which clients sent, set-up exchanges not counted"),
    ("-", "not federated: nothing is sent"),
]


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


def _short_warning(w):
    """``(category, first line)`` of a recorded warning."""
    lines = str(w.message).strip().splitlines() or [""]
    return w.category.__name__, lines[0]


def run_one(name, estimator, X, y):
    """Fit one estimator; return a table row (or a row that says why it could not run).

    Warnings are recorded, not shown: the caller prints each distinct one once
    under the table, so that a warning repeated by every client does not bury it.
    Warnings raised in worker processes (``--n-jobs`` with a process backend)
    stay in those processes.
    """
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        # "always" so that repeats are counted instead of deduplicated per code line.
        warnings.simplefilter("always")
        try:
            estimator.fit(X, y)
        except (ValueError, TypeError) as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            row = {"method": name, "error": textwrap.shorten(first_line, 52, placeholder="...")}
        else:
            row = None
    found = [_short_warning(w) for w in caught]
    if row is not None:
        row["warnings"] = found
        return row
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
        "warnings": found,
    }


def _bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def collect_notes(rows):
    """Distinct warnings of all rows, each once, in order of first appearance.

    Warnings whose texts differ only in numbers (the same warning raised by each
    client or party) count as one; the first text is kept.

    Returns
    -------
    notes : list of (note_number, text)
    marks : dict
        Method name to the note numbers of its warnings.
    """
    order, found = [], {}
    marks = {}
    for r in rows:
        for category, text in r.get("warnings", ()):
            key = (category, re.sub(r"\d+(\.\d+)?", "#", text))
            if key not in found:
                found[key] = {"text": f"{category}: {text}", "count": 0}
                order.append(key)
            found[key]["count"] += 1
            number = order.index(key) + 1
            marks.setdefault(r["method"], [])
            if number not in marks[r["method"]]:
                marks[r["method"]].append(number)
    notes = []
    for number, key in enumerate(order, start=1):
        text, count = found[key]["text"], found[key]["count"]
        if count > 1:
            text += f" ({count} times)"
        notes.append((number, text))
    return notes, marks


def format_table(rows):
    """Render rows as a fixed-width text table, with a legend and the distinct warnings under it.

    A method that warned carries the numbers of its notes, e.g. ``KFed [1]``.
    The legend says what each column measures, then the start of every method
    in the table (its ``"start"``, from :data:`STARTS`).
    """
    notes, marks = collect_notes(rows)
    header = f"{'method':<30}{'NMI':>7}{'ARI':>7}{'ACC':>7}{'fit s':>8}{'up':>11}{'down':>11}"
    width = len(header) + 8
    lines = [header + f"{'rounds':>8}", "-" * width]
    for r in rows:
        method = r["method"]
        if method in marks:
            method += " [" + ",".join(map(str, marks[method])) + "]"
        if "error" in r:
            lines.append(f"{method:<30}  n/a: {r['error']}")
            continue
        rounds = "-" if r["rounds"] is None else str(r["rounds"])
        lines.append(
            f"{method:<30}{r['NMI']:>7.3f}{r['ARI']:>7.3f}{r['ACC']:>7.3f}"
            f"{r['time']:>8.2f}{_bytes(r['up']):>11}{_bytes(r['down']):>11}{rounds:>8}"
        )
    lines += ["", "columns:"]
    for name, text in LEGEND:
        lines += textwrap.wrap(
            text, width, initial_indent=f"  {name:<10}", subsequent_indent=" " * 12
        )
    starts = [(r["method"], r["start"]) for r in rows if r.get("start")]
    if starts:
        lines += ["", "starts:"]
        for name, text in starts:
            lines += textwrap.wrap(
                text, width, initial_indent=f"  {name:<29} ", subsequent_indent=" " * 32
            )
    if notes:
        lines += ["", "notes (warnings, each shown once):"]
        for number, text in notes:
            prefix = f"  [{number}] "
            lines += textwrap.wrap(
                text,
                width,
                initial_indent=prefix,
                subsequent_indent=" " * len(prefix),
                break_on_hyphens=False,
            )
    return "\n".join(lines)


# ---------------------------------------------------------------- argument types
# Each raises ArgumentTypeError, which argparse reports as "argument --flag: ..."
# and turns into exit status 2, so a bad value never reaches an estimator.


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seed(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    # The range numpy accepts for an integer seed.
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32 - 1], got {value}")
    return value


def _float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
    return value


def _positive_float(text):
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value


def _fraction(text):
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value:g}")
    return value


def _n_jobs(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError("must not be 0 (-1 uses all CPUs)")
    return value


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show every default, and keep the description's line breaks."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line instead of the usage block: the message already names the flag.
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser():
    """The demo's argument parser."""
    parser = _Parser(
        prog="python -m skfedclust",
        description=(
            "Cluster a data set with every federated estimator and compare them with\n"
            "centralized k-means: NMI, ARI, accuracy, fit time, bytes up and down, rounds.\n"
            "A KMeans row from FederatedKMeans' own start shows the two agree. Under the\n"
            "table: what each column means, where each method starts, and the methods'\n"
            "warnings, each listed once."
        ),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default="iris",
        help="data set; s1-s4 and heart are read from $SKFEDCLUST_DATA or downloaded",
    )
    parser.add_argument(
        "--partition",
        choices=PARTITIONS,
        default="iid",
        help="how rows (vertical: features; hybrid: both) are split between clients",
    )
    parser.add_argument(
        "--clients",
        type=_positive_int,
        default=3,
        metavar="M",
        help="number of clients (hybrid: clients // 2 row groups x 2 feature blocks)",
    )
    parser.add_argument("--seed", type=_seed, default=0, help="seed of the split and the methods")
    parser.add_argument(
        "--alpha", type=_positive_float, default=0.3, help="Dirichlet concentration of 'dirichlet'"
    )
    parser.add_argument(
        "--p", type=_fraction, default=0.5, help="Non-IID level of 'noniid', in [0, 1]"
    )
    parser.add_argument(
        "--n-jobs",
        type=_n_jobs,
        default=None,
        dest="n_jobs",
        metavar="N",
        help="client steps run in parallel by joblib (None: one at a time; -1: all CPUs)",
    )
    parser.add_argument(
        "--no-scale",
        action="store_true",
        help="skip standardisation (which is fitted centrally on the pooled data)",
    )
    return parser


def parse_args(argv=None):
    """Parse and validate the command line; bad values exit with status 2."""
    return build_parser().parse_args(argv)


def _check_against_data(parser, args, X):
    """Reject client counts the data set cannot be split into, with the flag's name."""
    n_samples, n_features = X.shape
    if args.partition == "vertical" and args.clients > n_features:
        parser.error(
            f"argument --clients: {args.clients} feature blocks for a vertical partition, "
            f"but {args.dataset} has {n_features} features"
        )
    if args.partition == "hybrid" and n_features < 2:
        parser.error(f"argument --partition: hybrid needs 2 features, {args.dataset} has 1")
    if args.clients > n_samples:
        parser.error(
            f"argument --clients: {args.clients} clients, but {args.dataset} has "
            f"{n_samples} samples"
        )


def main(argv=None):
    """Entry point of the demo."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        X, y = load(args.dataset, args.seed)
    except OSError as exc:
        print(f"cannot load {args.dataset}: {exc}", file=sys.stderr)
        return 2
    _check_against_data(parser, args, X)
    if not args.no_scale:
        X = StandardScaler().fit_transform(X)
    k = len(np.unique(y))
    spec = make_partition(args)
    print(
        f"{args.dataset}: {X.shape[0]} samples, {X.shape[1]} features, {k} clusters; "
        f"partition {spec!r}\n"
    )
    rows, fitted = [], {}
    for name, cls in all_estimators():
        params = {"n_clusters": k, "partition": spec, "random_state": args.seed}
        params.update(DEMO_PARAMS.get(name, lambda a: {})(args))
        if "n_jobs" in cls().get_params():
            params["n_jobs"] = args.n_jobs
        estimator = cls(**params)
        rows.append({**run_one(name, estimator, X, y), "start": describe_start(name, estimator)})
        fitted[name] = estimator
    reference = KMeans(n_clusters=k, n_init=10, random_state=args.seed)
    central = run_one("KMeans (centralized)", reference, X, y)
    rows.append({**central, "start": STARTS["KMeans (centralized)"]})
    if "FederatedKMeans" in fitted and fitted["FederatedKMeans"] is not None:
        for name, row in same_start_rows(fitted["FederatedKMeans"], X, y, args.seed):
            rows.append({**row, "start": STARTS[name]})
    print(format_table(rows))
    return 0


def same_start_rows(federated, X, y, seed):
    """FederatedKMeans and scikit-learn's KMeans from one array start, on the pooled rows.

    FederatedKMeans runs Lloyd's iterations of KMeans on exact sums, with the
    same stopping rule: from the same initial centers the two give the same
    labels. The table's other rows start elsewhere (the federated default
    start stays on the nodes; KMeans (centralized) draws k-means++ on the
    pooled rows), so they can differ; these two rows show the agreement
    itself. Nothing when FederatedKMeans could not run (a vertical split).
    """
    if not hasattr(federated, "cluster_centers_"):
        return []
    start, _ = kmeans_plusplus(X, federated.n_clusters, random_state=seed)
    twin = clone(federated).set_params(init=start, n_init=1)
    rows = [("FederatedKMeans (same start)", run_one("FederatedKMeans (same start)", twin, X, y))]
    km = KMeans(n_clusters=len(start), init=start, n_init=1, random_state=seed)
    rows.append(("KMeans (same start)", run_one("KMeans (same start)", km, X, y)))
    return rows
