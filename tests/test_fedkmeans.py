"""FederatedKMeans: scikit-learn's Lloyd on the pooled rows, from secure sums only."""

import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score

import skfedclust.methods._fedkmeans as fedkmeans
import skfedclust.methods._lloyd_pass as lloyd
from skfedclust import FederatedKMeans
from skfedclust.clusterers import nearest_center
from skfedclust.federation import InProcessRuntime, use_runtime
from skfedclust.methods._fedkmeans import FederatedKMeansError, nearest_radius
from skfedclust.secure import SecureSumError
from skfedclust.secure._secure_sum import TAG_UNMASK, TAG_UPLOAD
from skfedclust.utils.protocol_checks import recording_runtime


def SeesTotalsKMeans(*args, **params):
    """FederatedKMeans in the mode whose coordinator runs Lloyd (the tests of its sums)."""
    return FederatedKMeans(*args, coordinator="sees-totals", **params)


def _data(n=600, k=5, d=3, seed=0, std=2.0):
    X, _ = make_blobs(n, centers=k, n_features=d, random_state=seed, cluster_std=std)
    return X


def _ulps(offset):
    # Centers at a large offset are stored to its float64 spacing.
    return 4 * np.spacing(max(abs(offset), 1.0)) if offset else 1e-9


def _central_lloyd_step(X, centers):
    labels = nearest_center(X, centers)
    return np.array([X[labels == j].mean(axis=0) for j in range(len(centers))])


# --------------------------------------------------------------------------- #
# The pooled Lloyd of scikit-learn
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("offset", [0.0, 1.7e9])
@pytest.mark.parametrize("secure", [True, False])
@pytest.mark.parametrize("max_iter, tol", [(300, 1e-4), (300, 0.0), (3, 1e-4), (300, 0.5)], ids=str)
def test_same_initial_centers_give_scikit_learns_kmeans(offset, secure, max_iter, tol):
    X = _data() + offset
    init = X[[0, 1, 2, 3, 5]].copy()
    km = KMeans(5, init=init, n_init=1, max_iter=max_iter, tol=tol).fit(X)
    fk = FederatedKMeans(
        5,
        init=init,
        max_iter=max_iter,
        tol=tol,
        secure_aggregation=secure,
        partition=4,
        random_state=0,
    ).fit(X)
    np.testing.assert_allclose(fk.cluster_centers_, km.cluster_centers_, rtol=0, atol=_ulps(offset))
    np.testing.assert_array_equal(fk.labels_, km.labels_)
    assert fk.n_iter_ == km.n_iter_
    # The inertia of the centers returned (stored to the offset's spacing, which
    # moves the inertia of unconverged centers by a few parts in 1e9 at 1.7e9).
    exact = ((X - offset - (fk.cluster_centers_ - offset)[fk.labels_]) ** 2).sum()
    np.testing.assert_allclose(fk.inertia_, exact, rtol=1e-12)
    np.testing.assert_allclose(-fk.score(X), exact, rtol=1e-12)
    np.testing.assert_allclose(fk.inertia_, km.inertia_, rtol=1e-9 if offset == 0 else 1e-8)


@pytest.mark.parametrize("init, n_init", [("auto", 1), ("auto", 4), ("random", 3), ("k-fed", 2)])
def test_init_centers_give_kmeans_the_kept_runs_start(init, n_init):
    X = _data()
    fk = SeesTotalsKMeans(5, init=init, n_init=n_init, partition=4, random_state=0).fit(X)
    assert fk.init_centers_.shape == (5, X.shape[1])
    km = KMeans(5, init=fk.init_centers_, n_init=1).fit(X)
    np.testing.assert_array_equal(fk.labels_, km.labels_)
    np.testing.assert_allclose(fk.cluster_centers_, km.cluster_centers_, rtol=0, atol=1e-9)
    assert fk.n_iter_ == km.n_iter_
    # From an array, the start is that array.
    again = SeesTotalsKMeans(5, init=fk.init_centers_, partition=4, random_state=0).fit(X)
    np.testing.assert_array_equal(again.init_centers_, fk.init_centers_)


def test_stopping_by_tol_uses_the_mean_feature_variance():
    # Wildly different feature scales: the tolerance is tol * mean(var(X, axis=0)).
    X = _data(d=2) * [1.0, 1e4]
    init = X[:5].copy()
    for tol in (1e-6, 1e-3, 1e-1):
        km = KMeans(5, init=init, n_init=1, tol=tol).fit(X)
        fk = FederatedKMeans(5, init=init, tol=tol, partition=3, random_state=0).fit(X)
        assert fk.n_iter_ == km.n_iter_
        np.testing.assert_allclose(fk.cluster_centers_, km.cluster_centers_, rtol=1e-9)


def test_secure_and_clear_sums_give_the_same_fit_from_every_init():
    X = _data()
    for init in ("k-fed-weighted", "k-fed", "random"):
        a = SeesTotalsKMeans(5, init=init, n_init=2, partition=3, random_state=1).fit(X)
        b = SeesTotalsKMeans(
            5, init=init, n_init=2, partition=3, random_state=1, secure_aggregation=False
        ).fit(X)
        np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-9)
        np.testing.assert_array_equal(a.labels_, b.labels_)


@pytest.mark.parametrize("init", ["k-fed-weighted", "k-fed", "random"])
def test_restarts_keep_the_lowest_inertia(init):
    X = _data(k=8, std=3.0)
    # The first start is drawn the same way whatever n_init is.
    one = FederatedKMeans(8, init=init, n_init=1, partition=3, random_state=0).fit(X)
    five = FederatedKMeans(8, init=init, n_init=5, partition=3, random_state=0).fit(X)
    assert five.inertia_ <= one.inertia_
    np.testing.assert_allclose(five.inertia_, -five.score(X), rtol=1e-9)
    np.testing.assert_array_equal(five.labels_, five.predict(X))


