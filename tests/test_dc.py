"""Tests of DCClustering."""

import contextlib
import copy
import pickle

import numpy as np
import pytest
from scipy.linalg import sqrtm
from scipy.spatial.distance import pdist
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.cluster import KMeans, SpectralClustering, k_means
from sklearn.datasets import load_iris, make_blobs
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.neighbors import kneighbors_graph
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_random_state
from sklearn.utils.estimator_checks import check_estimator

import skfedclust.methods._dc as dc_module
import skfedclust.methods._dc_analyst as dc_analyst
from skfedclust import DCClustering
from skfedclust.federation import SERVER, Party, use_runtime
from skfedclust.metrics import clustering_accuracy
from skfedclust.partition import HybridPartition, VerticalPartition
from skfedclust.utils.protocol_checks import RecordingRuntime, check_protocol, recording_runtime


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


def iris_lattice(seed=0, n_row_groups=10):
    rng = np.random.RandomState(seed)
    blocks = [np.sort(b) for b in np.array_split(rng.permutation(4), 2)]
    return HybridPartition(n_row_groups, feature_blocks=blocks, random_state=seed)


def augmented(A):
    return np.hstack([A, np.ones((len(A), 1))])


def three_rings(n_per_ring, seed):
    """Three concentric rings (radii 2, 4, 6) plus four weak minor features."""
    rng = np.random.RandomState(seed)
    radius = np.repeat([2.0, 4.0, 6.0], n_per_ring) + rng.normal(0, 0.1, 3 * n_per_ring)
    angle = rng.uniform(0, 2 * np.pi, 3 * n_per_ring)
    major = np.c_[radius * np.cos(angle), radius * np.sin(angle)]
    cov = np.full((4, 4), 0.01) + np.eye(4) * 0.09
    minor = rng.multivariate_normal(np.zeros(4), cov, 3 * n_per_ring)
    X = np.c_[major[:, :1], minor[:, :2], major[:, 1:], minor[:, 2:]]
    return X, np.repeat([0, 1, 2], n_per_ring)


class Parties:
    """What the parties of a recorded in-process fit kept, for the tests only.

    The estimator holds only what the analyst holds; the anchors and the
    private maps are read here from the parties' own states
    (``InProcessRuntime.private_states``), as a test that inspects the
    protocol may.
    """

    def __init__(self, runtime, est):
        self.runtime = runtime
        self.states = runtime.private_states()
        self.est = est

    @property
    def anchors(self):
        """The full anchor matrix, joined from the slices of row group 0's parties."""
        group = self.est.row_groups_[0]
        n_anchors = len(self.states[group[0]][dc_module.TAG_SLICE])
        anchors = np.empty((n_anchors, self.est.n_features_in_))
        for c, cols in zip(group, self.est.feature_blocks_):
            anchors[:, cols] = self.states[c][dc_module.TAG_SLICE]
        return anchors

    def f(self, c):
        """Party ``c``'s private map."""
        return self.states[c]["f"]

    @property
    def order(self):
        """Input row of every row of the analyst's stacking."""
        rows = self.runtime._federation.client_rows
        return np.concatenate([rows[group[0]] for group in self.est.row_groups_])


def fit_with_parties(est, X, **fit_params):
    """Fit ``est`` on a recording runtime; return it and its parties."""
    with recording_runtime() as runtimes:
        est.fit(X, **fit_params)
    return est, Parties(runtimes[-1], est)


class RotateShift(TransformerMixin, BaseEstimator):
    """An invertible affine map: a random rotation plus a shift."""

    def __init__(self, random_state=None):
        self.random_state = random_state

    def fit(self, X, y=None):
        rng = check_random_state(self.random_state)
        self.rotation_ = np.linalg.qr(rng.normal(size=(X.shape[1], X.shape[1])))[0]
        self.shift_ = rng.normal(size=X.shape[1])
        return self

    def transform(self, X):
        return X @ self.rotation_ + self.shift_


# --------------------------------------------------------------------------- #
# Faithfulness checks of the specification (§8)
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("anchor_range", ["per_feature", "global"])
def test_lossless_collaborative_representation_is_exact(iris, anchor_range):
    """§8.1: lossless f gives X_hat = [X, 1] pinv([X_anc, 1]) U_1 for every row group."""
    X, _ = iris
    dc, parties = fit_with_parties(
        DCClustering(
            3,
            partition=iris_lattice(0),
            n_components_intermediate=None,
            anchor_range=anchor_range,
            random_state=0,
        ),
        X,
    )
    assert dc.n_components_collab_ == X.shape[1] + 1
    # The analyst's rows, row group by row group; the pooled rows in that order.
    X = X[parties.order]
    X_hat = dc.collaborative_representation_
    anchors = parties.anchors
    expected = augmented(X) @ np.linalg.pinv(augmented(anchors)) @ dc.target_
    assert np.abs(X_hat - expected).max() < 1e-10 * np.abs(X_hat).max()

    # Distances are Mahalanobis distances under the anchors' covariance.
    A_c = anchors - anchors.mean(axis=0)
    metric = np.linalg.inv(A_c.T @ A_c)
    pairs = np.random.RandomState(0).randint(len(X), size=(50, 2))
    diff = X[pairs[:, 0]] - X[pairs[:, 1]]
    expected_d2 = np.einsum("ij,jk,ik->i", diff, metric, diff)
    d2 = ((X_hat[pairs[:, 0]] - X_hat[pairs[:, 1]]) ** 2).sum(axis=1)
    np.testing.assert_allclose(d2, expected_d2, rtol=1e-8)


def test_lossless_geometry_does_not_depend_on_f(iris):
    """§8.1: any invertible affine f gives the same collaborative geometry."""
    X, _ = iris
    kwargs = dict(partition=iris_lattice(1), random_state=1)
    pca, pca_parties = fit_with_parties(
        DCClustering(3, n_components_intermediate=None, **kwargs), X
    )
    rot, rot_parties = fit_with_parties(DCClustering(3, intermediate=RotateShift(), **kwargs), X)
    np.testing.assert_allclose(pca_parties.anchors, rot_parties.anchors)
    d_pca = pdist(pca.collaborative_representation_)
    d_rot = pdist(rot.collaborative_representation_)
    assert np.abs(d_pca - d_rot).max() < 1e-10 * d_pca.max()
    assert np.array_equal(pca.labels_, rot.labels_)


