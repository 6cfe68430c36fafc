"""Metrics on hand-computed values."""

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from skfedclust.metrics import centroid_distance, clustering_accuracy, kappa, purity


def test_clustering_accuracy_hand_values():
    assert clustering_accuracy([0, 0, 1, 1], [5, 5, 7, 7]) == 1.0
    # Best map: cluster 1 -> class 0 (2 right), cluster 0 -> class 2 (1 right), 3 of 6.
    assert clustering_accuracy([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 0]) == pytest.approx(4 / 6)
    # More clusters than classes: the extra cluster counts as wrong.
    assert clustering_accuracy([0, 0, 0, 1], [0, 0, 2, 1]) == 0.75


def test_kappa_equal_counts_is_kappa_after_best_map():
    y_true = [0, 0, 0, 1, 1, 1, 2, 2]
    y_pred = [2, 2, 1, 0, 0, 0, 1, 1]
    mapped = [0, 0, 2, 1, 1, 1, 2, 2]
    assert kappa(y_true, y_pred) == pytest.approx(cohen_kappa_score(y_true, mapped))


def test_kappa_perfect_and_dbscan_noise():
    assert kappa([0, 0, 1, 1], [1, 1, 0, 0]) == 1.0
    # Noise label -1 is an ordinary cluster; with 3 clusters for 2 classes the
    # unmatched cluster gets a label no class has (padding quirk).
    y_true = np.array([0, 0, 0, 1, 1, 1])
    y_pred = np.array([-1, 0, 0, 1, 1, 1])
    # Hand computation: cluster 0 -> class 0, cluster 1 -> class 1, noise -> dummy 2.
    mapped = np.array([2, 0, 0, 1, 1, 1])
    assert kappa(y_true, y_pred) == pytest.approx(cohen_kappa_score(y_true, mapped))
    # p_o = 5/6, p_e = (3*2 + 3*3)/36 = 15/36 -> kappa = (5/6 - 15/36) / (1 - 15/36)
    assert kappa(y_true, y_pred) == pytest.approx((5 / 6 - 15 / 36) / (1 - 15 / 36))


def test_purity_both_averages():
    y_true = [0, 0, 1, 1, 1, 2]
    y_pred = [0, 0, 0, 1, 1, 1]
    assert purity(y_true, y_pred) == pytest.approx(4 / 6)
    assert purity(y_true, y_pred, average="cluster") == pytest.approx((2 / 3 + 2 / 3) / 2)
    with pytest.raises(ValueError, match="average"):
        purity(y_true, y_pred, average="mean")


def test_centroid_distance_matches_and_handles_fewer_centers():
    true = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    found = np.array([[0.0, 11.0], [1.0, 0.0], [10.0, 2.0]])
    assert centroid_distance(true, found) == pytest.approx(np.sqrt(1 + 1 + 4))
    assert centroid_distance(true, found[:2]) == pytest.approx(np.sqrt(1 + 1))
    with pytest.raises(ValueError, match="dimensions"):
        centroid_distance(true, np.zeros((3, 3)))


def test_label_length_mismatch():
    with pytest.raises(ValueError):
        clustering_accuracy([0, 1], [0])


# --------------------------------------------------------------------------- #
# Federated internal indices
# --------------------------------------------------------------------------- #
from sklearn.cluster import KMeans  # noqa: E402
from sklearn.datasets import make_blobs  # noqa: E402
from sklearn.metrics import (  # noqa: E402
    calinski_harabasz_score,
    davies_bouldin_score,
    silhouette_score,
)

from skfedclust import KFed  # noqa: E402
from skfedclust.clusterers import nearest_center  # noqa: E402
from skfedclust.federation import Federation, InProcessRuntime, Reply, releases_nothing  # noqa: E402
from skfedclust.metrics import (  # noqa: E402
    federated_score,
    secure_calinski_harabasz,
    secure_davies_bouldin,
    secure_simplified_silhouette,
    simplified_silhouette_score,
)
from skfedclust.utils.protocol_checks import RecordingRuntime  # noqa: E402

PROTOCOLS = {
    "calinski_harabasz": secure_calinski_harabasz,
    "davies_bouldin": secure_davies_bouldin,
    "silhouette": secure_simplified_silhouette,
}


def _federation(X, n_clients, *, seed=0, cls=InProcessRuntime):
    rows = np.array_split(np.random.RandomState(seed).permutation(len(X)), n_clients)
    fed = Federation(X, rows)
    fed.spawn_seeds(np.random.RandomState(seed))
    return rows, cls(fed, private_entropy=[seed])


def _pooled(X, labels, centers, criterion):
    if criterion == "calinski_harabasz":
        return calinski_harabasz_score(X, labels)
    if criterion == "davies_bouldin":
        return davies_bouldin_score(X, labels)
    return simplified_silhouette_score(X, labels, centers)