def test_k_fed_restarts_start_from_distinct_seed_clients():
    from skfedclust.utils.protocol_checks import recording_runtime

    X = _data(k=4)
    with recording_runtime() as runtimes:
        FederatedKMeans(4, init="k-fed", n_init=5, partition=3, random_state=0).fit(X)
    (runtime,) = runtimes
    seeds = [p["seed_client"] for name, _, p in runtime.server_inputs if name == "kfed_server_step"]
    # Three clients: three distinct starts, not five with repeats.
    assert sorted(seeds) == [0, 1, 2]


def test_the_default_start_weighs_local_centers_by_their_sizes():
    # Label-skewed blobs, where k-FED's unweighted server step (a seed client's
    # centers, outliers counting as much as large clusters) starts poorly: the
    # default's cost stays within 5% of centralized k-means with 10 restarts.
    from skfedclust.partition import DirichletPartition
    from skfedclust.utils.protocol_checks import recording_runtime

    X, y = make_blobs(1500, n_features=10, centers=5, cluster_std=2.0, random_state=0)
    X = (X - X.mean(0)) / X.std(0)
    best = KMeans(5, n_init=10, random_state=0).fit(X).inertia_
    for seed in (1, 2, 3):  # where init="k-fed" ends 34% to 106% above
        spec = DirichletPartition(3, alpha=0.5, random_state=seed)
        with recording_runtime() as runtimes:
            est = SeesTotalsKMeans(5, partition=spec, random_state=seed).fit(X, y)
        assert est.inertia_ <= 1.05 * best
        (runtime,) = runtimes
        steps = [name for name, *_ in runtime.server_inputs]
        assert "kfed_server_weighted_kmeans" in steps and "kfed_server_step" not in steps
        # The uploads carry the local clusters' sizes, which add up to the rows.
        (upload,) = [r for r in runtime.received if r.tag == "local centers"]
        assert sum(int(np.sum(p[1])) for p in upload.list()) == len(X)


def test_k_fed_init_clusters_blobs():
    X, y = make_blobs(900, centers=6, cluster_std=0.5, random_state=0)
    for seed in range(3):
        fk = FederatedKMeans(6, random_state=seed).fit([X[:300], X[300:600], X[600:]])
        assert adjusted_rand_score(y, fk.labels_) == 1.0


def test_an_array_init_of_the_wrong_shape_is_refused():
    X = _data()
    with pytest.raises(ValueError, match=r"init has shape \(2, 3\); expected"):
        FederatedKMeans(5, init=X[:2]).fit(X)
    with pytest.warns(RuntimeWarning, match="one start"):
        FederatedKMeans(5, init=X[:5], n_init=3).fit(X)


# --------------------------------------------------------------------------- #
# The fused Lloyd pass of a client
# --------------------------------------------------------------------------- #
def _pass_cases():
    rng = np.random.default_rng(0)
    X = _data(1000, k=5, d=4)  # four chunks, the last one partial
    yield X, X[[0, 1, 2, 3, 5]], None
    yield X + 1.7e9, X[[0, 1, 2, 3, 5]] + 1.7e9, rng.integers(0, 5, len(X))
    yield X * 1e-12 + 3.0, X[:5] * 1e-12 + 3.0, None
    yield X * 1e200, X[:5] * 1e200, None
    # Rows far beyond the centers' spread: the pass hands over to nearest_center.
    far = X.copy()
    far[7] = 1e300
    yield far, X[:5], None
    # Centers 1e-300 apart and a row at 1e10: scaled to the centers' frame the
    # row would overflow; nearest_center takes over.
    tiny = X * 1e-300
    tiny[9] = 1e10
    yield tiny, X[:5] * 1e-300, None
    # Centers that coincide: no frame of their own, nearest_center again.
    yield X, np.repeat(X[:1], 3, axis=0), None
    # A small client: NumPy's pass adds its cluster sums by np.add.at, not by a
    # sparse product; the same floats in the same order.
    small = X[: lloyd._ADD_AT_MAX_ROWS] * np.pi
    yield small, small[[0, 1, 2, 3, 5]], rng.integers(0, 5, len(small))


@pytest.fixture(params=["compiled", "numpy"])
def pass_engine(request, monkeypatch):
    """Both passes: the compiled one (forced on small data) and NumPy's (small clients')."""
    if request.param == "compiled":
        monkeypatch.setattr(lloyd, "_COMPILED_MIN_ROWS", 0)
    return request.param


@pytest.mark.parametrize("known_range", [False, True], ids=["checked", "column range"])
@pytest.mark.parametrize("case", range(8))
def test_the_fused_pass_gives_the_statistics_of_nearest_center(case, known_range, pass_engine):
    X, centers, previous = list(_pass_cases())[case]
    # A client that knows its columns' range skips the per-value headroom
    # check only when the range shows every row within it.
    column_range = (X.min(axis=0), X.max(axis=0)) if known_range else None
    labels, sums, counts, inertia, changed = lloyd.lloyd_pass(
        X, centers, previous, column_range=column_range
    )
    expected = nearest_center(X, centers)
    np.testing.assert_array_equal(labels, expected)
    k = len(centers)
    np.testing.assert_array_equal(counts, np.bincount(expected, minlength=k))
    deviations = X - centers[expected]
    for j in range(k):
        # Deviations added in row order: the floats of any sequential sum.
        total = np.zeros(X.shape[1])
        for row in deviations[expected == j]:
            total = total + row
        np.testing.assert_array_equal(sums[j], total)
        with np.errstate(over="ignore"):  # inf at 1e200, on both sides
            squares = (deviations[expected == j] ** 2).sum()
        np.testing.assert_allclose(inertia[j], squares, rtol=1e-12)
    assert changed == (len(X) if previous is None else np.count_nonzero(previous != expected))


