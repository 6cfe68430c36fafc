"""select_n_clusters: the number of clusters of a federation, without pooling."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score

from skfedclust import FeCA, KFed, MAvg
from skfedclust.clusterers import nearest_center
from skfedclust.metrics import simplified_silhouette_score
from skfedclust.model_selection import elbow, select_n_clusters
from skfedclust.partition import DirichletPartition, IIDPartition
from skfedclust.utils import all_estimators


def _blobs(k=4, n=800, seed=0):
    centers = np.array([[0, 0], [10, 0], [0, 10], [10, 10], [5, 20], [20, 5]])[:k]
    return make_blobs(n, centers=centers, cluster_std=1.0, random_state=seed)


@pytest.mark.parametrize("criterion", ["calinski_harabasz", "davies_bouldin", "silhouette"])
@pytest.mark.parametrize(
    "partition",
    [IIDPartition(3), IIDPartition(8), DirichletPartition(5, alpha=1.0)],
    ids=["iid3", "iid8", "dirichlet5"],
)
def test_the_known_number_of_clusters_is_found(criterion, partition):
    X, y = _blobs(k=4)
    result = select_n_clusters(
        MAvg(random_state=0), X, y, candidates=[2, 3, 4, 5, 6], criterion=criterion,
        partition=partition,
    )  # fmt: skip
    assert result.best == 4
    assert [e.n_clusters for e in result.estimators] == [2, 3, 4, 5, 6]
    assert len(result.scores) == 5


@pytest.mark.parametrize("estimator", [KFed(random_state=1), FeCA(random_state=1)])
def test_other_estimators_and_client_ids(estimator):
    X, _ = _blobs(k=5, n=1000, seed=3)
    ids = np.random.RandomState(0).randint(0, 4, len(X))
    result = select_n_clusters(estimator, X, candidates=range(2, 8), client_ids=ids)
    assert result.best == 5
    # Labels stay in input order, as for any fit with client_ids.
    best = result.estimators[result.candidates.index(5)]
    assert best.labels_.shape == (len(X),)


def test_scores_equal_the_pooled_indices_of_each_fit():
    X, _ = _blobs(k=3, n=450)
    clients = [X[:100], X[100:300], X[300:]]
    for criterion, pooled in [
        ("calinski_harabasz", lambda e: calinski_harabasz_score(X, e.labels_)),
        ("davies_bouldin", lambda e: davies_bouldin_score(X, e.labels_)),
        ("silhouette", lambda e: simplified_silhouette_score(X, e.labels_, e.cluster_centers_)),
        ("inertia", lambda e: -e.score(X)),
    ]:
        result = select_n_clusters(
            KFed(random_state=0), clients, candidates=[2, 3, 4, 5], criterion=criterion
        )
        expected = [pooled(e) for e in result.estimators]
        np.testing.assert_allclose(result.scores, expected, rtol=1e-9)


def test_communication_is_everything_the_search_sent():
    X, _ = _blobs(k=3, n=300)
    clients = [X[:100], X[100:200], X[200:]]
    result = select_n_clusters(KFed(random_state=0), clients, candidates=[2, 3, 4])
    comm = result.communication
    fits = [e.communication_ for e in result.estimators]
    # Each fit, then one Calinski-Harabasz protocol (a set-up, eight rounds).
    assert comm["rounds"] == sum(f["rounds"] for f in fits) + 3 * 8
    assert comm["setup_rounds"] == sum(f["setup_rounds"] for f in fits) + 3
    assert comm["bytes_up"] > sum(f["bytes_up"] for f in fits)
    assert comm["bytes_total"] == comm["bytes_up"] + comm["bytes_down"] + comm["bytes_peer"]
    np.testing.assert_array_equal(
        comm["per_client"]["bytes_up"].sum(), comm["bytes_up"]
    )  # fmt: skip
    # The inertia criterion sends nothing beyond the fits.
    inertia = select_n_clusters(
        KFed(random_state=0), clients, candidates=[2, 3, 4], criterion="inertia"
    )
    assert inertia.communication["rounds"] == sum(f["rounds"] for f in fits)


def test_inertia_elbow_finds_the_known_k():
    X, _ = _blobs(k=4)
    result = select_n_clusters(
        MAvg(random_state=0), X, candidates=range(1, 9), criterion="inertia", partition=3
    )
    assert result.best == 4
    # A federated fit is no optimum: the curve need not decrease everywhere.
    assert result.scores[3] < result.scores[2] / 5


def test_elbow_rule_and_its_refusals():
    assert elbow([1, 2, 3, 4, 5], [100.0, 40.0, 10.0, 8.0, 7.0]) == 3
    with pytest.raises(ValueError, match="at least 3"):
        elbow([1, 2], [2.0, 1.0])
    with pytest.raises(ValueError, match="does not decrease"):
        elbow([1, 2, 3], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="no elbow"):
        elbow([1, 2, 3], [10.0, 9.9, 0.0])  # concave: no knee


def test_same_clients_for_every_candidate_and_reproducible():
    X, _ = _blobs(k=3, n=300)
    a = select_n_clusters(KFed(random_state=5), X, candidates=[2, 3], partition=4)
    b = select_n_clusters(KFed(random_state=5), X, candidates=[2, 3], partition=4)
    np.testing.assert_array_equal(a.scores, b.scores)
    sizes = [tuple(e.client_sizes_) for e in a.estimators]
    assert len(set(sizes)) == 1
    # A non-integer random_state is turned into one integer for every fit.
    c = select_n_clusters(KFed(random_state=None), X, candidates=[2, 3], partition=4)
    assert len({e.random_state for e in c.estimators}) == 1


def test_refusals():
    X, _ = _blobs(k=3, n=300)
    with pytest.raises(ValueError, match="criterion must be one of"):
        select_n_clusters(KFed(), X, candidates=[2, 3], criterion="gap")
    with pytest.raises(ValueError, match="at least 2 clusters"):
        select_n_clusters(KFed(), X, candidates=[1, 2, 3])
    with pytest.raises(ValueError, match="distinct"):
        select_n_clusters(KFed(), X, candidates=[2, 2])
    with pytest.raises(TypeError, match="no n_clusters"):
        select_n_clusters(_NoK(), X, candidates=[2, 3])
    # Fractions are refused, not truncated to 2 and 3.
    with pytest.raises(ValueError, match="whole numbers of clusters, got 2.5"):
        select_n_clusters(KFed(), X, candidates=[2.5, 3.7])
    with pytest.raises(ValueError, match="whole numbers of clusters, got nan"):
        select_n_clusters(KFed(), X, candidates=[float("nan"), 3])
    with pytest.raises(ValueError, match="whole numbers of clusters, got True"):
        select_n_clusters(KFed(), X, candidates=[True, 3])
    with pytest.raises(TypeError, match="iterable of integers"):
        select_n_clusters(KFed(), X, candidates=5)
    with pytest.raises(ValueError, match="positive"):
        select_n_clusters(KFed(), X, candidates=[-2, 3], criterion="inertia")
    # Whole floats and numpy integers are numbers of clusters.
    result = select_n_clusters(KFed(random_state=0), X, candidates=[np.int64(2), 3.0])
    assert result.candidates == [2, 3] and all(type(k) is int for k in result.candidates)


class _NoK:
    def get_params(self, deep=True):
        return {}


@pytest.mark.parametrize(
    "Estimator", [cls for _, cls in all_estimators()], ids=lambda c: c.__name__
)
def test_estimators_without_centers_are_refused_before_any_fit(Estimator, monkeypatch):
    X, _ = _blobs(k=3, n=120)
    qualify = [n for n, c in all_estimators() if c._centers_in_input_space]
    if Estimator._centers_in_input_space:
        # The flag is true of a fit: centers in the input space, inertia_ on them.
        params = {"compute_inertia": True} if "compute_inertia" in Estimator().get_params() else {}
        est = Estimator(n_clusters=3, random_state=0, **params).fit(X)
        assert est.cluster_centers_.shape == (3, X.shape[1])
        assert est.inertia_ == pytest.approx(
            ((X - est.cluster_centers_[nearest_center(X, est.cluster_centers_)]) ** 2).sum()
        )
        return

    def no_fit(self, *args, **kwargs):
        raise AssertionError("select_n_clusters fitted an estimator it should refuse")

    monkeypatch.setattr(Estimator, "fit", no_fit)
    for criterion in ["calinski_harabasz", "inertia"]:
        with pytest.raises(TypeError, match="cluster centers") as info:
            select_n_clusters(Estimator(), X, candidates=[2, 3, 4], criterion=criterion)
        message = str(info.value)
        assert Estimator.__name__ in message and "cluster_centers_" in message
        assert all(name in message for name in qualify)
