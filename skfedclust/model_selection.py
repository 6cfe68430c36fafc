"""Choosing the number of clusters of a federation without pooling its rows.

:func:`select_n_clusters` fits one clone of a centroid estimator per
candidate number of clusters and scores each fit with a federated internal
index (:mod:`skfedclust.metrics`), computed from secure sums: the server
learns per-cluster aggregates, never a client's rows or its share of them.
Everything the search sends is counted.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import numpy as np
from sklearn.base import clone
from sklearn.utils import Bunch, check_random_state

from .metrics import INTERNAL_INDICES, federated_score

__all__ = ["CRITERIA", "elbow", "select_n_clusters"]

#: Criteria of :func:`select_n_clusters`.
CRITERIA = (*INTERNAL_INDICES, "inertia")

_SUMMED = ("rounds", "setup_rounds", "bytes_up", "bytes_down", "bytes_peer")


def elbow(candidates, inertias):
    """The elbow of an inertia curve: the candidate farthest below its chord.

    Both axes are scaled to ``[0, 1]`` (the candidates from the smallest to
    the largest, the inertias from the largest to the smallest), and the
    elbow is the inner candidate whose point lies farthest from the straight
    line joining the first and the last points, the "knee" of Satopää et al.
    (2011) without smoothing. Inertia always decreases with more clusters, so
    it cannot be maximised; this rule is a heuristic, and it refuses curves
    it cannot read.

    Parameters
    ----------
    candidates : array-like of int
        Numbers of clusters, at least 3, increasing.
    inertias : array-like of float
        Inertia of each.

    Returns
    -------
    best : int
        The candidate at the elbow.

    References
    ----------
    .. [1] V. Satopää, J. Albrecht, D. Irwin and B. Raghavan, "Finding a
       'Kneedle' in a haystack: detecting knee points in system behavior",
       ICDCS Workshops, 2011.

    Examples
    --------
    >>> from skfedclust.model_selection import elbow
    >>> elbow([1, 2, 3, 4, 5], [100.0, 40.0, 10.0, 8.0, 7.0])
    3
    """
    k = np.asarray(candidates, dtype=np.float64)
    w = np.asarray(inertias, dtype=np.float64)
    if len(k) < 3:
        raise ValueError("the elbow rule needs at least 3 candidates")
    if np.any(np.diff(k) <= 0):
        raise ValueError("the elbow rule needs increasing candidates")
    if not np.all(np.isfinite(w)) or w[0] <= w[-1]:
        raise ValueError(
            "the inertia does not decrease from the first to the last candidate: "
            "no elbow to read (choose another criterion)"
        )
    x = (k - k[0]) / (k[-1] - k[0])
    y = (w[0] - w) / (w[0] - w[-1])
    # Distance above the chord y = x of the rising, normalised curve.
    gap = y - x
    inner = gap[1:-1]
    if inner.max() <= 0:
        raise ValueError("the inertia curve has no elbow (it is not convex anywhere)")
    return int(candidates[1 + int(np.argmax(inner))])


def _add_reports(total, report):
    for key in _SUMMED:
        total[key] += int(report[key])
    per = report["per_client"]
    if total["per_client"] is None:
        total["per_client"] = {name: np.array(v, copy=True) for name, v in per.items()}
    else:
        for name, values in per.items():
            total["per_client"][name] = total["per_client"][name] + values


def _check_candidates(candidates):
    """The candidate numbers of clusters as distinct positive Python ints.

    A float such as 2.5 is refused rather than truncated: a search over
    ``[2.5, 3.7]`` would otherwise try 2 and 3 without a word.
    """
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Iterable):
        raise TypeError(
            "candidates must be an iterable of integers (numbers of clusters), "
            f"got {type(candidates).__name__}: {candidates!r}"
        )
    candidates, checked = list(candidates), []
    for k in candidates:
        whole = isinstance(k, numbers.Integral) or (
            isinstance(k, numbers.Real) and float(k).is_integer()
        )
        if isinstance(k, (bool, np.bool_)) or not whole:
            raise ValueError(
                f"candidates must be whole numbers of clusters, got {k!r} in {candidates!r}"
            )
        if k < 1:
            raise ValueError(f"candidates must be positive numbers of clusters, got {k}")
        checked.append(int(k))
    if not checked or len(set(checked)) != len(checked):
        raise ValueError(f"candidates must be distinct numbers of clusters, got {checked}")
    return checked


def _check_has_centers(estimator):
    """Refuse, before any fit, an estimator whose fit leaves no centers in the input space.

    Every criterion scores the nearest-center partition of a fit's
    ``cluster_centers_`` (or its ``inertia_`` on them); a method without them
    would only fail after the first fit.
    """
    if getattr(estimator, "_centers_in_input_space", False):
        return
    from .utils import all_estimators

    qualify = ", ".join(
        name for name, cls in all_estimators() if getattr(cls, "_centers_in_input_space", False)
    )
    raise TypeError(
        "select_n_clusters needs an estimator whose fit gives cluster centers "
        "(cluster_centers_) in the input space, scored by nearest center; "
        f"{type(estimator).__name__} is not one. These are: {qualify}."
    )


def select_n_clusters(
    estimator,
    X,
    y=None,
    *,
    candidates,
    criterion="calinski_harabasz",
    client_ids=None,
    partition=None,
):
    """Choose ``n_clusters`` for a federation by a federated internal index.

    For each candidate ``k``, a clone of ``estimator`` with ``n_clusters=k``
    is fitted on the federation, then the index is computed from secure sums
    on the same clients (:func:`~skfedclust.metrics.federated_score`). No row
    and no client's share of an aggregate reaches the server.

    Every clone is fitted with the same integer ``random_state`` (the
    estimator's, or one drawn from it when it is not an integer), so that
    every candidate sees the same simulated clients.

    Read more in the :ref:`User Guide <choosing_k>`.

    Parameters
    ----------
    estimator : estimator
        A centroid estimator of the package with an ``n_clusters`` parameter,
        whose fit gives ``cluster_centers_`` in the input space:
        :class:`~skfedclust.FeCA`, :class:`~skfedclust.FederatedFuzzyCMeans`,
        :class:`~skfedclust.FederatedKMeans`, :class:`~skfedclust.GOLDClustering`,
        :class:`~skfedclust.KFed`, :class:`~skfedclust.KumarFederatedKMeans` or
        :class:`~skfedclust.MAvg`. Others (:class:`~skfedclust.DCClustering`,
        whose centers live in its collaborative space,
        :class:`~skfedclust.FedSpectralClustering`,
        :class:`~skfedclust.OmniFCClustering`) are refused with a ``TypeError``.
    X : array-like or list of array-like
        Any input form of the estimator's ``fit``.
    y : array-like, default=None
        Used only by label-skewed partition specifications.
    candidates : iterable of int
        Numbers of clusters to try (distinct, at least 2 for the indices).
    criterion : {"calinski_harabasz", "davies_bouldin", "silhouette", "inertia"}, \
            default="calinski_harabasz"
        ``"calinski_harabasz"`` (largest wins) and ``"davies_bouldin"``
        (smallest wins) equal scikit-learn's on the pooled rows and labels;
        ``"silhouette"`` is the simplified silhouette
        (:func:`~skfedclust.metrics.simplified_silhouette_score`; largest
        wins), not scikit-learn's ``silhouette_score``; ``"inertia"`` uses
        each fit's ``inertia_`` (fitted with ``compute_inertia=True`` where
        the estimator has that parameter: two secure sums per fit) and picks
        the elbow of the curve (:func:`elbow`), refusing a curve without one.
    client_ids : array-like of shape (n_samples,), default=None
        Client of each pooled row.
    partition : int or partition specification, default=None
        Simulates clients from a pooled ``X``; ``None`` keeps the estimator's
        ``partition``.

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``candidates`` (list of int), ``scores`` (ndarray, one per
        candidate), ``best`` (the chosen candidate), ``criterion``,
        ``estimators`` (the fitted clones, in candidate order) and
        ``communication`` (everything the search sent, summed over the fits
        and the index computations: ``rounds``, ``setup_rounds``,
        ``bytes_up``, ``bytes_down``, ``bytes_peer``, ``bytes_total`` and
        ``per_client``).

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import KFed
    >>> from skfedclust.model_selection import select_n_clusters
    >>> X, _ = make_blobs(600, centers=4, random_state=0)
    >>> result = select_n_clusters(
    ...     KFed(random_state=0), X, candidates=[2, 3, 4, 5, 6], partition=3
    ... )
    >>> result.best
    4
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {list(CRITERIA)}, got {criterion!r}")
    candidates = _check_candidates(candidates)
    if criterion != "inertia" and min(candidates) < 2:
        raise ValueError(f"the {criterion} index needs at least 2 clusters")
    if "n_clusters" not in estimator.get_params():
        raise TypeError(f"{type(estimator).__name__} has no n_clusters parameter")
    _check_has_centers(estimator)
    seed = estimator.get_params().get("random_state")
    if not isinstance(seed, numbers.Integral):
        seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
    params = {"random_state": int(seed)}
    if partition is not None:
        params["partition"] = partition
    if criterion == "inertia" and "compute_inertia" in estimator.get_params():
        # The elbow needs every fit's inertia_, which these estimators sum only when asked.
        params["compute_inertia"] = True

    total = dict.fromkeys(_SUMMED, 0)
    total["per_client"] = None
    estimators, scores = [], []
    for k in candidates:
        est = clone(estimator).set_params(n_clusters=k, **params)
        est.fit(X, y, client_ids=client_ids)
        _add_reports(total, est.communication_)
        if criterion == "inertia":
            if not hasattr(est, "inertia_"):
                raise TypeError(f"{type(est).__name__} has no inertia_")
            scores.append(float(est.inertia_))
        else:
            result = federated_score(
                est, X, y, criterion=criterion, client_ids=client_ids, random_state=int(seed)
            )
            _add_reports(total, result.communication)
            scores.append(result.score)
        estimators.append(est)
    total["bytes_total"] = total["bytes_up"] + total["bytes_down"] + total["bytes_peer"]

    scores = np.asarray(scores)
    if criterion == "inertia":
        order = np.argsort(candidates)
        best = elbow(np.asarray(candidates)[order], scores[order])
    else:
        _, larger_is_better = INTERNAL_INDICES[criterion]
        pick = np.argmax(scores) if larger_is_better else np.argmin(scores)
        best = candidates[int(pick)]
    return Bunch(
        candidates=candidates,
        scores=scores,
        best=int(best),
        criterion=criterion,
        estimators=estimators,
        communication=total,
    )