@pytest.mark.parametrize("case", range(8))
def test_the_pass_without_inertia_gives_the_same_statistics(case, pass_engine):
    # A Lloyd iteration skips the squares (the inertia is asked for apart,
    # when a cluster empties): the rest of the pass is the same floats.
    X, centers, previous = list(_pass_cases())[case]
    full = lloyd.lloyd_pass(X, centers, previous)
    lean = lloyd.lloyd_pass(X, centers, previous, inertia=False)
    assert full[3] is not None and lean[3] is None
    for a, b in zip(full[:3], lean[:3]):
        np.testing.assert_array_equal(a, b)
    assert full[4] == lean[4]


def test_the_fused_pass_breaks_ties_towards_the_lowest_index(pass_engine):
    centers = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 0.0], [1.0, 5.0]]) + 1.7e9
    X = np.array([[1.0, 0.0], [1.0, -3.0], [0.0, 0.0], [2.0, 0.0]]) + 1.7e9
    labels = lloyd.lloyd_pass(X, centers)[0]
    np.testing.assert_array_equal(labels, [0, 0, 0, 1])


def test_the_pass_loops_run_uncompiled_as_compiled():
    # The Python source of the compiled pass, run as Python: the same statistics.
    X = _data(600, k=4, d=3) + 1.7e9
    centers = X[:4].copy()
    previous = np.zeros(len(X), dtype=np.intp)
    reference, _ = lloyd.normalized_frame(centers)
    factor = 2.0 ** -int(np.frexp(np.abs(centers - reference).max())[1])
    outputs = []
    for kernel in (lloyd._lloyd_pass_loops, lloyd._lloyd_pass_compiled):
        out = (np.empty(len(X), dtype=np.intp), np.zeros((1, 4, 3)), np.zeros((1, 4), np.int64))
        squares = np.zeros((1, 4, 3))
        changed = kernel(X, centers, reference, factor, previous, *out, squares, 0, 9, True)
        outputs.append((changed, *out, squares))
    for a, b in zip(*outputs):
        np.testing.assert_array_equal(a, b)
    assert outputs[0][0] == np.count_nonzero(nearest_center(X, centers))
    # A row beyond the headroom of the centers' frame: handed over.
    X[5] = 1e300
    assert (
        lloyd._lloyd_pass_compiled(
            X, centers, reference, factor, previous, *out, squares, 0, 9, True
        )
        < 0
    )


@pytest.mark.parametrize("n_threads", [2, 3])
def test_the_pass_adds_blocks_in_order_whatever_the_threads(n_threads, monkeypatch):
    # 3.5 blocks of rows: each block adds its rows in order, then the blocks
    # are added in block order; the floats do not depend on the threads. One
    # block per task, so the threads take blocks in whatever order they come free.
    monkeypatch.setattr(lloyd, "_BLOCKS_PER_TASK", 1)
    block = lloyd._BLOCK
    # Block b's rows spread over 1e4**b: adding the same rows in another order
    # (all in row order, or the blocks reversed) changes the floats, as the
    # end of the test checks. (No offset: rows near 1.7e9 would make every
    # deviation, and every sum, exact.)
    n = block * 7 // 2
    rng_rows = np.random.RandomState(0).standard_normal((n, 3))
    X = rng_rows * 1e4 ** (np.arange(n) // block)[:, None]
    centers = np.vstack([X[:3] * 1e-3, [[1e30] * 3]])
    one = lloyd.lloyd_pass(X, centers, n_threads=1)
    many = lloyd.lloyd_pass(X, centers, n_threads=n_threads)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)
    labels = one[0]
    deviations = X - centers[labels]
    orders = {"blocks in order": [], "blocks reversed": [], "rows in order": []}
    for j in range(3):
        parts = []
        for start in range(0, n, block):
            part = np.zeros(3)
            rows = slice(start, start + block)
            for row in deviations[rows][labels[rows] == j]:
                part = part + row
            parts.append(part)
        forward, backward, sequential = parts[0].copy(), parts[0].copy(), np.zeros(3)
        for part in parts[1:]:
            forward = forward + part
        for part in parts[:0:-1]:
            backward = backward + part
        for row in deviations[labels == j]:
            sequential = sequential + row
        orders["blocks in order"].append(forward)
        orders["blocks reversed"].append(backward)
        orders["rows in order"].append(sequential)
    np.testing.assert_array_equal(one[1][:3], orders["blocks in order"])
    assert not np.array_equal(orders["blocks reversed"], orders["blocks in order"])
    assert not np.array_equal(orders["rows in order"], orders["blocks in order"])
    np.testing.assert_array_equal(one[2], np.bincount(labels, minlength=4))
    assert one[4] == len(X)


