"""Base class of every federated clustering estimator.

:class:`BaseFederatedClustering` turns the input forms into one
:class:`~skfedclust.federation.Federation` (:mod:`skfedclust.federation`
checks them once), runs the protocol of the subclass on an
:class:`~skfedclust.federation.InProcessRuntime` and stores what every estimator
has: ``labels_``, ``n_clients_``, ``client_sizes_`` and ``communication_``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from ..clusterers import nearest_center
from ..federation import (
    DEFAULT_N_CLIENTS,
    FEDERATED_PARAMETER_CONSTRAINTS,
    build_federation,
    current_runtime_factory,
    private_entropy,
    progress,
)
from ..federation._inputs import check_client_array, input_form
from ..node._methods import register_method
from ..partition import IIDPartition
from ._centroid_steps import pooled_inertia

__all__ = ["BaseFederatedClustering", "CentroidPredictMixin", "input_form"]


class BaseFederatedClustering(ClusterMixin, BaseEstimator):
    """Base class for federated clustering estimators.

    Subclasses implement ``_run_protocol(runtime, random_state)``: the method's
    protocol written against a :class:`~skfedclust.federation.Runtime`, which
    runs every client step and carries every message. Its client steps declare
    each party's labels as the output ``"labels"``; ``fit`` turns any input
    form into a federation, draws one public seed per client, calls the
    protocol and takes ``labels_`` from :meth:`Runtime.hand_back
    <skfedclust.federation.Runtime.hand_back>`. See the user guide's "Writing a
    method" page.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A node knows the package's methods, and their steps' modules, by name.
        register_method(cls, getattr(cls, "_client_step_modules", ()))

    _parameter_constraints: dict = dict(FEDERATED_PARAMETER_CONSTRAINTS)

    #: Whether the protocol handles vertical and hybrid federations.
    _supports_vertical = False

    #: Whether a fit leaves ``cluster_centers_`` in the input's feature space (and
    #: ``inertia_`` on them): what centroid-based tools such as ``select_n_clusters``
    #: and ``federated_score`` need. Known before fitting, so they can refuse up front.
    _centers_in_input_space = False

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, client_ids=None):
        """Run the federated protocol.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Pooled data, or a list of per-client arrays ``[X_1, ..., X_m]``
            (clients keep their order; rows are numbered client by client;
            DataFrames with the same columns set ``feature_names_in_``), or,
            for vertical methods, a nested list of row groups x feature blocks.
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
        federation = build_federation(self, X, y, client_ids, random_state)
        with progress(self.verbose):
            runtime = current_runtime_factory()(
                federation,
                n_parties=self._n_parties(federation),
                n_jobs=self.n_jobs,
                name=type(self).__name__,
                private_entropy=private_entropy(random_state),
                method=type(self).__name__,
            )
            runtime.stage(
                f"federation of {federation.n_clients} clients, "
                f"{federation.n_samples} samples, {federation.n_features} features"
            )
            self._fit_runtime(runtime, random_state)
        self._keep_input_precision(X)
        return self

    def _keep_input_precision(self, X):
        """Cast what was learnt to the input's precision (a hook; nothing by default)."""

    def _fit_runtime(self, runtime, random_state):
        """Run the protocol on ``runtime`` and store what every fitted estimator has.

        Any runtime works (in-process, Flower). ``labels_`` is set when the
        runtime hands the clients' labels back (a simulation); on a deployed
        federation they stay on the clients, each node writing its own.
        """
        self._run_protocol(runtime, random_state)
        labels = runtime.hand_back("labels")
        if labels is not None:
            self.labels_ = np.asarray(labels)
        self.n_clients_ = runtime.n_clients
        self.client_sizes_ = np.asarray(runtime.client_sizes)
        self.communication_ = runtime.ledger.report()
        runtime.stage("done")
        return self

    def fit_predict(self, X, y=None, client_ids=None):
        """Run the federated protocol and return the label of every input row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of array-like
            Any input form of :meth:`fit`.
        y : array-like of shape (n_samples,), default=None
            Used only by label-skewed partition specifications.
        client_ids : array-like of shape (n_samples,), default=None
            Client of each pooled row.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            ``labels_``: one label per input row, client by client for a list.
        """
        return self.fit(X, y, client_ids=client_ids).labels_

    def server_model(self):
        """A copy of this fitted model as the server holds it: without the simulated parties.

        An in-process fit of a method whose parties keep state for
        ``predict`` (:class:`~skfedclust.OmniFCClustering`'s shares,
        :class:`~skfedclust.DCClustering`'s private maps) keeps them in
        ``session_``: the user of a simulation played every party, and the
        model pickles and copies with them, so that it predicts after
        ``pickle`` or ``joblib``. The session is every party's private state
        (shares of the training rows, private maps); to publish or ship a model
        without it, use this copy. It keeps every server-learned attribute and
        refuses ``predict`` where the parties are needed. For the other
        estimators it is a plain copy.

        Returns
        -------
        model : estimator
            A deep copy of ``self`` whose ``session_`` is ``None``.

        Examples
        --------
        >>> import pickle
        >>> from sklearn.datasets import make_blobs
        >>> from skfedclust import DCClustering
        >>> X, _ = make_blobs(90, centers=3, random_state=0)
        >>> dc = DCClustering(3, random_state=0).fit(X)
        >>> restored = pickle.loads(pickle.dumps(dc))
        >>> bool((restored.predict(X[:5]) == dc.predict(X[:5])).all())
        True
        >>> dc.server_model().session_ is None
        True
        """
        import copy

        check_is_fitted(self)
        session = self.__dict__.pop("session_", None)
        try:
            model = copy.deepcopy(self)
        finally:
            if session is not None:
                self.session_ = session
        if "session_" in vars(self):
            model.session_ = None
        return model

    def _n_parties(self, federation):
        """Number of parties of the protocol (data holders unless it adds more)."""
        return federation.n_clients

    def _default_partition(self):
        """Clients simulated from a pooled ``X`` when ``partition=None``."""
        return IIDPartition(DEFAULT_N_CLIENTS)

    def _min_client_samples(self):
        """Smallest number of rows a client may hold."""
        return 1

    def _min_samples(self):
        """Smallest number of pooled rows the estimator accepts."""
        return max(getattr(self, "n_clusters", 1), 1)

    def _check_client_array(self, Xi, name):
        return check_client_array(Xi, name)


class CentroidPredictMixin:
    """``predict`` by nearest center in ``cluster_centers_``; ``score`` by inertia."""

    _centers_in_input_space = True

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
        return nearest_center(X, self.cluster_centers_)

    def score(self, X, y=None):
        """Opposite of the inertia of ``X`` on the fitted centers.

        Computed here, on ``X``: the caller holds these rows. For the
        federated training data, ``inertia_`` is the same value, obtained by
        a secure sum during ``fit``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to score.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        score : float
            Minus the sum of squared distances of the rows to their nearest
            center in ``cluster_centers_`` (higher is better).
        """
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return -pooled_inertia(X, self.cluster_centers_)
