"""OmniFC at the scale of the paper's MNIST run: 70,000 rows of 784 features, seven parties.

MNIST itself cannot be read offline (the packages on the index that provide it,
e.g. ``mnist``, ``mnists`` or ``python-mnist``, download the files at first
use), so the rows are a stand-in of the same shape: scikit-learn's 8 x 8
digits, upsampled to 24 x 24 in a 28 x 28 canvas, each row rotated, scaled and shifted
at random, with Gaussian noise, clipped at 0 and L2-normalised (the paper's preprocessing;
unit-norm rows give the precision of its Table 7). Labels are the digits.

Four modes, each meant to run as its own process under ``/usr/bin/time -v``
(peak resident memory) and in alternation (paired runs on a shared machine):

* ``secure``: ``OmniFCClustering(10)`` with the default spectral clusterer on
  seven IID clients, which streams the decoded distances into the
  10-nearest-neighbour graph; prints time, NMI against the digits and writes
  the labels and the affinity the server built;
* ``reference``: centralized spectral clustering on the same graph, built in
  the clear from the quantized rows (``rint(2**q x)``, exact integer
  distances) block by block; checks that the secure affinity equals it entry
  for entry and gives the NMI between the two labelings;
* ``euclid``: a blockwise ``euclidean_distances(squared=True)`` pass over the
  same rows (blocks of 1024 rows against all rows), the time to compare with;
* ``floor``: the seven parties' exact float64 products alone (the default
  prime's two-limb operands), on the protocol's tiles of the upper block
  triangle and its block threads: the arithmetic floor of a faithful
  simulation, measured;
* ``solvers``: spectral clustering of the graph ``reference`` saved, once per
  eigensolver (``--solvers``), with the time of each and the NMI of each
  labeling against the first solver's.

Both spectral steps use the eigensolver the estimator chooses by default
(:func:`skfedclust.clusterers.choose_eigen_solver`), so ``secure`` and
``reference`` embed the same graph with the same solver.

    python benchmarks/omnifc_mnist_scale.py --mode secure --n 70000
    python benchmarks/omnifc_mnist_scale.py --mode secure --n 20000 --by-class
    python benchmarks/omnifc_mnist_scale.py --mode reference --n 70000
    python benchmarks/omnifc_mnist_scale.py --mode euclid --n 70000
    python benchmarks/omnifc_mnist_scale.py --mode floor --n 70000
    python benchmarks/omnifc_mnist_scale.py --mode solvers --n 20000 --solvers arpack,lobpcg,amg
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy import ndimage
from sklearn.cluster import SpectralClustering
from sklearn.datasets import load_digits
from sklearn.metrics import euclidean_distances, normalized_mutual_info_score

from skfedclust.clusterers import choose_eigen_solver

OUT = Path(os.environ.get("OMNIFC_SCALE_DIR", "/tmp/omnifc_scale"))
N_CLIENTS = 7
BLOCK = 1024


def mnist_standin(n, seed=0):
    """``n`` rows of 28 x 28 digit images (upsampled digits, moved, noisy), L2-normalised.

    Every row is one of the 1,797 digits under its own random rotation (up to 15 degrees),
    scale (0.9 to 1.1) and sub-pixel shift (up to 2 pixels), with linear interpolation:
    with a few whole-pixel shifts only, 70,000 rows repeat each image and shift about four
    times, and the 10-nearest-neighbour graph fell apart into 86 groups of near-copies.
    """
    digits = load_digits()
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(digits.target), size=n)
    canvas = np.zeros((len(digits.target), 28, 28))
    canvas[:, 2:26, 2:26] = np.kron(digits.images, np.ones((3, 3)))  # 24 x 24, centred
    angle = rng.uniform(-np.pi / 12, np.pi / 12, size=n)
    scale = rng.uniform(0.9, 1.1, size=n)
    shift = rng.uniform(-2.0, 2.0, size=(n, 2))
    centre = np.array([13.5, 13.5])
    X = np.empty((n, 28, 28))
    for i in range(n):
        cos, sin = np.cos(angle[i]) / scale[i], np.sin(angle[i]) / scale[i]
        M = np.array([[cos, -sin], [sin, cos]])
        offset = centre - M @ (centre + shift[i])
        ndimage.affine_transform(canvas[pick[i]], M, offset=offset, order=1, output=X[i])
    X = X.reshape(n, 784) + rng.normal(0.0, 1.0, size=(n, 784))
    np.clip(X, 0.0, None, out=X)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, digits.target[pick]


def _peak_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_secure(X, y, n, suffix=""):
    from skfedclust import OmniFCClustering

    passes, stages = [], {}
    start = time.perf_counter()

    class Count(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if "second pass" in message:
                passes.append(message)
            if "on the decoded distances" in message:
                # the protocol is done: the clusterer starts
                stages["protocol_seconds"] = time.perf_counter() - start

    logging.getLogger("skfedclust").addHandler(Count())
    logging.getLogger("skfedclust").setLevel(logging.INFO)
    clients = np.array_split(X, N_CLIENTS)
    start = time.perf_counter()
    est = OmniFCClustering(10, random_state=0, verbose=1).fit(clients)
    seconds = time.perf_counter() - start
    A = est.clusterer_.affinity_matrix_
    stages["eigen_solver"] = est.clusterer_.eigen_solver
    sp.save_npz(OUT / f"secure_affinity_{n}{suffix}.npz", sp.csr_matrix(A))
    np.save(OUT / f"secure_labels_{n}{suffix}.npy", est.labels_)
    return {
        "seconds": seconds,
        "precision": est.precision_,
        "nmi_digits": normalized_mutual_info_score(y, est.labels_),
        "passes": 1 + len(passes),
        "bytes_total": est.communication_["bytes_total"],
        "has_D": hasattr(est, "dissimilarity_matrix_"),
        **stages,
    }


def run_reference(X, y, n, q):
    """Spectral clustering on the 10-NN graph built in the clear from the quantized rows."""
    from skfedclust.methods._omnifc_cluster import knn_affinity, nearest_columns
    from skfedclust.secure._lcc_sinks import _StreamingMedian

    start = time.perf_counter()
    Xi = np.rint(np.ldexp(X, q))  # exact integers, |x| <= 2**q
    norms = np.einsum("ij,ij->i", Xi, Xi)
    median = _StreamingMedian((2**30 - 36) // 2)
    nearest, dists = [], []
    for a in range(0, n, BLOCK):
        b = min(a + BLOCK, n)
        # exact: every product and partial sum is an integer below 2**53
        D = norms[a:b, None] + norms[None, :] - 2.0 * (Xi[a:b] @ Xi.T)
        upper = D[np.arange(b - a)[:, None] < (np.arange(n)[None, :] - a)]
        median.add(upper[upper > 0].astype(np.int64))
        D[np.arange(b - a), np.arange(a, b)] = np.inf
        idx = nearest_columns(D, 10)
        nearest.append(idx)
        dists.append(np.take_along_axis(D, idx, axis=1))
    if not median.settle(4.0**-q):
        raise RuntimeError("reference median needs a second pass; not implemented here")
    gamma = 1.0 / median.result
    A = knn_affinity(np.vstack(nearest), np.vstack(dists) * 4.0**-q, gamma)
    build = time.perf_counter() - start
    out = {"graph_seconds": build}
    secure = OUT / f"secure_affinity_{n}.npz"
    if secure.exists():
        S = sp.load_npz(secure).tocsr()
        S.sort_indices()
        R = sp.csr_matrix(A)
        R.sort_indices()
        out["affinity_equal"] = bool(
            np.array_equal(S.indptr, R.indptr)
            and np.array_equal(S.indices, R.indices)
            and np.array_equal(S.data, R.data)
        )
    # written before the (long) spectral step, in case it does not finish
    (OUT / f"reference_graph_{n}.json").write_text(json.dumps(out))
    sp.save_npz(OUT / f"reference_affinity_{n}.npz", sp.csr_matrix(A))
    out["eigen_solver"] = choose_eigen_solver(None, A)
    spectral = time.perf_counter()
    labels = (
        SpectralClustering(
            10, affinity="precomputed", eigen_solver=out["eigen_solver"], random_state=0
        )
        .fit(A)
        .labels_
    )
    out["spectral_seconds"] = time.perf_counter() - spectral
    out["seconds"] = time.perf_counter() - start
    out["nmi_digits"] = normalized_mutual_info_score(y, labels)
    if secure.exists():
        secure_labels = np.load(OUT / f"secure_labels_{n}.npy")
        out["nmi_secure_vs_central"] = normalized_mutual_info_score(secure_labels, labels)
    return out


def run_solvers(y, n, solvers):
    """Spectral clustering of the saved reference graph with each eigensolver."""
    A = sp.load_npz(OUT / f"reference_affinity_{n}.npz").tocsr()
    # 32-bit indices, as the estimator hands them (ARPACK refuses 64-bit ones)
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    out, first = {}, None
    for solver in solvers:
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            labels = (
                SpectralClustering(10, affinity="precomputed", eigen_solver=solver, random_state=0)
                .fit(A)
                .labels_
            )
        first = labels if first is None else first
        out[solver] = {
            "seconds": time.perf_counter() - start,
            "nmi_vs_first": normalized_mutual_info_score(first, labels),
            "nmi_digits": normalized_mutual_info_score(y, labels),
            "warnings": sorted({str(w.message).splitlines()[0] for w in caught}),
        }
        print(solver, json.dumps(out[solver]), flush=True)
    return out


def run_floor(X):
    """The arithmetic floor: the seven parties' exact products alone, tile by tile.

    Every party of the secure fit computes, for every tile of the upper block
    triangle, one float64 product of its operands (the plan of
    ``ModularProduct`` for the default prime: width ``2 d / l + 2``, two
    limbs), on the protocol's blocks and block threads (one BLAS thread
    each). Nothing else: no field arithmetic, messages, decoding or graph.
    The operands are random residues of the real shapes, one pair for every
    party (the products' speed does not depend on the values).
    """
    from skfedclust.secure._field import DEFAULT_PRIME, ModularProduct
    from skfedclust.secure._lcc import BLOCK_SIZE
    from skfedclust.secure._lcc_blocks import _run_blocks

    n, d = X.shape
    width = -(-d // 2)  # d / l with l = 2 segments
    plan = ModularProduct.plan(DEFAULT_PRIME, width)
    rng = np.random.default_rng(0)
    z = rng.integers(0, DEFAULT_PRIME, size=(n, width)).astype(np.uint32)
    norms = rng.normal(size=n)
    left = plan.left_operand_from_residues(z, factor=-2, extra=[norms, 1.0])
    right = plan.right_operand_from_residues(z, extra=[1.0, norms])
    tiles = [
        (a, min(a + BLOCK_SIZE, n), b, min(b + BLOCK_SIZE, n))
        for a in range(0, n, BLOCK_SIZE)
        for b in range(a, n, BLOCK_SIZE)
    ]
    scratch = {}

    def task(tile):
        out = scratch.setdefault(threading.get_ident(), np.empty((BLOCK_SIZE, BLOCK_SIZE)))
        a0, a1, b0, b1 = tile
        for _ in range(N_CLIENTS):
            for lhs, rhs in zip(left, right):
                np.matmul(lhs[a0:a1], rhs[b0:b1].T, out=out[: a1 - a0, : b1 - b0])

    start = time.perf_counter()
    _run_blocks(task, [(t,) for t in tiles], None)
    seconds = time.perf_counter() - start
    flops = sum(2 * (a1 - a0) * (b1 - b0) * left[0].shape[1] for a0, a1, b0, b1 in tiles)
    return {
        "seconds": seconds,
        "tiles": len(tiles),
        "operand_width": int(left[0].shape[1]),
        "tflop": N_CLIENTS * flops / 1e12,
    }


def run_euclid(X):
    start = time.perf_counter()
    for a in range(0, len(X), BLOCK):
        euclidean_distances(X[a : a + BLOCK], X, squared=True)
    return {"seconds": time.perf_counter() - start}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=70_000)
    parser.add_argument(
        "--mode", choices=["secure", "reference", "euclid", "solvers", "floor"], required=True
    )
    parser.add_argument("--solvers", default="arpack,lobpcg,amg", help="solvers mode")
    parser.add_argument("--q", type=int, default=None, help="precision (reference mode)")
    parser.add_argument(
        "--by-class",
        action="store_true",
        help="rows sorted by digit before the split into clients (Non-IID clients)",
    )
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    X, y = mnist_standin(args.n)
    if args.by_class:
        order = np.argsort(y, kind="stable")
        X, y = X[order], y[order]
    load = os.getloadavg()
    if args.mode == "secure":
        result = run_secure(X, y, args.n, "_by_class" if args.by_class else "")
    elif args.mode == "reference":
        q = args.q
        if q is None:
            q = json.loads((OUT / f"secure_{args.n}.json").read_text())["precision"]
        result = run_reference(X, y, args.n, q)
    elif args.mode == "solvers":
        result = run_solvers(y, args.n, args.solvers.split(","))
    elif args.mode == "floor":
        result = run_floor(X)
    else:
        result = run_euclid(X)
    result.update(
        mode=args.mode,
        n=args.n,
        peak_rss_gib=_peak_gib(),
        load_before=load,
        load_after=os.getloadavg(),
    )
    result["by_class"] = args.by_class
    name = f"{args.mode}_{args.n}" + ("_by_class" if args.by_class else "")
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