def test_fits_do_not_depend_on_n_jobs_or_backend():
    from joblib import parallel_config

    X = _data(3000, k=6, d=5)
    params = dict(init=X[:6], max_iter=20, tol=0, partition=5, random_state=0)
    ref = FederatedKMeans(6, **params).fit(X)
    fits = [FederatedKMeans(6, n_jobs=2, **params).fit(X)]
    with parallel_config(backend="loky"):
        fits.append(FederatedKMeans(6, n_jobs=2, **params).fit(X))
    # The k-FED start runs scikit-learn's KMeans on every client, on threads here.
    params["init"] = "k-fed"
    ref_kfed = FederatedKMeans(6, **params).fit(X)
    fits.append(FederatedKMeans(6, n_jobs=2, **params).fit(X))
    for fit, expected in zip(fits, [ref, ref, ref_kfed]):
        np.testing.assert_array_equal(fit.cluster_centers_, expected.cluster_centers_)
        np.testing.assert_array_equal(fit.labels_, expected.labels_)
        assert fit.inertia_ == expected.inertia_


# --------------------------------------------------------------------------- #
# What crosses the wire
# --------------------------------------------------------------------------- #
def test_with_secure_sums_the_server_receives_only_masked_vectors():
    X = _data()
    with recording_runtime() as runtimes:
        SeesTotalsKMeans(5, init=X[:5], partition=4, random_state=0).fit(X)
    (runtime,) = runtimes
    tags = {m.tag for m in runtime.ledger.messages if m.receiver == fedkmeans_server()}
    assert tags == {TAG_UPLOAD, TAG_UNMASK}
    # Without them, each client's statistics reach the server.
    with recording_runtime() as runtimes:
        SeesTotalsKMeans(5, init=X[:5], partition=4, secure_aggregation=False).fit(X)
    tags = {m.tag for m in runtimes[0].ledger.messages if m.receiver == fedkmeans_server()}
    assert "cluster statistics" in tags


def fedkmeans_server():
    from skfedclust import SERVER

    return SERVER


@pytest.mark.parametrize("n_clients", [4, 10])
def test_bytes_per_iteration(n_clients):
    from skfedclust.secure import default_degree

    X = _data(400, k=4)
    k, d = 4, 3
    init = X[:4].copy()

    def per_iteration(secure):
        reports = [
            SeesTotalsKMeans(
                4,
                init=init,
                max_iter=it,
                tol=0,
                secure_aggregation=secure,
                partition=n_clients,
                random_state=0,
            )
            .fit(X)
            .communication_
            for it in (1, 2)
        ]
        return {key: reports[1][key] - reports[0][key] for key in reports[0] if key != "per_client"}

    vector = 8 * (k * d + k + 1)  # sums, counts, changed labels
    clear = per_iteration(False)
    assert clear["rounds"] == 1
    assert clear["bytes_up"] == n_clients * vector
    assert clear["bytes_down"] == n_clients * 8 * k * d
    secure = per_iteration(True)
    degree = default_degree(n_clients)
    assert secure["rounds"] == 2
    # To each neighbour: a 32-byte share of the self-mask seed (back to the server
    # in the unmasking) and a 16-byte share of each of the client's pair keys.
    assert secure["bytes_peer"] == n_clients * degree * (32 + 16 * degree)
    spec = secure["bytes_up"] / n_clients - vector - degree * 32
    assert 0 < spec < 128  # the vector's structure (shapes, kinds)
    # The centers, and who dropped (no one: an empty announcement), whatever
    # the number of clients.
    assert secure["bytes_down"] == n_clients * 8 * k * d


# --------------------------------------------------------------------------- #
# Bounds
# --------------------------------------------------------------------------- #
def test_every_row_lies_within_the_radius_of_its_nearest_center():
    rng = np.random.default_rng(0)
    for _ in range(20):
        mean = rng.normal(size=4) * 10
        spread = 2.0 ** rng.integers(-3, 4)
        # Rows anywhere in the agreed box, its corners included (the worst case).
        corners = np.array(np.meshgrid(*[[-1.0, 1.0]] * 4)).reshape(4, -1).T
        X = mean + spread * np.vstack([rng.uniform(-1, 1, size=(300, 4)), corners])
        centers = mean + rng.normal(size=(5, 4)) * 5
        labels = nearest_center(X, centers)
        distances = np.sqrt(((X - centers[labels]) ** 2).sum(axis=1))
        radius = nearest_radius(centers, mean, spread)
        assert distances.max() <= radius * (1 + 1e-12)
        assert distances.max() >= 0.5 * radius


def test_a_client_beyond_the_public_bound_refuses_rather_than_wraps(monkeypatch):
    X = _data()
    monkeypatch.setattr(fedkmeans, "_MARGIN", 1e-3)
    with pytest.raises(ValueError, match="exceeds its public bound.*refusing to upload"):
        SeesTotalsKMeans(5, init=X[:5], partition=3, random_state=0).fit(X)


def test_exact_at_a_large_offset_and_tiny_scale():
    X = _data() * 1e-12 + 3.0
    init = X[:5].copy()
    km = KMeans(5, init=init, n_init=1).fit(X)
    fk = FederatedKMeans(5, init=init, partition=3, random_state=0).fit(X)
    np.testing.assert_array_equal(fk.labels_, km.labels_)
    np.testing.assert_allclose(fk.cluster_centers_ - 3.0, km.cluster_centers_ - 3.0, atol=1e-24)