def test_anchor_alignment(iris):
    """§8.2: lossless maps hit the target exactly; lossy ones approximately."""
    X, _ = iris
    lossless = DCClustering(
        3, partition=iris_lattice(2), n_components_intermediate=None, random_state=2
    ).fit(X)
    assert lossless.anchor_alignment_error_.max() < 1e-10
    lossy, parties = fit_with_parties(DCClustering(3, partition=iris_lattice(2), random_state=2), X)
    errors = lossy.anchor_alignment_error_
    assert errors.shape == (10,)
    # Below the target's norm sqrt(m_hat): about half of it on these splits, whatever
    # anchors the coordinator draws.
    assert 1e-6 < errors.max() < 0.75 * np.sqrt(lossy.n_components_collab_)
    # The reported residual is the one of the stored map and target.
    group = lossy.row_groups_[3]
    anchor_tilde = np.hstack(
        [
            parties.f(c).transform(parties.anchors[:, cols])
            for c, cols in zip(group, lossy.feature_blocks_)
        ]
    )
    residual = augmented(anchor_tilde) @ lossy.collaboration_maps_[3] - lossy.target_
    assert np.isclose(np.linalg.norm(residual), errors[3])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kmeans_equals_kmeans_on_whitened_data(iris, seed):
    """§8.3: lossless DC k-means = k-means on X (A_c^T A_c)^(-1/2), ARI = 1."""
    X, _ = iris
    dc, parties = fit_with_parties(
        DCClustering(
            3, partition=iris_lattice(seed), n_components_intermediate=None, random_state=seed
        ),
        X,
    )
    A_c = parties.anchors - parties.anchors.mean(axis=0)
    whitened = X[parties.order] @ np.real(sqrtm(np.linalg.inv(A_c.T @ A_c)))
    km_hat = KMeans(3, n_init=10, random_state=seed).fit(dc.collaborative_representation_)
    km_white = KMeans(3, n_init=10, random_state=seed).fit(whitened)
    assert adjusted_rand_score(km_hat.labels_, km_white.labels_) == 1.0
    assert adjusted_rand_score(dc.analyst_labels_, km_white.labels_) == 1.0
    # The parties' labels, in input order, are the analyst's.
    np.testing.assert_array_equal(dc.labels_[parties.order], dc.analyst_labels_)


def isotropic_anchors(n_anchors, n_features, seed):
    """Anchors whose centred covariance is exactly the identity."""
    Q = np.linalg.qr(np.random.RandomState(seed).normal(size=(n_anchors, n_features + 1)))[0]
    # The first column is orthogonal to the others but not constant; project
    # the others off the constant direction and re-orthonormalise.
    A = Q[:, 1:] - Q[:, 1:].mean(axis=0)
    return np.linalg.qr(A)[0]