@pytest.mark.parametrize("criterion", list(PROTOCOLS))
@pytest.mark.parametrize("n_clients", [3, 4, 8])
@pytest.mark.parametrize("kind", ["kmeans", "perturbed"])
def test_federated_indices_equal_the_pooled_ones(criterion, n_clients, kind):
    X, _ = make_blobs(400, n_features=3, centers=4, cluster_std=1.5, random_state=1)
    centers = KMeans(4, n_init=10, random_state=0).fit(X).cluster_centers_
    if kind == "perturbed":
        # Not the cluster means: CH and DB still use the labels' means, as
        # scikit-learn does; the centers only label the rows.
        centers = centers + np.random.RandomState(3).normal(0, 0.5, centers.shape)
    labels = nearest_center(X, centers)
    _, runtime = _federation(X, n_clients)
    got = PROTOCOLS[criterion](runtime, centers, random_state=0)
    assert got == pytest.approx(_pooled(X, labels, centers, criterion), rel=1e-9)


@pytest.mark.parametrize("criterion", list(PROTOCOLS))
def test_federated_indices_are_exact_at_a_large_offset(criterion):
    X, _ = make_blobs(300, n_features=2, centers=3, random_state=2)
    centers = KMeans(3, n_init=10, random_state=0).fit(X).cluster_centers_
    far, far_centers = X + 1.7e9, centers + 1.7e9
    _, runtime = _federation(far, 4)
    got = PROTOCOLS[criterion](runtime, far_centers, random_state=0)
    # scikit-learn on the stored rows moved back (exactly: they are close to
    # the offset); the indices are translation invariant.
    back, back_centers = far - 1.7e9, far_centers - 1.7e9
    labels = nearest_center(back, back_centers)
    assert got == pytest.approx(_pooled(back, labels, back_centers, criterion), rel=1e-9)


@releases_nothing
def keep_first_coordinate_labels(data, inbox, state, party):
    return Reply(keep={"my labels": (data[:, 0] > 0).astype(np.intp)})


@pytest.mark.parametrize("criterion", list(PROTOCOLS))
def test_labels_the_clients_kept(criterion):
    X, _ = make_blobs(300, n_features=2, centers=[[-3, 0], [3, 0], [4, 4]], random_state=0)
    labels = (X[:, 0] > 0).astype(np.intp)
    centers = np.array([[-1.0, 5.0], [1.0, -5.0]])  # far from the clusters' means
    rows, runtime = _federation(X, 3)
    runtime.run(keep_first_coordinate_labels, tag="labels")
    got = PROTOCOLS[criterion](runtime, centers, labels_key="my labels", random_state=0)
    assert got == pytest.approx(_pooled(X, labels, centers, criterion), rel=1e-9)


def test_simplified_silhouette_by_hand_and_against_scikit_learn():
    X = np.array([[0.0], [1.0], [4.0], [6.0]])
    labels, centers = np.array([0, 0, 1, 1]), np.array([[0.5], [5.0]])
    # a = 0.5, 0.5, 1, 1; b = 5, 4, 3.5, 5.5
    expected = np.mean([4.5 / 5, 3.5 / 4, 2.5 / 3.5, 4.5 / 5.5])
    assert simplified_silhouette_score(X, labels, centers) == pytest.approx(expected)
    # scikit-learn's silhouette averages the distances to every member instead.
    assert silhouette_score(X, labels) != pytest.approx(expected)
    # A row on two centers at once, and both centers on it: 0, not NaN.
    assert simplified_silhouette_score([[1.0], [1.0]], [0, 1], [[1.0], [1.0]]) == 0.0
    with pytest.raises(ValueError, match="at least 2 centers"):
        simplified_silhouette_score(X, np.zeros(4, int), centers[:1])
    with pytest.raises(ValueError, match="index the centers"):
        simplified_silhouette_score(X, [0, 0, 1, 2], centers)


def test_one_cluster_is_refused_as_scikit_learn_does():
    X, _ = make_blobs(60, centers=[[0, 0]], random_state=0)
    _, runtime = _federation(X, 3)
    centers = np.array([[0.0, 0.0], [100.0, 100.0]])
    with pytest.raises(ValueError, match="Number of labels is 1"):
        secure_calinski_harabasz(runtime, centers, random_state=0)
    with pytest.raises(ValueError, match="at least 2 centers"):
        secure_simplified_silhouette(runtime, centers[:1], random_state=0)