# --------------------------------------------------------------------------- #
# Empty clusters
# --------------------------------------------------------------------------- #
def _federated_relocation(X, centers):
    """The documented rule, computed on the pooled rows: one Lloyd iteration."""
    labels = nearest_center(X, centers)
    k = len(centers)
    counts = np.bincount(labels, minlength=k)
    new = np.array([X[labels == j].mean(axis=0) if counts[j] else centers[j] for j in range(k)])
    d2 = ((X - centers[labels]) ** 2).sum(axis=1)
    inertia = np.bincount(labels, weights=d2, minlength=k)
    donors = [j for j in np.argsort(-inertia, kind="stable") if counts[j] >= 2]
    for e, j in zip(np.flatnonzero(counts == 0), donors):
        members = labels == j
        far = members & (d2 > inertia[j] / counts[j])
        new[e] = X[far].mean(axis=0)
        new[j] = X[members & ~far].mean(axis=0)
    return new


@pytest.mark.parametrize("coordinator", ["sees-totals", "blind"])
def test_an_empty_cluster_takes_the_far_rows_of_the_largest_inertia_cluster(coordinator):
    # The coordinator's sums and the nodes' own relocation (blind) follow one rule.
    X = _data(k=3)
    init = np.vstack([X[:3], X.mean(axis=0) + 1e3, X.mean(axis=0) - 1e3])
    params = dict(init=init, partition=3, random_state=0, coordinator=coordinator)
    fk = FederatedKMeans(5, max_iter=1, **params).fit(X)
    expected = _federated_relocation(X, init)
    np.testing.assert_allclose(fk.cluster_centers_, expected, rtol=1e-12)
    # No row is sent: the relocated centers are means of several rows.
    for c in fk.cluster_centers_:
        assert np.min(np.abs(X - c).sum(axis=1)) > 1e-6
    # Run to convergence, no cluster stays empty.
    fk = FederatedKMeans(5, **params).fit(X)
    assert np.all(np.bincount(fk.labels_, minlength=5) > 0)
    assert np.all(np.isfinite(fk.cluster_centers_))


def test_the_clusters_inertia_is_sent_only_when_a_cluster_is_empty():
    # A Lloyd iteration sends sums, counts and changed labels; the per-cluster
    # squared distances that pick the donors are one more sum, asked for only
    # in an iteration that left a cluster empty.
    X = _data(k=3)
    empty_first = np.vstack([X[:3], X.mean(axis=0) + 1e3])
    for init, expected in [(empty_first, 1), (X[:3].copy(), 0)]:
        with recording_runtime() as runtimes:
            fk = FederatedKMeans(
                len(init), init=init, max_iter=3, secure_aggregation=False, partition=3
            ).fit(X)
        (runtime,) = runtimes
        statistics = [r for r in runtime.received if r.tag == "cluster statistics"]
        assert statistics and all(
            len(sums_counts_changed) == 3 for r in statistics for sums_counts_changed in r.list()
        )
        asked = [r for r in runtime.received if r.tag == "inertia of the clusters"]
        assert len(asked) == expected
        assert all(len(r.list()) == 3 for r in asked)
    # The relocated cluster holds rows after the one iteration that asked.
    assert fk.n_iter_ >= 1


def test_an_empty_cluster_keeps_its_center_in_a_sampled_iteration():
    X = _data(k=3)
    init = np.vstack([X[:3], X.mean(axis=0) + 1e3])
    fk = FederatedKMeans(
        4, init=init, max_iter=1, client_fraction=0.5, partition=6, random_state=0
    ).fit(X)
    np.testing.assert_array_equal(fk.cluster_centers_[3], init[3])


# --------------------------------------------------------------------------- #
# Client sampling and dropouts
# --------------------------------------------------------------------------- #
class DropInUpload(InProcessRuntime):
    """Loses ``party``'s masked upload of the ``at``-th secure sum (counted from 0)."""

    party, at = 2, None

    def _lost(self, tag, party):
        if tag != TAG_UPLOAD or party != self.party:
            return False
        done = sum(1 for entry in self.trace if entry[1] == TAG_UPLOAD)
        return done == self.at


def test_a_client_dropping_mid_fit_is_left_out_of_that_iteration():
    X = _data()
    clients = [X[:150], X[150:300], X[300:450], X[450:]]
    init = X[:5].copy()
    # Secure sums: row bound, moments, deviation bound, per-feature deviation
    # bounds (no centered moments: with tol=0 the fit reads no variance); then
    # one per Lloyd iteration. Client 2 drops in the second iteration.
    DropInUpload.at = 5
    with use_runtime(DropInUpload):
        fk = SeesTotalsKMeans(5, init=init, max_iter=2, tol=0, random_state=0).fit(clients)
    first = _central_lloyd_step(X, init)
    second = _central_lloyd_step(np.vstack(clients[:2] + clients[3:]), first)
    np.testing.assert_allclose(fk.cluster_centers_, second, rtol=1e-12)
    # Its labels are still its own output at the end.
    np.testing.assert_array_equal(fk.labels_, nearest_center(X, fk.cluster_centers_))
    # Asking for every client makes the same dropout an error.
    with use_runtime(DropInUpload), pytest.raises(FederatedKMeansError, match="min_clients=4"):
        SeesTotalsKMeans(5, init=init, tol=0, min_clients=4, random_state=0).fit(clients)


class DropHalf(InProcessRuntime):
    """Loses the replies of clients 1 and 2 to the third Lloyd-statistics exchange."""

    def _lost(self, tag, party):
        done = sum(1 for entry in self.trace if entry[1] == tag)
        return tag in ("cluster statistics", TAG_UPLOAD) and party in (1, 2) and done == 6


