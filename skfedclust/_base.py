"""Base class of every federated clustering estimator.

:class:`BaseFederatedClustering` turns the input forms into one
:class:`~skfedclust._federation.Federation`, validates it, runs the protocol of
the subclass and stores what every estimator has: ``labels_``, ``n_clients_``
and ``communication_``.

Input forms
-----------
1. ``fit([X_1, ..., X_m])``: a list of per-client 2-D arrays (real client data).
2. ``fit(X, client_ids=g)``: pooled rows with one client id per row.
3. ``fit(X)`` or ``fit(X, y)`` with the ``partition`` parameter: clients are
   simulated; ``y`` is used only by label-skewed partitions.
4. ``fit([[X_11, X_12], [X_21, X_22]])``: row groups × feature blocks, for
   estimators that support vertical data.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.metrics import pairwise_distances_argmin
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import HasMethods, Interval
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from ._federation import Federation, Ledger
from .partition import IIDPartition

#: Number of IID clients simulated when ``partition=None`` and the input is pooled.
DEFAULT_N_CLIENTS = 2


def _nesting_depth(obj):
    """Array depth of ``obj``: 2 for a matrix, 3 for a list of matrices, ..."""
    if hasattr(obj, "ndim") and not isinstance(obj, (list, tuple)):
        return obj.ndim
    if sp.issparse(obj):
        return 2
    if isinstance(obj, (list, tuple)):
        return 1 + (_nesting_depth(obj[0]) if len(obj) else 0)
    return 0


def input_form(X):
    """Classify ``X`` as ``"pooled"``, ``"clients"`` or ``"grid"``.

    A list whose elements are 1-D (``X.tolist()``) is a plain 2-D input, as
    scikit-learn's checks expect; a list of 2-D arrays is a list of clients; a
    list of lists of 2-D arrays is a grid of row groups × feature blocks.
    """
    if not isinstance(X, (list, tuple)) or len(X) == 0:
        return "pooled"
    depth = _nesting_depth(X[0])
    if depth == 2:
        return "clients"
    if depth == 3:
        return "grid"
    return "pooled"


class BaseFederatedClustering(ClusterMixin, BaseEstimator):
    """Base class for federated clustering estimators.

    Subclasses implement :meth:`_fit_federation`, which runs the protocol on a
    :class:`~skfedclust._federation.Federation` and returns the labels of the
    pooled rows. Client steps must be run through
    :func:`~skfedclust._federation.map_clients` and every message must go
    through the :class:`~skfedclust._federation.Ledger`.
    """

    _parameter_constraints: dict = {
        "partition": [
            None,
            Interval(numbers.Integral, 1, None, closed="left"),
            HasMethods("split"),
        ],
        "n_jobs": [None, numbers.Integral],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    #: Whether the protocol handles vertical and hybrid federations.
    _supports_vertical = False

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, client_ids=None):
        """Run the federated protocol.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Pooled data, or a list of per-client arrays ``[X_1, ..., X_m]``
            (clients keep their order; rows are numbered client by client).
        y : array-like of shape (n_samples,), default=None
            Used only by label-skewed partition specifications to simulate
            clients; the protocol never sees it.
        client_ids : array-like of shape (n_samples,), default=None
            Client of each pooled row. Clients are ordered by sorted id.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        random_state = check_random_state(self.random_state)
        federation = self._federate(X, y, client_ids, random_state)
        ledger = Ledger(
            self._ledger_parties(federation), verbose=self.verbose, name=type(self).__name__
        )
        ledger.stage(
            f"federation of {federation.n_clients} clients, "
            f"{federation.n_samples} samples, {federation.n_features} features"
        )
        labels = self._fit_federation(federation, ledger, random_state)
        self.labels_ = np.asarray(labels)
        self.n_clients_ = federation.n_clients
        self.client_sizes_ = federation.client_sizes
        self.communication_ = ledger.report()
        ledger.stage("done")
        return self

    def _fit_federation(self, federation, ledger, random_state):
        """Run the protocol; return the labels of the pooled rows in input order."""
        raise NotImplementedError

    def _ledger_parties(self, federation):
        """Number of parties in the ledger (data holders unless a protocol adds more)."""
        return federation.n_clients

    def _min_client_samples(self):
        """Smallest number of rows a client may hold."""
        return 1

    def _min_samples(self):
        """Smallest number of pooled rows the estimator accepts."""
        return max(getattr(self, "n_clusters", 1), 1)

    # --------------------------------------------------------- federation
    def _federate(self, X, y, client_ids, random_state):
        form = input_form(X)
        if form != "pooled" and client_ids is not None:
            raise ValueError("client_ids can only be given with a pooled X, not a list of clients")
        if form != "pooled" and self.partition is not None:
            raise ValueError(
                "partition simulates clients from a pooled X; it cannot be combined "
                "with a list of client arrays"
            )
        if form == "clients":
            federation = self._federation_from_clients(X)
        elif form == "grid":
            federation = self._federation_from_grid(X)
        else:
            X = validate_data(self, X, dtype=np.float64)
            self._check_n_samples(X.shape[0])
            if client_ids is not None:
                federation = self._federation_from_ids(X, client_ids)
            else:
                federation = self._federation_from_partition(X, y, random_state)
        if not federation.is_horizontal and not self._supports_vertical:
            raise ValueError(
                f"{type(self).__name__} supports horizontal federations only (every client "
                "holds all features); got a vertical or hybrid split"
            )
        self._check_client_sizes(federation)
        federation.spawn_seeds(random_state)
        return federation

    def _check_n_samples(self, n_samples):
        needed = self._min_samples()
        if n_samples < needed:
            raise ValueError(
                f"n_samples={n_samples} should be >= {needed} "
                f"(n_clusters={getattr(self, 'n_clusters', None)})."
            )

    def _check_client_sizes(self, federation):
        needed = self._min_client_samples()
        for i, size in enumerate(federation.client_sizes):
            if size == 0:
                raise ValueError(f"client {i} holds no samples")
            if size < needed:
                raise ValueError(
                    f"client {i} holds {size} samples but {type(self).__name__} needs at "
                    f"least {needed} per client with these parameters"
                )

    def _check_client_array(self, Xi, name):
        try:
            Xi = check_array(Xi, dtype=np.float64, input_name=name, ensure_min_samples=0)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from exc
        if Xi.shape[0] == 0:
            raise ValueError(f"{name} holds no samples")
        return Xi

    def _federation_from_clients(self, clients):
        arrays = [self._check_client_array(Xi, f"client {i}") for i, Xi in enumerate(clients)]
        widths = [a.shape[1] for a in arrays]
        for i, w in enumerate(widths):
            if w != widths[0]:
                raise ValueError(
                    f"clients must share the same features: client {i} has {w} features "
                    f"but client 0 has {widths[0]}"
                )
        X = validate_data(self, np.vstack(arrays), dtype=np.float64)
        self._check_n_samples(X.shape[0])
        bounds = np.cumsum([0] + [a.shape[0] for a in arrays])
        rows = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        return Federation(X, rows)

    def _federation_from_grid(self, grid):
        """Row groups × feature blocks: ``grid[g][b]`` is party (g, b)."""
        if not self._supports_vertical:
            raise ValueError(
                f"{type(self).__name__} supports horizontal federations only; "
                "a nested list of row groups × feature blocks is for vertical methods"
            )
        n_blocks = len(grid[0])
        blocks = []
        for g, group in enumerate(grid):
            if len(group) != n_blocks:
                raise ValueError(
                    "every row group must cover the same features in the same block layout: "
                    f"row group {g} has {len(group)} feature blocks but row group 0 has {n_blocks}"
                )
            arrays = [
                self._check_client_array(Xb, f"party ({g}, {b})") for b, Xb in enumerate(group)
            ]
            heights = {a.shape[0] for a in arrays}
            if len(heights) != 1:
                raise ValueError(
                    f"the feature blocks of row group {g} must hold the same rows; "
                    f"got row counts {[a.shape[0] for a in arrays]}"
                )
            blocks.append(arrays)
        widths = [a.shape[1] for a in blocks[0]]
        for g, arrays in enumerate(blocks):
            w = [a.shape[1] for a in arrays]
            if w != widths:
                raise ValueError(
                    "every row group must cover the same features in the same block layout: "
                    f"row group {g} has block widths {w} but row group 0 has {widths}"
                )
        X = validate_data(self, np.vstack([np.hstack(a) for a in blocks]), dtype=np.float64)
        self._check_n_samples(X.shape[0])
        col_bounds = np.cumsum([0] + widths)
        cols = [np.arange(a, b) for a, b in zip(col_bounds[:-1], col_bounds[1:])]
        heights = [a[0].shape[0] for a in blocks]
        row_bounds = np.cumsum([0] + heights)
        client_rows, client_cols, row_groups = [], [], []
        for g in range(len(blocks)):
            rows = np.arange(row_bounds[g], row_bounds[g + 1])
            row_groups.append(list(range(g * n_blocks, (g + 1) * n_blocks)))
            client_rows.extend([rows] * n_blocks)
            client_cols.extend(cols)
        return Federation(X, client_rows, client_cols, row_groups)

    def _federation_from_ids(self, X, client_ids):
        client_ids = column_or_1d(client_ids, warn=True)
        if len(client_ids) != X.shape[0]:
            raise ValueError(
                f"client_ids has {len(client_ids)} entries but X has {X.shape[0]} samples"
            )
        if client_ids.dtype.kind == "f" and not np.isfinite(client_ids).all():
            raise ValueError("client_ids contains NaN or infinity")
        names, inverse = np.unique(client_ids, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        counts = np.bincount(inverse, minlength=len(names))
        rows = np.split(order, np.cumsum(counts)[:-1])
        return Federation(X, rows, client_names=names.tolist())

    def _federation_from_partition(self, X, y, random_state):
        partition = self.partition
        if partition is None:
            partition = IIDPartition(DEFAULT_N_CLIENTS)
        elif isinstance(partition, numbers.Integral):
            partition = IIDPartition(int(partition))
        rows, cols, row_groups = partition._layout(X, y, random_state=random_state)
        return Federation(X, rows, cols, row_groups)


def nearest_center_labels(X_client, seed, *, centers):
    """Client step: label the client's rows by the nearest global center.

    Shared by every centroid method whose server broadcasts global centers.
    """
    return pairwise_distances_argmin(X_client, centers)


class CentroidPredictMixin:
    """``predict`` by nearest center in ``cluster_centers_``."""

    def predict(self, X):
        """Assign each sample to its nearest cluster center.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Index of the nearest center of each sample.
        """
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return pairwise_distances_argmin(X, self.cluster_centers_)