def test_the_server_gets_only_masked_vectors_and_the_rounds_are_documented():
    X, _ = make_blobs(200, centers=3, random_state=0)
    centers = KMeans(3, n_init=10, random_state=0).fit(X).cluster_centers_
    expected_rounds = {"calinski_harabasz": 8, "davies_bouldin": 10, "silhouette": 2}
    for criterion, protocol in PROTOCOLS.items():
        _, runtime = _federation(X, 5, cls=RecordingRuntime)
        protocol(runtime, centers, random_state=0)
        assert {name for name, _, _ in runtime.server_inputs} == {"unmask_sum"}
        report = runtime.ledger.report()
        assert report["rounds"] == expected_rounds[criterion], criterion
        assert report["setup_rounds"] == 1


def test_federated_score_of_a_fitted_estimator():
    X, y = make_blobs(300, centers=3, random_state=0)
    est = KFed(3, partition=3, random_state=0).fit(X)
    for criterion in PROTOCOLS:
        result = federated_score(est, X, criterion=criterion)
        pooled = _pooled(X, est.labels_, est.cluster_centers_, criterion)
        assert result.score == pytest.approx(pooled, rel=1e-9)
        assert result.communication["bytes_up"] > 0
    ids = np.arange(300) % 4
    est = KFed(3, random_state=0).fit(X, client_ids=ids)
    result = federated_score(est, X, client_ids=ids)
    assert result.score == pytest.approx(calinski_harabasz_score(X, est.labels_), rel=1e-9)
    assert result.communication["per_client"]["bytes_up"].shape == (4,)
    with pytest.raises(ValueError, match="criterion must be one of"):
        federated_score(est, X, criterion="gap")


def _exact_indices(X, labels):
    """Calinski-Harabasz and Davies-Bouldin in exact rational arithmetic (small data)."""
    import math
    from fractions import Fraction

    ks = np.unique(labels)
    rows = {k: [[Fraction(v) for v in r] for r in X[labels == k]] for k in ks}
    means = {k: [sum(col) / len(rows[k]) for col in zip(*rows[k])] for k in ks}
    grand = [sum(Fraction(v) for v in X[:, j]) / len(X) for j in range(X.shape[1])]

    def sq(a, b):
        return sum((x - y) ** 2 for x, y in zip(a, b))

    within = sum(sq(r, means[k]) for k in ks for r in rows[k])
    between = sum(len(rows[k]) * sq(means[k], grand) for k in ks)
    n, m = len(X), len(ks)
    ch = 1.0 if within == 0 else float(between * (n - m) / (within * (m - 1)))
    intra = {k: sum(math.sqrt(sq(r, means[k])) for r in rows[k]) / len(rows[k]) for k in ks}
    ratios = [
        max((intra[i] + intra[j]) / math.sqrt(sq(means[i], means[j])) for j in ks if j != i)
        for i in ks
    ]
    db = 0.0 if all(v < 1e-8 for v in intra.values()) else float(np.mean(ratios))
    return ch, db


@pytest.mark.parametrize("offset", [0.0, 1.7e9])
@pytest.mark.parametrize("spread", [1e-3, 1e-7])
def test_indices_are_exact_on_tight_clusters_with_off_mean_centers(spread, offset):
    # Tight clusters whose centers sit 0.5 from their means: the within-cluster sums
    # of squares, taken as sum ||x - c||^2 - ||S||^2 / n, lost up to 5% of CH and
    # 14% of DB here; around the means they are exact to rounding.
    rng = np.random.RandomState(0)
    means = np.array([[0.0, 0.0], [5.0, 5.0], [20.0, 0.0]])
    X = np.vstack([rng.normal(0, spread, (30, 2)) + m for m in means]) + offset
    centers = means + 0.5 + offset
    labels = nearest_center(X, centers)
    ch, db = _exact_indices(X, labels)
    for criterion, expected in (("calinski_harabasz", ch), ("davies_bouldin", db)):
        _, runtime = _federation(X, 3)
        got = PROTOCOLS[criterion](runtime, centers, random_state=0)
        assert got == pytest.approx(expected, rel=1e-9), criterion


def test_indices_of_clusters_of_identical_rows_follow_scikit_learns_convention():
    # No spread at all: CH is 1 and DB 0 (scikit-learn's conventions), though
    # 0.1 - 0.15 rounds in float64 (the residuals' rounding is no spread).
    X = np.vstack([np.tile(r, (30, 1)) for r in ([0.1, 0.2], [0.7, 0.3], [0.3, 0.9])])
    centers = np.array([[0.15, 0.2], [0.7, 0.35], [0.3, 0.95]])
    for criterion, expected in (("calinski_harabasz", 1.0), ("davies_bouldin", 0.0)):
        _, runtime = _federation(X, 3)
        assert PROTOCOLS[criterion](runtime, centers, random_state=0) == expected