def test_too_many_dropouts_is_a_clear_error():
    X = _data()
    # By default a majority of the clients taking part must answer.
    fit = SeesTotalsKMeans(5, init=X[:5], partition=4, secure_aggregation=False).fit
    with use_runtime(DropHalf), pytest.raises(FederatedKMeansError, match="only 2 of the 4"):
        fit(X)
    # With secure sums, a survivor whose neighbours dropped cannot be unmasked.
    fit = SeesTotalsKMeans(5, init=X[:5], partition=4, min_clients=1).fit
    # (nodes refuse to unmask a sum announced with fewer survivors than their minimum).
    with (
        use_runtime(DropHalf),
        pytest.raises((SecureSumError, PermissionError), match="threshold|min-sum-participants"),
    ):
        fit(X)


def test_client_sampling_is_public_and_reproducible():
    X, y = make_blobs(800, centers=4, cluster_std=0.6, random_state=0)
    params = dict(client_fraction=0.5, partition=8, random_state=0)
    with recording_runtime() as runtimes:
        a = FederatedKMeans(4, **params).fit(X)
    b = FederatedKMeans(4, **params).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert adjusted_rand_score(y, a.labels_) > 0.95
    # Four of eight clients upload in each Lloyd iteration, on a complete graph.
    (runtime,) = runtimes
    # (the first five uploads are the moments' sums and bounds, the last the inertia's)
    statistics = [r for r in runtime.received if r.tag == TAG_UPLOAD][5:-1]
    assert statistics and all(len(r) == 4 for r in statistics)
    assert len({tuple(r) for r in statistics}) > 1


def test_min_clients_beyond_the_federation_is_refused():
    X = _data()
    with pytest.raises(ValueError, match="min_clients=5 but there are 3 clients"):
        FederatedKMeans(5, min_clients=5, partition=3).fit(X)


# --------------------------------------------------------------------------- #
# New rows
# --------------------------------------------------------------------------- #
def test_transform_and_score_on_new_rows():
    X = _data()
    fk = FederatedKMeans(5, partition=3, random_state=0).fit(X)
    km = KMeans(5, init=fk.cluster_centers_, n_init=1, max_iter=1).fit(X)
    km.cluster_centers_ = fk.cluster_centers_
    new = _data(seed=1) + 1.0
    np.testing.assert_allclose(fk.transform(new), km.transform(new), rtol=1e-9)
    np.testing.assert_allclose(fk.score(new), km.score(new), rtol=1e-9)
    # The rows held by several clients give the same federated score.
    np.testing.assert_allclose(fk.score([new[:100], new[100:]]), km.score(new), rtol=1e-9)
    # Sums in the clear score alike (from the centers of their own fit).
    clear = FederatedKMeans(5, partition=3, random_state=0, secure_aggregation=False).fit(X)
    km.cluster_centers_ = clear.cluster_centers_
    np.testing.assert_allclose(clear.score(new), km.score(new), rtol=1e-9)


@pytest.mark.parametrize("ratio", [1e6, 1e12, 1e18])
def test_centers_are_exact_in_every_feature_whatever_the_mix_of_scales(ratio):
    # One public bound for all features rounded the narrow feature to the wide
    # one's fixed-point step (4e-6 of its spread at 1e12, 48% at 1e18); the
    # clients now agree a bound per feature.
    X, _ = make_blobs(300, centers=3, random_state=0)
    X = X * [1.0, ratio]
    init = X[[0, 100, 200]]
    km = KMeans(3, init=init, n_init=1, tol=0, algorithm="lloyd").fit(X)
    fk = FederatedKMeans(3, init=init, tol=0, random_state=0).fit([X[:100], X[100:200], X[200:]])
    error = np.abs(fk.cluster_centers_ - km.cluster_centers_) / X.std(axis=0)
    assert error.max() < 1e-9
    np.testing.assert_array_equal(fk.labels_, km.labels_)


def test_float32_input_gives_float32_centers_and_distances_as_kmeans_does():
    X, _ = make_blobs(300, centers=3, random_state=0)
    X32 = X.astype(np.float32)
    for data in (X32, [X32[:100], X32[100:200], X32[200:]]):
        fk = FederatedKMeans(3, random_state=0).fit(data)
        assert fk.cluster_centers_.dtype == np.float32
        assert fk.transform(X32[:5]).dtype == np.float32
    reference = FederatedKMeans(3, random_state=0).fit(X32.astype(np.float64))
    assert reference.cluster_centers_.dtype == np.float64
    np.testing.assert_allclose(
        FederatedKMeans(3, random_state=0).fit(X32).cluster_centers_,
        reference.cluster_centers_,
        rtol=1e-6,
    )


def test_nullable_float32_frames_give_float64_centers_as_kmeans_does():
    pd = pytest.importorskip("pandas")
    X, _ = make_blobs(90, centers=3, random_state=0)
    frame = pd.DataFrame(X.astype(np.float32)).astype("Float32")
    # scikit-learn computes a pandas extension dtype in float64, even Float32.
    assert KMeans(3, n_init=1).fit(frame).cluster_centers_.dtype == np.float64
    for data in (frame, [frame[:30], frame[30:60], frame[60:]]):
        assert FederatedKMeans(3, random_state=0).fit(data).cluster_centers_.dtype == np.float64


