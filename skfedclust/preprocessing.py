"""Federated preprocessing: scalers fitted from client aggregates.

scikit-learn's scalers in front of a federated estimator are fitted on the
pooled data, which only a simulation has. These scalers learn the same
statistics through the protocol runtime: each client sends a few per-feature
aggregates (recorded in ``communication_``), the server combines them exactly,
and every client scales its own rows. They take every input form of the
estimators (a list of client arrays, ``X`` with ``client_ids``, ``X`` with a
``partition``) and return the same form, so ::

    make_pipeline(FederatedStandardScaler(), FeCA(n_clusters=3)).fit(clients)

runs the whole pipeline federated.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Options
from sklearn.utils._set_output import _wrap_data_with_container
from sklearn.utils.validation import check_is_fitted, validate_data

from .federation import (
    DEFAULT_N_CLIENTS,
    FEDERATED_PARAMETER_CONSTRAINTS,
    Reply,
    build_federation,
    current_runtime_factory,
    input_form,
    private_entropy,
    progress,
    summary,
)
from .node._methods import register_method
from .partition import IIDPartition
from .secure._moments import SumChannel, pooled_moments

__all__ = ["FederatedMinMaxScaler", "FederatedStandardScaler"]


# --------------------------------------------------------------------------- #
# Client and server steps
# --------------------------------------------------------------------------- #
@summary
def client_moments(data, inbox, state, party):
    """Client step: send the row count, the per-feature mean and the sum of squared deviations.

    Deviations are taken from the client's own mean, so a large common offset
    costs no precision (unlike a raw sum of squares).
    """
    mean = data.mean(axis=0)
    m2 = ((data - mean) ** 2).sum(axis=0)
    return Reply(send=(np.int64(data.shape[0]), mean, m2))


def combine_moments(received):
    """Server step: exact global mean and variance from per-client moments (Chan et al.)."""
    counts = np.array([p[0] for p in received.values()], dtype=np.float64)
    means = np.vstack([p[1] for p in received.values()])
    m2 = np.vstack([p[2] for p in received.values()])
    total = counts.sum()
    # The weighted mean of the client means, relative to the first one, keeps
    # the precision of the offsets' differences.
    reference = means[0]
    mean = reference + (counts[:, None] * (means - reference)).sum(axis=0) / total
    spread = m2.sum(axis=0) + (counts[:, None] * (means - mean) ** 2).sum(axis=0)
    return mean, spread / total, int(total)


@summary
def client_range(data, inbox, state, party):
    """Client step: send the per-feature minimum and maximum of the client's rows."""
    return Reply(send=(data.min(axis=0), data.max(axis=0)))


def combine_ranges(received):
    """Server step: global per-feature minimum and maximum."""
    lows = np.vstack([p[0] for p in received.values()])
    highs = np.vstack([p[1] for p in received.values()])
    return lows.min(axis=0), highs.max(axis=0)