@pytest.mark.parametrize("clusterer", ["kmeans", "spectral"])
def test_isotropic_lossless_dc_reproduces_central_iris_values(iris, clusterer):
    """§8.4: the paper's central Iris values, and DC with isotropic anchors hits them."""
    X, y = iris
    if clusterer == "kmeans":
        central = KMeans(3, n_init=10, random_state=0).fit_predict(X)
        paper = (0.730, 0.758, 0.893)
    else:
        central = SpectralClustering(3, affinity="nearest_neighbors", random_state=0)
        central = central.fit_predict(X)
        paper = (0.759, 0.806, 0.907)
    dc = DCClustering(
        3,
        clusterer=clusterer,
        anchors=isotropic_anchors(150, 4, 0),
        n_components_intermediate=None,
        partition=iris_lattice(0),
        random_state=0,
    ).fit(X)
    for labels in (central, dc.labels_):
        scores = (
            adjusted_rand_score(y, labels),
            normalized_mutual_info_score(y, labels),
            clustering_accuracy(y, labels),
        )
        np.testing.assert_allclose(scores, paper, atol=5e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_written_out_spectral_clustering_equals_sklearn(iris, seed):
    """§8.5: the analyst's kNN -> embedding -> k-means equals SpectralClustering."""
    X, _ = iris
    _, _, labels, _ = dc_module.dc_server_cluster(
        X,
        clusterer="spectral",
        n_clusters=3,
        n_neighbors=10,
        n_init=10,
        max_iter=300,
        random_state=check_random_state(seed),
    )
    expected = SpectralClustering(3, affinity="nearest_neighbors", random_state=seed).fit(X)
    assert np.array_equal(labels, expected.labels_)


# --------------------------------------------------------------------------- #
# The protocol on the runtime (§2.7, §5, §8.6)
# --------------------------------------------------------------------------- #
def upload_of(runtime):
    """What the parties sent to the analyst (the only upload of the protocol)."""
    (received,) = [r for r in runtime.received if r.tag == dc_module.TAG_UPLOAD]
    return received


@contextlib.contextmanager
def recording_downloads(monkeypatch):
    """Record the runtimes of the fits, and every payload the analyst sends."""
    sent = []
    send = RecordingRuntime.send

    def recording_send(self, payloads, *, tag):
        sent.append((tag, dict(payloads)))
        return send(self, payloads, tag=tag)

    monkeypatch.setattr(RecordingRuntime, "send", recording_send)
    with recording_runtime() as runtimes:
        yield runtimes, sent


def upload_bytes(est, n_anchors):
    """§5: party (i, j) uploads X_tilde and anchor_tilde, (n_i + r) m_tilde_ij float64."""
    return lambda rt: sum(
        8 * (int(n_i) + n_anchors) * int(m_tilde)
        for n_i, m_tilde in zip(rt.client_sizes, est.n_components_intermediate_)
    )


def download_bytes(est, k):
    """§5: party (i, j) downloads theta and Z_i, (k + n_i) p float64, p = m_hat or k (SC)."""

    def formula(rt):
        p = est.n_components_collab_ if est.clusterer == "kmeans" else k
        return sum(8 * (k + int(n_i)) * p for n_i in rt.client_sizes)

    return formula


def uniform_anchor_peer_bytes(rt):
    """Set-up among users: every party but the coordinator sends its m_j minima and
    m_j maxima; the coordinator sends each of them the recipe (one seed, m minima
    and m maxima)."""
    others = range(1, rt.n_clients)
    ranges = sum(8 * 2 * int(rt.client_widths[c]) for c in others)
    recipes = len(others) * (8 + 8 * 2 * rt.n_features)
    return ranges + recipes


@pytest.mark.filterwarnings("ignore:party .* holds a single feature")
@pytest.mark.parametrize("clusterer", ["kmeans", "spectral"])
def test_one_round_one_upload_and_one_download_per_party(iris, clusterer):
    """§8.6 and §5: one round; the bytes of the upload, the download and the set-up."""
    X, _ = iris
    est = DCClustering(
        3, clusterer=clusterer, partition=HybridPartition(2, 3, random_state=0), random_state=0
    )
    runtime = check_protocol(
        est,
        X,
        rounds=1,
        bytes_up=upload_bytes(est, len(X)),
        bytes_down=download_bytes(est, 3),
        bytes_peer=uniform_anchor_peer_bytes,
    )
    # The anchor agreement happens before the round, among the users only.
    assert est.communication_["setup_rounds"] == 2
    messages = runtime.ledger.messages
    for party in range(6):
        ups = [m for m in messages if m.sender == party and m.receiver == SERVER]
        downs = [m for m in messages if m.sender == SERVER and m.receiver == party]
        assert [m.tag for m in ups] == [dc_module.TAG_UPLOAD]
        assert [m.tag for m in downs] == [dc_module.TAG_DOWNLOAD]
    peer = [m for m in messages if SERVER not in (m.sender, m.receiver)]
    ranges = [(m.sender, m.receiver) for m in peer if m.tag == dc_module.TAG_RANGE]
    recipes = [(m.sender, m.receiver) for m in peer if m.tag == dc_module.TAG_RECIPE]
    assert ranges == [(c, 0) for c in range(1, 6)]
    assert recipes == [(0, c) for c in range(1, 6)]
    assert len(peer) == len(ranges) + len(recipes)
    # Every upload carries exactly X_tilde and anchor_tilde.
    for party, (X_tilde, anchor_tilde) in upload_of(runtime).items():
        assert X_tilde.shape == (est.client_sizes_[party], est.n_components_intermediate_[party])
        assert anchor_tilde.shape == (len(X), est.n_components_intermediate_[party])


def test_given_anchors_are_sliced_by_the_coordinator():
    """With given anchors the set-up is one exchange: party 0 sends each party its columns."""
    grid, _, _ = iris_grid(0, n_row_groups=3)
    anchors = np.random.RandomState(0).uniform(0, 8, size=(40, 4))
    est = DCClustering(3, anchors=anchors, random_state=0)

    def slice_bytes(rt):
        # r x m_j float64 to every party but the coordinator.
        return sum(8 * len(anchors) * int(rt.client_widths[c]) for c in range(1, rt.n_clients))

    check_protocol(
        est,
        grid,
        rounds=1,
        bytes_up=upload_bytes(est, len(anchors)),
        bytes_down=download_bytes(est, 3),
        bytes_peer=slice_bytes,
    )
    assert est.communication_["setup_rounds"] == 1


def test_one_party_has_no_set_up():
    X = np.random.RandomState(0).normal(size=(30, 3))
    est = DCClustering(2, partition=1, random_state=0)
    check_protocol(est, X, rounds=1, bytes_up=upload_bytes(est, len(X)), bytes_peer=0)
    assert est.communication_["setup_rounds"] == 0


def test_analyst_receives_only_reduced_matrices(iris):
    """The analyst's one server step gets the uploads and public parameters only.

    No anchor, anchor seed or recipe, and no f, reaches it (§1.3, §4).
    """
    X, _ = iris
    with recording_runtime() as runtimes:
        dc = DCClustering(3, partition=HybridPartition(2, 2, random_state=0), random_state=0)
        dc.fit(X)
    runtime = runtimes[-1]
    ((step, received, public),) = runtime.server_inputs
    assert step == "dc_analyst_step"
    assert len(received) == 1 and received[0].tag == dc_module.TAG_UPLOAD
    assert set(public) == {
        "groups",
        "alignment",
        "n_components_collab",
        "clusterer",
        "n_clusters",
        "n_neighbors",
        "n_init",
        "max_iter",
        "random_state",
    }
    for party, upload in received[0].items():
        assert isinstance(upload, tuple) and len(upload) == 2
        X_tilde, anchor_tilde = upload
        # Two features per party, reduced to one dimension.
        assert X_tilde.shape == (dc.client_sizes_[party], 1)
        assert anchor_tilde.shape == (len(X), 1)
    # Nothing else crossed to the server.
    assert {m.tag for m in runtime.ledger.messages if m.receiver == SERVER} == {
        dc_module.TAG_UPLOAD
    }


def iris_grid(seed=0, n_row_groups=5):
    """Iris as a nested list: shuffled row groups x two feature blocks."""
    X, y = load_iris(return_X_y=True)
    rng = np.random.RandomState(seed)
    order = rng.permutation(len(X))
    blocks = [np.sort(b) for b in np.array_split(rng.permutation(4), 2)]
    groups = np.array_split(order, n_row_groups)
    grid = [[X[np.ix_(rows, cols)] for cols in blocks] for rows in groups]
    return grid, X[np.concatenate(groups)][:, np.concatenate(blocks)], y[np.concatenate(groups)]


@pytest.mark.parametrize("clusterer", ["kmeans", "spectral"])
def test_party_labels_equal_analyst_labels(monkeypatch, clusterer):
    """§8.7: nearest-centroid labels of the parties equal the analyst's labels."""
    grid, _, _ = iris_grid(3)
    captured = {}
    cluster = dc_module.dc_server_cluster

    def spy_cluster(X_hat, **kwargs):
        captured["result"] = cluster(X_hat, **kwargs)
        return captured["result"]

    monkeypatch.setattr(dc_module, "dc_server_cluster", spy_cluster)
    dc = DCClustering(3, clusterer=clusterer, random_state=3).fit(grid)
    # A grid numbers rows row group by row group, the analyst's stacking order.
    assert np.array_equal(dc.labels_, captured["result"][2])
    assert np.array_equal(dc.analyst_labels_, captured["result"][2])


# --------------------------------------------------------------------------- #
# Synthetic data of the paper's Experiment I (Table 2), unit-sized
# --------------------------------------------------------------------------- #
def non_iid_row_groups(y, rng):
    """Row group 0: all of class 0 and half of class 1; row group 1: the rest."""
    half = rng.permutation(np.flatnonzero(y == 1))
    first = np.concatenate([np.flatnonzero(y == 0), half[: len(half) // 2]])
    return np.isin(np.arange(len(y)), first)


@pytest.mark.parametrize("split", ["iid", "non-iid"])
def test_lossless_dc_matches_central_on_experiment_one(split):
    """§8.10: blobs (k-means) and three rings (spectral) reach ARI 1, like central."""
    rng = np.random.RandomState(0)
    rings, y_rings = three_rings(300, 0)
    major, y_blobs = make_blobs(
        450, centers=[(0, 5), (4, 0), (8, 10)], cluster_std=0.8, random_state=0
    )
    minor = rng.multivariate_normal(np.zeros(4), np.full((4, 4), 0.01) + np.eye(4) * 0.09, 450)
    blobs = np.c_[major[:, :1], minor[:, :2], major[:, 1:], minor[:, 2:]]
    for X, y, clusterer in ((blobs, y_blobs, "kmeans"), (rings, y_rings, "spectral")):
        if split == "iid":
            in_first = np.isin(np.arange(len(y)), rng.permutation(len(y))[: len(y) // 2])
        else:
            in_first = non_iid_row_groups(y, rng)
        groups = [np.flatnonzero(in_first), np.flatnonzero(~in_first)]
        grid = [[X[rows, :3], X[rows, 3:]] for rows in groups]
        dc = DCClustering(
            3,
            clusterer=clusterer,
            anchor_range="global",
            n_components_intermediate=None,
            random_state=0,
        ).fit(grid)
        assert adjusted_rand_score(y[np.concatenate(groups)], dc.labels_) == 1.0


# --------------------------------------------------------------------------- #
# Each step of the method (§2), pinned on hand-built cases
# --------------------------------------------------------------------------- #
def two_by_two_grid(seed=0, sizes=(30, 45)):
    """Two row groups x two feature blocks; row group 1 lies far from row group 0.

    Row group 0 holds clusters around 0 and 3 on every feature; row group 1
    lies 20 above it on features 0 and 2 and 20 below on features 1 and 3, so
    that no single party sees a feature's full range, and neither row group
    holds all the minima or all the maxima.
    """
    rng = np.random.RandomState(seed)
    rows, truth = [], []
    for g, n in enumerate(sizes):
        y = np.arange(n) % 2
        shift = 20.0 * g * np.array([1.0, -1.0, 1.0, -1.0])
        rows.append(shift + 3.0 * y[:, None] + rng.uniform(0, 1, size=(n, 4)))
        truth.append(y + 2 * g)
    grid = [[R[:, :2], R[:, 2:]] for R in rows]
    return grid, np.vstack(rows), np.concatenate(truth)


@contextlib.contextmanager
def recording_recipes(monkeypatch):
    """Record every anchor recipe the parties draw their anchor columns from."""
    recipes = []
    generate = dc_module.generate_anchor_columns

    def spy(recipe, columns, n_anchors):
        recipes.append(recipe)
        return generate(recipe, columns, n_anchors)

    monkeypatch.setattr(dc_module, "generate_anchor_columns", spy)
    yield recipes


@pytest.mark.parametrize("anchor_range", ["per_feature", "global"])
def test_step0_anchors_from_every_partys_range(monkeypatch, anchor_range):
    """Step 0 (§2.1): uniform anchors over [min_k, max_k] of the whole X, r = n.

    The coordinator combines every party's minima and maxima; each feature has
    its own stream, so every party regenerates the same anchor rows. The
    recipe's seed is the coordinator's private draw, not a public seed.
    """
    grid, X, _ = two_by_two_grid()
    with recording_recipes(monkeypatch) as recipes:
        dc, parties = fit_with_parties(
            DCClustering(4, anchor_range=anchor_range, random_state=0), grid
        )
    low, high = X.min(axis=0), X.max(axis=0)
    if anchor_range == "global":
        low, high = np.full(4, X.min()), np.full(4, X.max())
    # The coordinator's own columns, then every other party's from the recipe it received.
    assert len(recipes) == 4
    seed = recipes[0]["seed"]
    for recipe in recipes:
        assert recipe["seed"] == seed
        np.testing.assert_array_equal(recipe["low"], low)
        np.testing.assert_array_equal(recipe["high"], high)
    assert seed not in parties.runtime.seeds
    coordinator = Party(0, parties.runtime.seeds[0], parties.runtime._private_entropy, stream=(2,))
    assert seed == coordinator.rng.integers(np.iinfo(np.int32).max)
    expected = dc_module.generate_anchor_columns(recipes[0], np.arange(4), len(X))
    np.testing.assert_array_equal(parties.anchors, expected)
    for c in range(4):
        cols = dc.feature_blocks_[c % 2]
        np.testing.assert_array_equal(parties.states[c][dc_module.TAG_SLICE], expected[:, cols])


@pytest.mark.parametrize("anchors", ["uniform", "given"])
def test_step0_every_party_uses_the_same_anchor_rows(iris, anchors):
    """Step 0: party (i, j) reduces exactly the columns of its features of the shared anchors."""
    X, _ = iris
    given = np.random.RandomState(0).uniform(0, 8, size=(60, 4))
    dc, parties = fit_with_parties(
        DCClustering(
            3,
            anchors=given if anchors == "given" else anchors,
            partition=iris_lattice(4, n_row_groups=3),
            random_state=4,
        ),
        X,
    )
    if anchors == "given":
        np.testing.assert_array_equal(parties.anchors, given)
    uploads = upload_of(parties.runtime)
    for group in dc.row_groups_:
        for c, cols in zip(group, dc.feature_blocks_):
            np.testing.assert_allclose(
                uploads[c][1],
                parties.f(c).transform(parties.anchors[:, cols]),
                rtol=1e-10,
                atol=1e-10,
            )


def test_step1_f_is_fitted_on_the_partys_own_block_and_applied_to_the_anchors():
    """Step 1 (§2.2): f = standardise + PCA(m_j - 1) fitted on X_ij only, applied unchanged."""
    grid, _, _ = two_by_two_grid()
    dc, parties = fit_with_parties(DCClustering(4, random_state=0), grid)
    uploads = upload_of(parties.runtime)
    blocks = [block for row_group in grid for block in row_group]
    for c, X_c in enumerate(blocks):
        f = make_pipeline(StandardScaler(), PCA(n_components=X_c.shape[1] - 1))
        X_tilde, anchor_tilde = uploads[c]
        np.testing.assert_allclose(X_tilde, f.fit_transform(X_c), rtol=1e-10, atol=1e-12)
        cols = dc.feature_blocks_[c % 2]
        np.testing.assert_allclose(
            anchor_tilde, f.transform(parties.anchors[:, cols]), rtol=1e-10, atol=1e-12
        )


def hand_built_uploads(seed=0, widths=((1, 2), (2, 1), (1, 1)), sizes=(5, 7, 6), n_anchors=12):
    """Random (X_tilde, anchor_tilde) pairs for three row groups of two parties."""
    rng = np.random.RandomState(seed)
    uploads, groups = {}, []
    for i, (pair, n_i) in enumerate(zip(widths, sizes)):
        groups.append([2 * i, 2 * i + 1])
        for c, w in zip(groups[-1], pair):
            uploads[c] = (rng.normal(size=(n_i, w)), rng.normal(size=(n_anchors, w)))
    return uploads, groups


def test_step2_analyst_joins_the_blocks_of_each_row_group_in_block_order():
    """Step 2 (§2.3): X_tilde_i = [X_tilde_i1, X_tilde_i2], same for the anchors."""
    uploads, groups = hand_built_uploads()
    X_hat, target, maps, _ = dc_module.dc_server_collaborate(
        uploads, groups, alignment="linear", n_components_collab=3
    )
    for i, group in enumerate(groups):
        X_i = np.hstack([uploads[c][0] for c in group])
        A_i = np.hstack([uploads[c][1] for c in group])
        # The map solves the row group's own joined anchors, and maps its joined data.
        assert maps[i].shape == (A_i.shape[1], 3)
        np.testing.assert_allclose(maps[i], np.linalg.pinv(A_i) @ target, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(X_hat[i], X_i @ maps[i], rtol=1e-9, atol=1e-12)


def _target(uploads, groups, dim, affine=False):
    """Leading left singular vectors of B = [A_1, (1), A_2, (1), ...], signs of the SVD."""
    blocks = []
    for group in groups:
        A_i = np.hstack([uploads[c][1] for c in group])
        blocks.append(augmented(A_i) if affine else A_i)
    return np.linalg.svd(np.hstack(blocks), full_matrices=False)[0][:, :dim]


def _match_signs(target, reference):
    """``target`` with each column's sign flipped to agree with ``reference``."""
    signs = np.sign(np.einsum("ij,ij->j", target, reference))
    return target * signs


@pytest.mark.parametrize("alignment", ["affine", "linear"])
def test_step3_target_maps_and_collaborative_representation(alignment):
    """Step 3 (§2.4), items 1-5 of both variants, on hand-built uploads.

    1. B stacks the joined anchors (each followed by a column of ones if affine);
    2. the target is B's leading m_hat left singular vectors, m_hat = min_i m_tilde_i (+1);
    3. G_i = pinv([A_i, 1]) U_1 (or pinv(A_i) U_1);
    4. X_hat_i = [X_tilde_i, 1] G_i (or X_tilde_i G_i);
    5. the row groups are stacked in order (pinned end to end by step 5's test).
    """
    affine = alignment == "affine"
    uploads, groups = hand_built_uploads()
    X_hat, target, maps, errors = dc_module.dc_server_collaborate(
        uploads, groups, alignment=alignment, n_components_collab="auto"
    )
    # m_tilde_i = 3, 3, 2: m_hat = 2 + 1 (affine) or 2 (linear).
    dim = 3 if affine else 2
    assert target.shape == (12, dim)
    expected = _target(uploads, groups, dim, affine=affine)
    np.testing.assert_allclose(np.abs(np.einsum("ij,ij->j", target, expected)), 1.0, rtol=1e-10)
    target = _match_signs(target, expected)
    for i, group in enumerate(groups):
        X_i = np.hstack([uploads[c][0] for c in group])
        A_i = np.hstack([uploads[c][1] for c in group])
        if affine:
            X_i, A_i = augmented(X_i), augmented(A_i)
        G_i = np.linalg.pinv(A_i) @ target
        signs = np.sign(np.einsum("ij,ij->j", maps[i], G_i))
        np.testing.assert_allclose(maps[i] * signs, G_i, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(X_hat[i] * signs, X_i @ G_i, rtol=1e-9, atol=1e-12)
        assert np.isclose(errors[i], np.linalg.norm(A_i @ G_i - target))


def many_minima_blobs():
    """Five tight blobs, two pairs of them close: k-means has local minima."""
    rng = np.random.RandomState(0)
    centers = np.array([[0, 0], [0, 1.0], [6, 0], [6, 1.0], [3, 8]])
    return np.vstack([c + rng.normal(scale=0.15, size=(20, 2)) for c in centers])


def test_step4_kmeans_with_ten_restarts_on_the_collaborative_representation():
    """Step 4 (§2.5), k-means: Z = X_hat, KMeans(k, n_init=10, max_iter) on it.

    With this seed a single k-means run ends in a local minimum; the best of
    ten restarts does not.
    """
    X_hat = many_minima_blobs()
    Z, centers, labels, n_iter = dc_module.dc_server_cluster(
        X_hat,
        clusterer="kmeans",
        n_clusters=5,
        n_neighbors=None,
        n_init=10,
        max_iter=300,
        random_state=np.random.RandomState(9),
    )
    expected = KMeans(5, n_init=10, max_iter=300, random_state=9).fit(X_hat)
    assert Z is X_hat
    np.testing.assert_array_equal(centers, expected.cluster_centers_)
    np.testing.assert_array_equal(labels, expected.labels_)
    assert n_iter == expected.n_iter_
    single = KMeans(5, n_init=1, max_iter=300, random_state=9).fit(X_hat)
    assert single.inertia_ > 2 * expected.inertia_


def test_step4_spectral_graph_embedding_and_kmeans(monkeypatch):
    """Step 4 (§2.5), spectral, items 1-4.

    1. W = 0.5 (A + A^T) with A the binary kNN graph including each point;
    2-3. Z = the k leading eigenvectors of the normalised Laplacian, as
         spectral_embedding(W, k, drop_first=False) gives them;
    4. k-means (n_init=10) on Z, drawing from the same random state.

    With this seed a single k-means run on Z ends in a local minimum.
    """
    X_hat, _ = make_blobs(120, centers=6, cluster_std=1.5, random_state=0)
    seen = {}
    embed = dc_analyst.spectral_embedding

    def spy(affinity, **kwargs):
        seen["affinity"] = affinity
        return embed(affinity, **kwargs)

    monkeypatch.setattr(dc_analyst, "spectral_embedding", spy)
    Z, centers, labels, _ = dc_module.dc_server_cluster(
        X_hat,
        clusterer="spectral",
        n_clusters=6,
        n_neighbors=6,
        n_init=10,
        max_iter=300,
        random_state=np.random.RandomState(2),
    )
    A = kneighbors_graph(X_hat, n_neighbors=6, include_self=True)
    dense = A.toarray()
    assert set(np.unique(dense)) == {0.0, 1.0} and (np.diag(dense) == 1).all()
    np.testing.assert_array_equal(seen["affinity"].toarray(), 0.5 * (dense + dense.T))
    rs = np.random.RandomState(2)
    expected_Z = embed(0.5 * (A + A.T), n_components=6, drop_first=False, random_state=rs)
    np.testing.assert_allclose(Z, expected_Z, rtol=1e-8, atol=1e-10)
    state = rs.get_state()
    expected_centers, expected_labels, inertia = k_means(
        Z, 6, n_init=10, max_iter=300, random_state=rs
    )
    np.testing.assert_array_equal(centers, expected_centers)
    np.testing.assert_array_equal(labels, expected_labels)
    rs.set_state(state)
    assert k_means(Z, 6, n_init=1, max_iter=300, random_state=rs)[2] > 1.5 * inertia


@pytest.mark.parametrize("clusterer", ["kmeans", "spectral"])
def test_step5_each_party_gets_the_centroids_and_its_row_groups_rows(monkeypatch, clusterer):
    """Step 5 (§2.6), and step 3 item 5 (row groups stacked in order).

    The analyst splits Z by row group and sends (theta, Z_i) to every party of
    row group i; each labels its samples by the nearest centroid, so the two
    parties of a row group agree with each other and with the analyst.
    Row groups of different sizes hold different clusters: a row group given
    another's rows, or the analyst's rows stacked in another order, mislabels
    them.
    """
    grid, _, truth = two_by_two_grid(sizes=(30, 46))
    captured = {}
    cluster = dc_module.dc_server_cluster

    def spy_cluster(X_hat, **kwargs):
        captured["X_hat"] = X_hat
        captured["result"] = cluster(X_hat, **kwargs)
        return captured["result"]

    monkeypatch.setattr(dc_module, "dc_server_cluster", spy_cluster)
    with recording_downloads(monkeypatch) as (runtimes, sent):
        dc = DCClustering(
            4,
            clusterer=clusterer,
            n_components_intermediate=None,
            anchor_range="global",
            n_neighbors=5,
            random_state=0,
        ).fit(grid)
    Z, centers, analyst_labels, _ = captured["result"]
    ((tag, downloads),) = sent
    assert tag == dc_module.TAG_DOWNLOAD
    bounds = [0, 30, 76]
    for i, group in enumerate(dc.row_groups_):
        for c in group:
            theta, Z_i = downloads[c]
            np.testing.assert_array_equal(theta, centers)
            np.testing.assert_array_equal(Z_i, Z[bounds[i] : bounds[i + 1]])
    # One party per row group hands the labels to its user: the first.
    outputs = runtimes[-1].party_outputs()
    for i, group in enumerate(dc.row_groups_):
        np.testing.assert_array_equal(
            outputs[group[0]]["labels"], analyst_labels[bounds[i] : bounds[i + 1]]
        )
        assert all("labels" not in outputs[c] for c in group[1:])
    # A grid numbers rows row group by row group, the analyst's stacking order.
    np.testing.assert_array_equal(dc.labels_, analyst_labels)
    np.testing.assert_array_equal(dc.collaborative_representation_, captured["X_hat"])
    assert adjusted_rand_score(truth, dc.labels_) == 1.0


# --------------------------------------------------------------------------- #
# Stability at large offsets
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("clusterer", ["kmeans", "spectral"])
def test_offset_of_1_7e9_leaves_labels_unchanged(clusterer):
    """Adding 1.7e9 (a Unix timestamp) to every value changes no label."""
    grid, _, _ = iris_grid(2, n_row_groups=2)
    shifted = [[block + 1.7e9 for block in row_group] for row_group in grid]
    plain = DCClustering(3, clusterer=clusterer, random_state=0).fit(grid)
    offset = DCClustering(3, clusterer=clusterer, random_state=0).fit(shifted)
    assert adjusted_rand_score(plain.labels_, offset.labels_) == 1.0
    groups = np.repeat([0, 1], [len(g[0]) for g in grid])
    if clusterer == "kmeans":
        X_shifted = np.vstack([np.hstack(row_group) for row_group in shifted])
        np.testing.assert_array_equal(offset.predict(X_shifted, row_group=groups), offset.labels_)


# --------------------------------------------------------------------------- #
# Input forms, invariances, predict
# --------------------------------------------------------------------------- #
def test_grid_equals_hybrid_partition_of_pooled_data():
    grid, X_stacked, _ = iris_grid(4, n_row_groups=3)
    sizes = [len(g[0]) for g in grid]
    groups = np.repeat(np.arange(3), sizes)
    from_grid = DCClustering(3, random_state=0).fit(grid)
    # The same lattice from pooled rows: client ids per row and contiguous blocks.
    partition = HybridPartition(
        feature_blocks=[[0, 1], [2, 3]],
        row_partition=_FixedRows([np.flatnonzero(groups == g) for g in range(3)]),
    )
    from_pooled = DCClustering(3, partition=partition, random_state=0).fit(X_stacked)
    np.testing.assert_allclose(
        from_grid.collaborative_representation_, from_pooled.collaborative_representation_
    )


class _FixedRows:
    """A horizontal partition specification with given row groups."""

    splits_features = False

    def __init__(self, rows):
        self.rows = rows

    def get_n_clients(self, X=None, y=None):
        return len(self.rows)

    def split(self, X, y=None):
        yield from self.rows

    def _layout(self, X, y=None, random_state=None):
        return self.rows, None, None


def test_client_list_and_client_ids_are_row_groups(iris):
    X, _ = iris
    ids = np.random.RandomState(0).randint(3, size=len(X))
    by_ids = DCClustering(3, random_state=0).fit(X, client_ids=ids)
    assert by_ids.row_groups_ == [[0], [1], [2]]
    clients = [X[ids == g] for g in range(3)]
    by_list = DCClustering(3, random_state=0).fit(clients)
    # The analyst stacks the row groups in order: the same rows either way.
    np.testing.assert_allclose(
        by_ids.collaborative_representation_, by_list.collaborative_representation_
    )
    order = np.concatenate([np.flatnonzero(ids == g) for g in range(3)])
    np.testing.assert_array_equal(by_ids.labels_[order], by_list.labels_)


def test_vertical_partition_is_one_row_group(iris):
    X, _ = iris
    dc = DCClustering(3, partition=VerticalPartition(2), random_state=0).fit(X)
    assert dc.row_groups_ == [[0, 1]]
    assert dc.n_components_intermediate_.tolist() == [1, 1]


def test_invariant_to_n_jobs(iris):
    X, _ = iris
    kwargs = dict(partition=iris_lattice(5, n_row_groups=3), random_state=5)
    one = DCClustering(3, n_jobs=1, **kwargs).fit(X)
    two = DCClustering(3, n_jobs=2, **kwargs).fit(X)
    assert np.array_equal(one.labels_, two.labels_)
    np.testing.assert_array_equal(
        one.collaborative_representation_, two.collaborative_representation_
    )


def test_geometry_invariant_to_row_group_order():
    """Reordering the row groups permutes B's columns: same target up to signs."""
    grid, _, _ = iris_grid(6, n_row_groups=4)
    anchors = np.random.RandomState(0).uniform(0, 8, size=(150, 4))
    forward = DCClustering(3, anchors=anchors, random_state=0).fit(grid)
    backward = DCClustering(3, anchors=anchors, random_state=0).fit(grid[::-1])
    sizes = [len(g[0]) for g in grid]
    bounds = np.cumsum([0] + sizes)
    # Rows of the reversed grid, mapped back to the forward order.
    back_bounds = np.cumsum([0] + sizes[::-1])
    order = np.concatenate([np.arange(back_bounds[3 - g], back_bounds[4 - g]) for g in range(4)])
    assert bounds[-1] == len(order)
    d_forward = pdist(forward.collaborative_representation_)
    d_backward = pdist(backward.collaborative_representation_[order])
    np.testing.assert_allclose(d_forward, d_backward, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("clusterer", ["kmeans", "spectral"])
def test_predict_on_training_rows(clusterer):
    grid, X, _ = iris_grid(7, n_row_groups=3)
    dc = DCClustering(3, clusterer=clusterer, random_state=0).fit(grid)
    groups = np.repeat(np.arange(3), [len(g[0]) for g in grid])
    predicted = dc.predict(X, row_group=groups)
    if clusterer == "kmeans":
        assert np.array_equal(predicted, dc.labels_)
    else:
        assert (predicted == dc.labels_).mean() > 0.9


def test_one_party_passes_check_estimator():
    results = check_estimator(DCClustering(partition=1), on_fail=None)
    for result in results:
        assert result["status"] != "failed", (result["check_name"], result["exception"])


# --------------------------------------------------------------------------- #
# Bad input
# --------------------------------------------------------------------------- #
def test_ragged_blocks_and_layout_errors():
    X = np.random.RandomState(0).normal(size=(40, 5))
    with pytest.raises(ValueError, match="feature blocks of row group 0 must hold the same rows"):
        DCClustering(2).fit([[X[:20, :2], X[:19, 2:]], [X[20:, :2], X[20:, 2:]]])
    with pytest.raises(ValueError, match="same features in the same block layout.*3 feature"):
        DCClustering(2).fit([[X[:20, :2], X[:20, 2:]], [X[20:, :2], X[20:, 2:4], X[20:, 4:]]])
    with pytest.raises(ValueError, match="same features in the same block layout.*widths"):
        DCClustering(2).fit([[X[:20, :2], X[:20, 2:]], [X[20:, :3], X[20:, 3:]]])


def test_too_few_anchors():
    X = np.random.RandomState(0).normal(size=(40, 6))
    with pytest.raises(ValueError, match="n_anchors=4 is below the dimension of row group 0"):
        DCClustering(2, n_anchors=4, random_state=0).fit(X)
    with pytest.raises(ValueError, match="anchors has 3 features but the data has 6"):
        DCClustering(2, anchors=np.zeros((50, 3)), random_state=0).fit(X)


def test_single_feature_party_warns_and_keeps_its_feature():
    X = np.random.RandomState(0).normal(size=(40, 3))
    with pytest.warns(UserWarning, match=r"party \(0, 1\) holds a single feature"):
        dc = DCClustering(2, partition=VerticalPartition(feature_blocks=[[0, 1], [2]])).fit(X)
    assert dc.n_components_intermediate_.tolist() == [1, 1]


def test_intermediate_dimension_errors():
    X = np.random.RandomState(0).normal(size=(40, 4))
    with pytest.raises(ValueError, match="n_components_intermediate=3 exceeds the 2 features"):
        DCClustering(2, n_components_intermediate=3, partition=HybridPartition(2, 2)).fit(X)
    with pytest.raises(ValueError, match="n_components_collab=9 must lie in"):
        DCClustering(2, n_components_collab=9, partition=2).fit(X)


def test_lossy_default_keeps_one_dimension_less_per_party(iris):
    X, _ = iris
    dc = DCClustering(3, partition=HybridPartition(2, 2, random_state=0), random_state=0).fit(X)
    assert dc.n_components_intermediate_.tolist() == [1, 1, 1, 1]
    assert dc.n_components_collab_ == 3  # min_i m_tilde_i + 1
    linear = DCClustering(3, alignment="linear", partition=dc.partition, random_state=0).fit(X)
    assert linear.n_components_collab_ == 2
    assert linear.collaboration_maps_[0].shape == (2, 2)


def test_given_anchors_are_copied():
    """The parties' anchor columns do not share memory with the caller's array."""
    X = np.random.RandomState(0).normal(size=(40, 4))
    anchors = np.random.RandomState(1).uniform(-2, 2, size=(50, 4))
    dc, parties = fit_with_parties(DCClustering(2, anchors=anchors, random_state=0), X)
    kept = parties.anchors
    for state in parties.states:
        assert not np.shares_memory(state[dc_module.TAG_SLICE], anchors)
    anchors[:] = 0.0
    np.testing.assert_array_equal(parties.anchors, kept)


def test_predict_rejects_bad_row_groups_and_widths():
    grid, X, _ = iris_grid(7, n_row_groups=3)
    dc = DCClustering(3, random_state=0).fit(grid)
    with pytest.raises(ValueError, match=r"row_group 3 is out of range: the model has 3 row"):
        dc.predict(X, row_group=3)
    with pytest.raises(ValueError, match=r"row_group -1 is out of range"):
        dc.predict(X, row_group=np.r_[np.zeros(len(X) - 1, int), -1])
    with pytest.raises(ValueError, match=r"one int per row of X: X has 150 rows but row_group"):
        dc.predict(X, row_group=[0, 1])
    with pytest.raises(ValueError, match=r"one int per row of X"):
        dc.predict(X, row_group=[[0]])
    with pytest.raises(ValueError, match="row_group must be integers"):
        dc.predict(X, row_group=np.zeros(len(X)))
    with pytest.raises(ValueError, match="X has 3 features, but DCClustering is expecting 4"):
        dc.predict(X[:, :3], row_group=1)


@pytest.mark.parametrize(
    ("empty", "match"),
    [
        ([], "row group 1 of the grid holds no feature block"),
        ((), "row group 1 of the grid holds no feature block"),
        ("no rows", r"party \(1, 0\) holds no samples"),
    ],
)
def test_grid_with_an_empty_row_group(empty, match):
    X = np.random.RandomState(0).normal(size=(40, 4))
    if empty == "no rows":
        empty = [X[:0, :2], X[:0, 2:]]
    with pytest.raises(ValueError, match=match):
        DCClustering(2).fit([[X[:20, :2], X[:20, 2:]], empty])


def test_grid_whose_first_row_group_is_empty():
    X = np.random.RandomState(0).normal(size=(40, 4))
    with pytest.raises(ValueError, match="row group 0 of the grid holds no feature block"):
        DCClustering(2).fit([[], [X[:20, :2], X[:20, 2:]]])


# --------------------------------------------------------------------------- #
# Private randomness, what the estimator holds, predict with the parties
# --------------------------------------------------------------------------- #
def entropy_runtime(entropy):
    """A runtime factory whose parties get the private entropy ``entropy``."""

    def factory(federation, **kwargs):
        return RecordingRuntime(federation, **{**kwargs, "private_entropy": entropy})

    return factory


def test_private_maps_and_anchors_come_from_the_parties_generators(monkeypatch):
    """Same random_state: the fit reproduces. Other private entropy (as on nodes that
    draw their own): other private maps and anchors, the same public choices."""
    grid, _, _ = two_by_two_grid()

    def fit(factory=RecordingRuntime):
        RecordingRuntime.instances = []
        with recording_recipes(monkeypatch) as recipes, use_runtime(factory):
            dc = DCClustering(4, intermediate=RotateShift(), random_state=0).fit(grid)
        runtime = RecordingRuntime.instances[-1]
        return dc, runtime, recipes[0], Parties(runtime, dc)

    first, second, other = fit(), fit(), fit(entropy_runtime([1, 2, 3]))
    np.testing.assert_array_equal(first[0].labels_, second[0].labels_)
    assert first[2]["seed"] == second[2]["seed"]
    for c in range(4):
        np.testing.assert_array_equal(first[3].f(c).rotation_, second[3].f(c).rotation_)
        np.testing.assert_array_equal(upload_of(first[1])[c][0], upload_of(second[1])[c][0])
    # Other private entropy: every party's map and the anchors change ...
    assert other[2]["seed"] != first[2]["seed"]
    for c in range(4):
        assert not np.allclose(other[3].f(c).rotation_, first[3].f(c).rotation_)
        assert not np.allclose(upload_of(other[1])[c][0], upload_of(first[1])[c][0])
    # ... while the public choices stay: the parties' public seeds and the lattice.
    np.testing.assert_array_equal(other[1].seeds, first[1].seeds)
    assert other[0].row_groups_ == first[0].row_groups_
    # The lossless geometry does not depend on f: the same clustering.
    assert adjusted_rand_score(other[0].labels_, first[0].labels_) == 1.0


def test_the_estimator_holds_what_the_analyst_holds():
    """No anchors and no private map among the fitted attributes."""
    grid, _, _ = two_by_two_grid()
    dc = DCClustering(4, random_state=0).fit(grid)
    for name in ("anchors_", "intermediate_transformers_"):
        assert not hasattr(dc, name)
    fitted = {k: v for k, v in vars(dc).items() if k.endswith("_") and not k.startswith("_")}

    def holds_a_map(value):
        if isinstance(value, BaseEstimator):
            return True
        if isinstance(value, (list, tuple)):
            return any(holds_a_map(v) for v in value)
        return False

    assert not any(holds_a_map(v) for v in fitted.values())


def test_predict_is_a_protocol_with_the_parties(monkeypatch):
    """The parties of row groups with new rows upload f(X_new), n_new_i x m_tilde_ij
    float64; the analyst sends each of them its rows' labels; nothing else moves."""
    grid, X, _ = iris_grid(7, n_row_groups=3)
    dc = DCClustering(3, random_state=0).fit(grid)
    monkeypatch.setattr(dc_module, "InProcessRuntime", RecordingRuntime)
    RecordingRuntime.instances = []
    rows = np.r_[0:10, 120:150]
    groups = np.repeat(np.arange(3), [len(g[0]) for g in grid])[rows]
    predicted = dc.predict(X[rows], row_group=groups)
    np.testing.assert_array_equal(predicted, dc.labels_[rows])
    (runtime,) = RecordingRuntime.instances
    ((step, received, public),) = runtime.server_inputs
    assert step == "dc_analyst_predict"
    assert [r.tag for r in received] == [dc_module.TAG_PREDICT_UP]
    # Row group 1 has no new rows: its parties take no part.
    present = [c for i in (0, 2) for c in dc.row_groups_[i]]
    assert sorted(received[0]) == present
    n_new = {c: int((groups == i).sum()) for i in (0, 2) for c in dc.row_groups_[i]}
    report = runtime.ledger.report()
    assert report["bytes_up"] == sum(
        8 * n_new[c] * int(dc.n_components_intermediate_[c]) for c in present
    )
    assert report["bytes_down"] == sum(8 * n_new[c] for c in present)
    assert report["bytes_peer"] == 0
    # Predicting changed nothing the model holds, nor what its parties kept.
    np.testing.assert_array_equal(dc.predict(X[rows], row_group=groups), predicted)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_pickled_or_copied_model_predicts_with_the_parties_of_its_session(how):
    grid, X, _ = iris_grid(7, n_row_groups=3)
    dc = DCClustering(3, random_state=0).fit(grid)
    expected = dc.predict(X, row_group=0)
    copied = pickle.loads(pickle.dumps(dc)) if how == "pickle" else copy.deepcopy(dc)
    np.testing.assert_array_equal(copied.predict(X, row_group=0), expected)
    # Predicting from the copy changed nothing of the original's parties.
    np.testing.assert_array_equal(dc.predict(X, row_group=0), expected)


def test_the_server_model_holds_no_private_map_and_refuses_predict():
    grid, X, _ = iris_grid(7, n_row_groups=3)
    dc = DCClustering(3, random_state=0).fit(grid)
    assert b"StandardScaler" in pickle.dumps(dc)
    server = dc.server_model()
    blob = pickle.dumps(server)
    # The parties' private maps (scalers and PCA or random projections) are not in it.
    assert b"StandardScaler" not in blob and b"PCA" not in blob
    assert server.session_ is None and dc.session_ is not None
    np.testing.assert_array_equal(server.cluster_centers_, dc.cluster_centers_)
    np.testing.assert_array_equal(server.labels_, dc.labels_)
    for model in (server, pickle.loads(blob)):
        with pytest.raises(RuntimeError, match="server's copy"):
            model.predict(X, row_group=0)
    # The original still predicts.
    dc.predict(X, row_group=0)


def test_grid_of_dataframes_sets_or_refuses_feature_names():
    pd = pytest.importorskip("pandas")
    grid, X, _ = iris_grid(1, n_row_groups=2)
    names = [["a", "b"], ["c", "d"]]
    frames = [[pd.DataFrame(b, columns=n) for b, n in zip(group, names)] for group in grid]
    dc = DCClustering(3, random_state=0).fit(frames)
    np.testing.assert_array_equal(dc.feature_names_in_, ["a", "b", "c", "d"])
    plain = DCClustering(3, random_state=0).fit(grid)
    np.testing.assert_array_equal(dc.labels_, plain.labels_)
    dc.predict(pd.DataFrame(X, columns=["a", "b", "c", "d"]), row_group=0)
    frames[1][1] = pd.DataFrame(grid[1][1], columns=["d", "c"])
    with pytest.raises(
        ValueError, match=r"feature block 1 has columns \['d', 'c'\] in row group 1"
    ):
        DCClustering(3, random_state=0).fit(frames)
    frames[1][1] = grid[1][1]
    with pytest.raises(ValueError, match="some parties of the grid are DataFrames"):
        DCClustering(3, random_state=0).fit(frames)