def test_fewer_distinct_rows_than_clusters_warns_as_kmeans_does():
    X = np.array([[0.0, 0.0], [1.0, 1.0]] * 15)
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(2\).*n_clusters \(3\)"):
        FederatedKMeans(3, random_state=0).fit([X[:10], X[10:20], X[20:]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        FederatedKMeans(2, random_state=0).fit([X[:10], X[10:20], X[20:]])


def test_farthest_row_relocation_equals_kmeans_from_the_same_start():
    # scikit-learn's four-point case: one center starts far away and is empty.
    X = np.array([[0, 0], [0.5, 0], [0.5, 1], [1, 1]], dtype=float)
    init = np.array([[0.5, 0.5], [3, 3]])
    km = KMeans(2, init=init, n_init=1).fit(X)
    fk = FederatedKMeans(2, init=init, empty_clusters="farthest-row", random_state=0)
    fk.fit([X[:2], X[2:3], X[3:]])
    assert km.inertia_ == fk.inertia_ == 0.25
    np.testing.assert_array_equal(fk.labels_, km.labels_)
    np.testing.assert_allclose(fk.cluster_centers_, km.cluster_centers_)
    # Two empty clusters at once, rows spread over the clients.
    X, _ = make_blobs(90, centers=3, random_state=1)
    init = np.vstack([X[[0, 30, 60]], [[100.0, 100.0], [-100.0, 100.0]]])
    km = KMeans(5, init=init, n_init=1, tol=0, algorithm="lloyd").fit(X)
    fk = FederatedKMeans(5, init=init, tol=0, empty_clusters="farthest-row", random_state=0)
    fk.fit([X[:30], X[30:60], X[60:]])
    np.testing.assert_array_equal(fk.labels_, km.labels_)
    np.testing.assert_allclose(fk.cluster_centers_, km.cluster_centers_, rtol=1e-9)
    assert fk.inertia_ == pytest.approx(km.inertia_, rel=1e-9)


# scikit-learn's test_relocating_with_duplicates (sklearn/cluster/tests/test_k_means.py),
# KMeans swapped for FederatedKMeans with scikit-learn's relocation; the rows come
# pooled, one row a client, and split unevenly over three clients.
@pytest.mark.parametrize(
    "split",
    [lambda X: X, lambda X: list(X[:, None, :]), lambda X: [X[:2], X[2:3], X[3:]]],
    ids=["pooled", "one-row-clients", "three-clients"],
)
def test_relocating_with_duplicates(split):
    """Check that federated k-means stops when there are more centers than distinct rows.

    Non-regression test for scikit-learn's issue 28055, which the scikit-learn
    rule for empty clusters inherits.
    """
    X = np.array([[0, 0], [1, 1], [1, 1], [1, 0], [0, 1]], dtype=float)
    km = FederatedKMeans(n_clusters=5, init=X, empty_clusters="farthest-row", random_state=0)

    msg = r"Number of distinct clusters \(4\) found smaller than n_clusters \(5\)"
    with pytest.warns(ConvergenceWarning, match=msg):
        km.fit(split(X))

    assert km.n_iter_ == 1
    # Not only the count: the fit is scikit-learn's from the same start.
    with pytest.warns(ConvergenceWarning):
        reference = KMeans(n_clusters=5, init=X, n_init=1).fit(X)
    np.testing.assert_array_equal(km.cluster_centers_, reference.cluster_centers_)
    np.testing.assert_array_equal(km.labels_, reference.labels_)


def test_a_cluster_left_empty_takes_the_largest_clusters_center_as_in_kmeans():
    # Three distinct rows, four centers, one of them far: the far center is
    # empty, and relocating it to a row empties the singleton cluster that
    # row came from (its center was off the row). scikit-learn puts a cluster
    # still empty at the center of the largest one.
    X = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [4.0, 0.0], [10.0, 0.0]])
    init = np.array([[0.0, 0.0], [3.0, 0.0], [9.5, 0.0], [50.0, 50.0]])
    km = KMeans(4, init=init, n_init=1).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fk = FederatedKMeans(4, init=init, empty_clusters="farthest-row", random_state=0)
        fk.fit([X[:2], X[2:4], X[4:]])
    np.testing.assert_allclose(fk.cluster_centers_, km.cluster_centers_, atol=1e-12)
    np.testing.assert_array_equal(fk.labels_, km.labels_)
    assert fk.n_iter_ == km.n_iter_


def test_a_default_node_refuses_to_send_its_farthest_row():
    from skfedclust.node._policy import NodePolicy

    X = np.array([[0, 0], [0.5, 0], [0.5, 1], [1, 1]] * 3, dtype=float)
    init = np.array([[0.5, 0.5], [3, 3]])
    est = FederatedKMeans(2, init=init, empty_clusters="farthest-row", random_state=0)

    def deployed(federation, **kwargs):
        return InProcessRuntime(federation, **{**kwargs, "policy": NodePolicy()})

    with use_runtime(deployed), pytest.raises(PermissionError, match="row"):
        est.fit([X[:4], X[4:8], X[8:]])


# --------------------------------------------------------------------------- #
# A callable init
# --------------------------------------------------------------------------- #
def test_a_callable_init_runs_on_each_clients_rows_as_kmeans_calls_it():
    from skfedclust.clusterers import nearest_center
    from skfedclust.methods._kfed import kfed_server_weighted_kmeans

    X, y = make_blobs(400, centers=3, cluster_std=0.5, random_state=2)
    clients = np.array_split(X, 4)
    calls = []

    def first_rows(rows, n_clusters, random_state):
        calls.append((rows.copy(), n_clusters, type(random_state)))
        return rows[:n_clusters]

    est = FederatedKMeans(3, init=first_rows, max_iter=1, random_state=0).fit(clients)
    assert len(calls) == 4
    for (rows, k, rs), block in zip(calls, clients):
        np.testing.assert_array_equal(rows, block)
        assert k == 3 and rs is np.random.RandomState
    # The local centers, with their sizes on the client's rows, are aggregated
    # as init="k-fed-weighted" does: one Lloyd iteration from that start.
    from skfedclust.federation import Received

    received = {
        c: (block[:3], np.bincount(nearest_center(block, block[:3]), minlength=3), np.int64(0))
        for c, block in enumerate(clients)
    }
    candidate = kfed_server_weighted_kmeans(
        Received("local centers", received), n_clusters=3, n_init=10, seed=0, max_iter=300
    )
    km = KMeans(3, init=candidate, n_init=1, max_iter=1).fit(X)
    np.testing.assert_allclose(
        np.sort(km.cluster_centers_, axis=0), np.sort(est.cluster_centers_, axis=0), atol=1e-9
    )
    assert adjusted_rand_score(y, FederatedKMeans(3, init=first_rows, random_state=0)
                               .fit(clients).labels_) > 0.95  # fmt: skip