# --------------------------------------------------------------------------- #
# Shared machinery
# --------------------------------------------------------------------------- #
class _FederatedTransformer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Input forms, runtime and ``communication_`` shared by the federated scalers."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A node knows the package's methods, and their steps' modules, by name.
        register_method(cls)

    _parameter_constraints: dict = dict(FEDERATED_PARAMETER_CONSTRAINTS)
    _supports_vertical = False

    def _default_partition(self):
        return IIDPartition(DEFAULT_N_CLIENTS)

    def _min_samples(self):
        return 1

    def _min_client_samples(self):
        return 1

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, client_ids=None):
        """Learn the statistics from client aggregates.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Pooled rows (with ``client_ids`` or a ``partition``), or a list of
            per-client arrays.
        y : None
            Ignored.
        client_ids : array-like of shape (n_samples,), default=None
            Client of each pooled row.

        Returns
        -------
        self : object
            Fitted scaler.
        """
        random_state = check_random_state(self.random_state)
        federation = build_federation(self, X, None, client_ids, random_state)
        with progress(self.verbose):
            runtime = current_runtime_factory()(
                federation,
                n_parties=federation.n_clients,
                n_jobs=self.n_jobs,
                name=type(self).__name__,
                private_entropy=private_entropy(random_state),
            )
            self._protocol(runtime, random_state)
        self.n_clients_ = federation.n_clients
        self.communication_ = runtime.ledger.report()
        return self

    def transform(self, X):
        """Scale rows; a list of client arrays comes back as a list.

        Each client scales its own rows with the broadcast statistics; in a
        simulation that is the same as scaling the pooled rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Pooled rows or a list of per-client arrays; rows are scaled alike
            whatever their client.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features) or list of ndarray
            Scaled data in the form it was given.
        """
        check_is_fitted(self)
        if input_form(X) == "clients":
            return [self._transform_one(Xi) for Xi in X]
        return self._transform_one(X)

    def _transform_one(self, X):
        # The container chosen with set_output (pandas, polars) is made per
        # client, with that client's index.
        scaled = self._scale(validate_data(self, X, reset=False))
        return _wrap_data_with_container("transform", scaled, X, self)

    def fit_transform(self, X, y=None, client_ids=None):
        """Fit, then transform ``X`` (same form as given).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Pooled rows or a list of per-client arrays.
        y : None
            Ignored.
        client_ids : array-like of shape (n_samples,), default=None
            Client of each pooled row.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features) or list of ndarray
        """
        return self.fit(X, y, client_ids=client_ids).transform(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


# scikit-learn's set_output wraps the whole result of transform in one
# container, which fails on a list of clients; transform wraps each client's
# result itself, so the methods are kept unwrapped.
for _name in ("transform", "fit_transform"):
    _method = _FederatedTransformer.__dict__[_name]
    setattr(_FederatedTransformer, _name, getattr(_method, "__wrapped__", _method))
del _name, _method


class _FeatureRange(Options):
    """A ``(min, max)`` tuple of finite real numbers with ``min < max``.

    An :class:`~sklearn.utils._param_validation.Options` only in form (the
    kinds of constraint scikit-learn's validation accepts are fixed): the
    valid tuples are not a finite set.
    """

    def __init__(self):
        super().__init__(tuple, set())

    def is_satisfied_by(self, val):
        if not (isinstance(val, tuple) and len(val) == 2):
            return False
        if not all(isinstance(v, Real) and not isinstance(v, bool) for v in val):
            return False
        low, high = float(val[0]), float(val[1])
        with np.errstate(over="ignore"):
            # a span that overflows would scale every feature to inf
            return bool(np.isfinite(high - low) and low < high)

    def __str__(self):
        return "a tuple (min, max) of two finite real numbers with min < max"


class FederatedStandardScaler(_FederatedTransformer):
    """Standardize features with the global mean and variance, learnt from client aggregates.

    The server learns the pooled mean and variance from secure sums (see
    :func:`~skfedclust.secure.pooled_moments`: a bound on the rows, the column
    sums and counts, a bound on the deviations from that first mean, and the
    sums of the deviations and their squares; eight rounds and one set-up
    round, and the server learns no client's statistics) and broadcasts them
    (``2 d`` numbers per client). With ``secure_aggregation=False`` each client
    sends its row count, per-feature mean and sum of squared deviations in the
    clear instead (``1 + 2 d`` numbers, one round). The result equals
    scikit-learn's :class:`~sklearn.preprocessing.StandardScaler` fitted on
    the pooled rows, which a real federation does not have.

    Read more in the :ref:`User Guide <federated_preprocessing>`.

    Parameters
    ----------
    with_mean : bool, default=True
        Center the data.
    with_std : bool, default=True
        Scale to unit variance (a constant feature is left unscaled).
    secure_aggregation : bool, default=True
        Add the clients' sums by secure aggregation; ``False`` sends every
        client's own statistics to the server.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X`` without ``client_ids``;
        ``None`` gives three IID clients (the statistics do not depend on it).
    n_jobs : int, default=None
        Parallel client workers.
    random_state : int, RandomState instance or None, default=None
        Seeds the simulated partition.
    verbose : int, default=0
        Progress messages.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
    var_ : ndarray of shape (n_features,)
    scale_ : ndarray of shape (n_features,)
    n_samples_seen_ : int
    n_clients_ : int
    communication_ : dict
        Rounds and bytes exchanged.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Defined when the clients are DataFrames with the same column names.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.preprocessing import FederatedStandardScaler
    >>> clients = [np.array([[0.0], [2.0]]), np.array([[4.0], [6.0]]), np.array([[8.0], [10.0]])]
    >>> scaler = FederatedStandardScaler().fit(clients)
    >>> scaler.mean_, scaler.var_.round(4)
    (array([5.]), array([11.6667]))
    >>> [c.ravel().round(3).tolist() for c in scaler.transform(clients)]
    [[-1.464, -0.878], [-0.293, 0.293], [0.878, 1.464]]
    """

    _parameter_constraints: dict = {
        **_FederatedTransformer._parameter_constraints,
        "with_mean": ["boolean"],
        "with_std": ["boolean"],
        "secure_aggregation": ["boolean"],
    }

    def __init__(
        self,
        *,
        with_mean=True,
        with_std=True,
        secure_aggregation=True,
        partition=None,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.with_mean = with_mean
        self.with_std = with_std
        self.secure_aggregation = secure_aggregation
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _protocol(self, runtime, random_state):
        if self.secure_aggregation:
            channel = SumChannel(
                runtime, secure=True, seed=int(random_state.randint(np.iinfo(np.int32).max))
            )
            n, mean, var, _ = pooled_moments(channel)
        else:
            runtime.stage("clients: row count, mean and squared deviations")
            moments = runtime.run(client_moments, tag="moments")
            mean, var, n = runtime.server(combine_moments, moments)
        scale = np.sqrt(var)
        scale[scale == 0] = 1.0
        self.mean_, self.var_, self.scale_, self.n_samples_seen_ = mean, var, scale, n
        runtime.broadcast((mean, scale), tag="mean and scale")

    def _scale(self, X):
        X = np.asarray(X, dtype=np.float64)
        if self.with_mean:
            X = X - self.mean_
        if self.with_std:
            X = X / self.scale_
        return X

    def inverse_transform(self, X):
        """Undo the scaling (same form as given).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like

        Returns
        -------
        X_original : ndarray or list of ndarray
        """
        check_is_fitted(self)

        def undo(Xi):
            Xi = np.asarray(Xi, dtype=np.float64)
            if self.with_std:
                Xi = Xi * self.scale_
            if self.with_mean:
                Xi = Xi + self.mean_
            return Xi

        return [undo(Xi) for Xi in X] if input_form(X) == "clients" else undo(X)


class FederatedMinMaxScaler(_FederatedTransformer):
    """Scale features to a range with the global minimum and maximum from client aggregates.

    Each client sends its per-feature minimum and maximum (``2 d`` numbers);
    the server takes the global ones and broadcasts them. Equals
    scikit-learn's :class:`~sklearn.preprocessing.MinMaxScaler` fitted on the
    pooled rows. One round. The server learns each client's per-feature
    extremes, which may be actual values of single rows.

    Read more in the :ref:`User Guide <federated_preprocessing>`.

    Parameters
    ----------
    feature_range : tuple (min, max), default=(0, 1)
        Desired range of the transformed data: two finite real numbers with
        ``min < max``.
    partition : int, partition specification or None, default=None
        How to simulate clients from a pooled ``X`` without ``client_ids``.
    n_jobs : int, default=None
        Parallel client workers.
    random_state : int, RandomState instance or None, default=None
        Seeds the simulated partition.
    verbose : int, default=0
        Progress messages.

    Attributes
    ----------
    data_min_ : ndarray of shape (n_features,)
    data_max_ : ndarray of shape (n_features,)
    scale_ : ndarray of shape (n_features,)
    min_ : ndarray of shape (n_features,)
    n_clients_ : int
    communication_ : dict
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.preprocessing import FederatedMinMaxScaler
    >>> clients = [np.array([[0.0], [2.0]]), np.array([[4.0], [8.0]])]
    >>> FederatedMinMaxScaler().fit_transform(clients)[1].ravel().tolist()
    [0.5, 1.0]
    """

    _parameter_constraints: dict = {
        **_FederatedTransformer._parameter_constraints,
        "feature_range": [_FeatureRange()],
    }

    def __init__(
        self, feature_range=(0, 1), *, partition=None, n_jobs=None, random_state=None, verbose=0
    ):
        self.feature_range = feature_range
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _protocol(self, runtime, random_state):
        # A minimum and a maximum are not sums: each client's range goes to
        # the server in the clear (what the server learns, the docstring says).
        low, high = (float(v) for v in self.feature_range)
        runtime.stage("clients: per-feature minimum and maximum")
        ranges = runtime.run(client_range, tag="feature ranges")
        data_min, data_max = runtime.server(combine_ranges, ranges)
        span = data_max - data_min
        span[span == 0] = 1.0
        self.data_min_, self.data_max_ = data_min, data_max
        self.scale_ = (high - low) / span
        self.min_ = low - data_min * self.scale_
        runtime.broadcast((self.scale_, self.min_), tag="scale and offset")

    def _scale(self, X):
        low = self.feature_range[0]
        # (x - min) * scale keeps precision for large offsets; min_ + x * scale would not.
        return (np.asarray(X, dtype=np.float64) - self.data_min_) * self.scale_ + low

    def inverse_transform(self, X):
        """Undo the scaling (same form as given).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like

        Returns
        -------
        X_original : ndarray or list of ndarray
        """
        check_is_fitted(self)
        low = self.feature_range[0]

        def undo(Xi):
            return (np.asarray(Xi, dtype=np.float64) - low) / self.scale_ + self.data_min_

        return [undo(Xi) for Xi in X] if input_form(X) == "clients" else undo(X)