def test_a_callable_init_is_checked_and_refused_under_dp():
    X, _ = make_blobs(200, centers=3, random_state=0)
    clients = np.array_split(X, 4)

    def too_many(rows, n_clusters, random_state):
        return rows[: n_clusters + 1]

    with pytest.raises(ValueError, match=r"returned an array of shape \(4, 2\)"):
        FederatedKMeans(3, init=too_many).fit(clients)
    with pytest.raises(ValueError, match="no differential-privacy guarantee covers"):
        FederatedKMeans(
            3, init=too_many, privacy="dp", epsilon=1.0, bounds=(X.min(0), X.max(0))
        ).fit(clients)


# --------------------------------------------------------------------------- #
# Whole fits: the clients' rows are read where they are, checked once
# --------------------------------------------------------------------------- #
def _record_lloyd_blocks(monkeypatch):
    """Every ``data`` the Lloyd passes of either coordinator get, as it reaches them."""
    import skfedclust.methods._fedkmeans_blind as blind
    import skfedclust.methods._fedkmeans_steps as steps

    seen = []

    def recording(original):
        def lloyd_pass(data, *args, **kwargs):
            seen.append(data)
            return original(data, *args, **kwargs)

        return lloyd_pass

    monkeypatch.setattr(steps, "lloyd_pass", recording(steps.lloyd_pass))
    monkeypatch.setattr(blind, "lloyd_pass", recording(blind.lloyd_pass))
    return seen


@pytest.mark.parametrize("coordinator", ["sees-totals", "blind"])
@pytest.mark.parametrize("form", ["clients", "sorted client_ids"])
def test_the_lloyd_passes_read_views_of_the_callers_rows(monkeypatch, coordinator, form):
    # C-contiguous float64 rows need no copy: a copy of every client's rows
    # (a stack of the clients, a cast, a contiguous copy) fails here.
    X = _data(n=3000, d=4)
    clients = np.array_split(X, 4)
    seen = _record_lloyd_blocks(monkeypatch)
    model = FederatedKMeans(5, init=X[:5].copy(), max_iter=3, coordinator=coordinator)
    if form == "clients":
        model.fit(clients)
        held = clients
    else:
        model.fit(X, client_ids=np.repeat(np.arange(4), [len(c) for c in clients]))
        held = [X] * 4
    assert len(seen) >= 4
    for data in seen:
        owner = [i for i, rows in enumerate(held) if np.shares_memory(data, rows)]
        assert owner, "a Lloyd pass read a copy of a client's rows"
        assert np.array_equal(data, clients[owner[0]] if form == "clients" else data)
    # The caller's arrays stay writable: only the runtime's views are read-only.
    assert all(c.flags.writeable for c in clients) and X.flags.writeable


def test_each_client_is_checked_once(monkeypatch):
    import sklearn.utils.validation as validation

    import skfedclust.federation._inputs as inputs

    checked = []
    original = validation.check_array

    def counting(array, *args, **kwargs):
        checked.append(array)
        return original(array, *args, **kwargs)

    # Here and in scikit-learn's validate_data: a second check of the stacked
    # rows (or of a client) counts.
    monkeypatch.setattr(inputs, "check_array", counting)
    monkeypatch.setattr(validation, "check_array", counting)
    X = _data()
    clients = np.array_split(X, 4)
    FederatedKMeans(5, init=X[:5].copy(), max_iter=2, random_state=0).fit(clients)
    assert len(checked) == 4
    assert all(a is c for a, c in zip(checked, clients))


def test_a_fit_on_client_arrays_allocates_far_less_than_their_rows():
    # Peak extra memory of a whole fit (k-means' labels, the label blocks'
    # temporaries) against the rows' 16 MB: a copy of them would exceed it.
    import tracemalloc

    X = np.random.RandomState(0).uniform(size=(100_000, 20))
    clients = np.array_split(X, 10)
    model = FederatedKMeans(8, init=X[:8].copy(), max_iter=3, tol=0, random_state=0)
    model.fit(clients)  # compiled code and thread pools ready
    tracemalloc.start()
    try:
        model.fit(clients)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < X.nbytes / 2


def test_the_fit_sums_centered_moments_only_for_tol_or_a_drawn_start():
    # As KMeans, which computes no variance for tol=0: one secure sum fewer.
    X = _data()

    def secure_sums(**params):
        with recording_runtime() as runtimes:
            SeesTotalsKMeans(5, max_iter=1, random_state=0, **params).fit(np.array_split(X, 3))
        return sum(entry[3] == "secure_sum_upload_step" for entry in runtimes[0].trace)

    init = X[:5].copy()
    assert secure_sums(init=init, tol=0.0) + 1 == secure_sums(init=init, tol=1e-4)
    assert secure_sums(init="random", tol=0.0) == secure_sums(init="random", tol=1e-4)
