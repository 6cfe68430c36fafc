"""DC-Clustering: data-collaboration clustering (Kawamata et al., 2025).

The parties sit in a lattice of row groups (institutions holding different
samples) by feature blocks (parties of one institution holding different
features of the same samples). Every party reduces its block and a shared
synthetic anchor matrix with a private affine map f and uploads only the two
reduced matrices. The analyst aligns the row groups through the anchors
(one SVD and one least-squares map g per row group), clusters the aligned
"collaborative representation" and sends every party the centroids and the
clustering rows of its own samples. One round: one upload and one download
per party. The users agree on the anchors before the round, among
themselves (set-up the analyst takes no part in).

Every quantity crosses as a counted message; each party's private map, its
anchor columns and the anchor recipe stay with the users. ``predict`` is a
second protocol with the same parties: they map their new rows with the maps
they kept.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.base import clone
from sklearn.decomposition import PCA
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_array
from sklearn.utils._param_validation import HasMethods, Interval, RealNotInt, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from ..clusterers import nearest_center
from ..federation import (
    Federation,
    InProcessRuntime,
    Reply,
    data_independent,
    releases_nothing,
    releases_rows,
    summary,
)
from ._base import BaseFederatedClustering
from ._dc_analyst import dc_server_cluster, dc_server_collaborate

__all__ = ["DCClustering"]

#: The user who coordinates the anchor set-up (party (0, 0)).
COORDINATOR = 0

# Tags of the protocol's exchanges.
TAG_RANGE = "feature range"
TAG_RECIPE = "anchor recipe"
TAG_SLICE = "anchor slice"
TAG_UPLOAD = "intermediate representations"
TAG_DOWNLOAD = "centroids and clustering rows"
TAG_PREDICT_UP = "intermediate representations of new rows"
TAG_PREDICT_DOWN = "labels of new rows"


# ------------------------------------------------------------------ lattice
def client_columns(runtime):
    """Global feature indices of every party: the public schema of the lattice.

    Which features each party holds is public (every party knows its own
    schema, and the analyst joins the blocks in a fixed order); only the
    values are private.
    """
    columns = runtime.client_columns
    if columns is None:
        return [np.arange(runtime.n_features) for _ in range(runtime.n_clients)]
    return [np.asarray(c, dtype=np.intp) for c in columns]


def dc_lattice(row_groups, columns, client_sizes, n_features):
    """Row groups and feature blocks of a federation, checked to form a lattice.

    Parameters
    ----------
    row_groups : list of list of int or None
        Parties of each row group (``None``: a horizontal federation, one
        party per row group).
    columns : list of ndarray of int
        Global feature indices of each party.
    client_sizes : ndarray of int
        Rows of each party.
    n_features : int
        Number of features.

    Returns
    -------
    groups : list of list of int
        Parties of each row group, in block order.
    blocks : list of ndarray of int
        Global feature indices of each block, the same in every row group.
    """
    all_features = np.arange(n_features)
    if row_groups is None:
        return [[c] for c in range(len(columns))], [all_features]
    groups = [list(g) for g in row_groups]
    blocks = [np.asarray(columns[c]) for c in groups[0]]
    for i, group in enumerate(groups):
        if len(group) != len(blocks):
            raise ValueError(
                "every row group must cover the same features in the same block layout: "
                f"row group {i} has {len(group)} feature blocks but row group 0 has {len(blocks)}"
            )
        for j, c in enumerate(group):
            if client_sizes[c] != client_sizes[group[0]]:
                raise ValueError(
                    f"the parties of row group {i} must hold the same samples in the same "
                    f"order; party {c} (block {j}) holds {client_sizes[c]} rows but party "
                    f"{group[0]} holds {client_sizes[group[0]]}"
                )
            if not np.array_equal(columns[c], blocks[j]):
                raise ValueError(
                    "every row group must cover the same features in the same block layout: "
                    f"block {j} of row group {i} holds features {columns[c].tolist()} but "
                    f"block {j} of row group 0 holds {blocks[j].tolist()}"
                )
    covered = np.sort(np.concatenate(blocks))
    if not np.array_equal(covered, all_features):
        raise ValueError(
            f"the feature blocks of a row group must cover each of the {n_features} "
            "features exactly once"
        )
    return groups, blocks


# ------------------------------------------------------------------ users
@releases_nothing
def dc_party_join(data, inbox, state, party, *, columns, n_components, hands_labels):
    """Client step (no message): the party takes its place in the public lattice.

    It keeps the global indices of its features, its intermediate dimension
    (``None`` for a user-supplied f) and whether it hands its row group's
    labels to its user (one party per row group does: the parties of a row
    group hold the same samples and get the same labels).
    """
    return Reply(
        keep={
            "columns": np.asarray(columns, dtype=np.intp),
            "n_components": n_components,
            "hands_labels": bool(hands_labels),
        }
    )


def _feature_range(data):
    return data.min(axis=0), data.max(axis=0)


@summary
def dc_party_feature_range(data, inbox, state, party, *, coordinator):
    """Set-up client step (users only): send the coordinator the party's feature ranges.

    The per-feature minima and maxima of the party's block go to the
    coordinating user, never to the analyst.
    """
    return Reply(to_peers={coordinator: _feature_range(data)})


def dc_user_anchor_spec(ranges, block_of_party, n_features, *, anchor_range, anchor_seed):
    """Coordinating user: combine the parties' feature ranges into the anchor recipe.

    The recipe (a seed and one sampling range per feature) goes to the other
    users only; the analyst must never learn it, or it could regenerate the
    anchors and fit every party's private f by least squares. The seed is the
    coordinator's private draw: a seed the analyst drew would give it the
    anchors up to each feature's range, and with them every f up to a
    per-feature scaling.
    """
    low = np.full(n_features, np.inf)
    high = np.full(n_features, -np.inf)
    for (lo, hi), cols in zip(ranges, block_of_party):
        low[cols] = np.minimum(low[cols], lo)
        high[cols] = np.maximum(high[cols], hi)
    if anchor_range == "global":
        low[:] = low.min()
        high[:] = high.max()
    return {"seed": int(anchor_seed), "low": low, "high": high}


def generate_anchor_columns(recipe, columns, n_anchors):
    """Anchor columns ``columns`` drawn uniformly from the recipe's ranges.

    Each feature has its own random stream (keyed by the recipe seed and the
    feature index), so a party regenerates exactly its own anchor columns
    without drawing the others, and all parties agree on every column.
    """
    out = np.empty((n_anchors, len(columns)))
    for j, k in enumerate(columns):
        rng = np.random.default_rng([recipe["seed"], int(k)])
        out[:, j] = rng.uniform(recipe["low"][k], recipe["high"][k], n_anchors)
    return out


@summary
def dc_coordinator_anchor_recipe(
    data,
    inbox,
    state,
    party,
    *,
    coordinator,
    block_of_party,
    n_features,
    anchor_range,
    n_anchors,
):
    """Set-up client step of the coordinating user: the anchor recipe, to the users only.

    Combines its own feature ranges with those the other parties sent (min
    of the minima, max of the maxima), draws the recipe's seed from its
    private generator, sends the recipe to every other party and keeps its
    own anchor columns.
    """
    anchor_seed = int(party.rng.integers(np.iinfo(np.int32).max))
    ranges = {**inbox.get(TAG_RANGE, {}), coordinator: _feature_range(data)}
    recipe = dc_user_anchor_spec(
        [ranges[c] for c in range(len(block_of_party))],
        block_of_party,
        n_features,
        anchor_range=anchor_range,
        anchor_seed=anchor_seed,
    )
    others = {c: recipe for c in range(len(block_of_party)) if c != coordinator}
    own = generate_anchor_columns(recipe, state["columns"], n_anchors)
    return Reply(to_peers=others, keep={TAG_SLICE: own})


@data_independent
def dc_coordinator_anchor_slices(
    data, inbox, state, party, *, coordinator, anchors, block_of_party
):
    """Set-up client step of the coordinating user: given anchors, one slice per party.

    The user-supplied anchors are known to the users only; each party gets
    the columns of its own features.
    """
    slices = {c: anchors[:, cols] for c, cols in enumerate(block_of_party) if c != coordinator}
    return Reply(to_peers=slices, keep={TAG_SLICE: anchors[:, state["columns"]]})


def _anchor_slice(inbox, state, n_anchors):
    """The party's own anchor columns: kept (coordinator), received, or regenerated."""
    if TAG_SLICE in state:
        return state[TAG_SLICE]
    if TAG_SLICE in inbox:
        (slice_,) = inbox[TAG_SLICE].values()
        return slice_
    (recipe,) = inbox[TAG_RECIPE].values()
    return generate_anchor_columns(recipe, state["columns"], n_anchors)


def make_intermediate_map(intermediate, n_components, rng):
    """A party's private dimensionality reduction f (unfitted).

    Any randomness of f (PCA's randomized solver, a random projection given
    as ``intermediate``) comes from ``rng``, the party's private generator:
    a public seed would let the analyst rebuild f.
    """
    seed = int(rng.integers(np.iinfo(np.int32).max))
    if isinstance(intermediate, str):
        # Standardise then PCA, as in all experiments of the paper.
        return make_pipeline(StandardScaler(), PCA(n_components=n_components, random_state=seed))
    f = clone(intermediate)
    if "random_state" in f.get_params(deep=False):
        f.set_params(random_state=seed)
    return f


@releases_rows("DC-Clustering sends every row through the party's private map")
def dc_party_intermediate(data, inbox, state, party, *, intermediate, n_anchors):
    """Client step: fit the private f on local data, reduce the data and the anchors.

    Sends ``(X_tilde, anchor_tilde)`` to the analyst (the only upload of the
    protocol); f, drawn from the party's private generator, and the anchor
    columns stay with the party.
    """
    anchor_block = _anchor_slice(inbox, state, n_anchors)
    f = make_intermediate_map(intermediate, state["n_components"], party.rng)
    X_tilde = np.asarray(f.fit_transform(data), dtype=np.float64)
    if X_tilde.shape[1] >= data.shape[1] and not party.policy.dc_full_rank_maps:
        # The server with any one party (the anchors' recipe) would solve for f
        # from the anchors and their images, and invert it.
        raise PermissionError(
            f"this node's policy maps its {data.shape[1]} features to fewer dimensions "
            f"(dc-full-rank-maps=false); asked for {X_tilde.shape[1]}: the server colluding "
            "with one party could invert the map"
        )
    if isinstance(intermediate, str):
        anchor_tilde = _scaled_pca_transform(f, anchor_block)
    else:
        anchor_tilde = np.asarray(f.transform(anchor_block), dtype=np.float64)
    return Reply(send=(X_tilde, anchor_tilde), keep={"f": f, TAG_SLICE: anchor_block})


def _scaled_pca_transform(f, X):
    """``f.transform(X)`` for a fitted scaler + PCA pipeline, as one affine map.

    ``((X - mean) / scale - pca_mean) @ components.T`` folded into a single
    product: the anchors are the party's largest matrix.
    """
    scaler, pca = f[0], f[1]
    weights = pca.components_.T / scaler.scale_[:, None]
    offset = (scaler.mean_ / scaler.scale_ + pca.mean_) @ pca.components_.T
    return X @ weights - offset


@releases_nothing
def dc_party_labels(data, inbox, state, party):
    """Client step: label the party's samples by the nearest downloaded centroid.

    Nothing is sent. The party of its row group that hands the labels to its
    user declares them as its output.
    """
    centers, Z_party = inbox[TAG_DOWNLOAD]
    labels = nearest_center(Z_party, centers)
    return Reply(output={"labels": labels} if state["hands_labels"] else None)


@releases_rows("DC-Clustering sends every new row through the party's private map")
def dc_party_predict_upload(data, inbox, state, party):
    """Client step of predict: map the party's new rows with the f it kept.

    Sends ``f(X_new)``, the intermediate representation of its features of
    the new rows; f never leaves the party.
    """
    return Reply(send=np.asarray(state["f"].transform(data), dtype=np.float64))


@releases_nothing
def dc_party_predict_labels(data, inbox, state, party):
    """Client step of predict: take the labels of the new rows the analyst sent."""
    labels = np.asarray(inbox[TAG_PREDICT_DOWN], dtype=np.intp)
    return Reply(output={"labels": labels} if state["hands_labels"] else None)


# ------------------------------------------------------------------ estimator
def dc_analyst_step(
    uploads,
    *,
    groups,
    alignment,
    n_components_collab,
    clusterer,
    n_clusters,
    n_neighbors,
    n_init,
    max_iter,
    random_state,
):
    """Server step (analyst): alignment and clustering, from the uploads only.

    Parameters
    ----------
    uploads : Received
        ``(X_tilde, anchor_tilde)`` of every party.
    groups : list of list of int
        Parties of each row group in block order (the public lattice).
    alignment, n_components_collab
        See :func:`dc_server_collaborate`.
    clusterer, n_clusters, n_neighbors, n_init, max_iter, random_state
        See :func:`dc_server_cluster`.

    Returns
    -------
    result : dict
        ``X_hat``, ``target``, ``maps`` and ``errors`` of the alignment, and
        ``Z`` (rows stacked row group by row group), ``centers``, ``labels``
        and ``n_iter`` of the clustering.
    """
    # Every matrix up to the clustering is thin (samples or anchors by at most
    # a few tens of columns): one BLAS thread does it faster than several that
    # must synchronise after each small call. The clustering keeps its threads.
    with threadpool_limits(limits=1, user_api="blas"):
        X_hat, target, maps, errors = dc_server_collaborate(
            uploads, groups, alignment=alignment, n_components_collab=n_components_collab
        )
    Z, centers, labels, n_iter = dc_server_cluster(
        np.vstack(X_hat),
        clusterer=clusterer,
        n_clusters=n_clusters,
        n_neighbors=n_neighbors,
        n_init=n_init,
        max_iter=max_iter,
        random_state=random_state,
    )
    return {
        "X_hat": X_hat,
        "target": target,
        "maps": maps,
        "errors": errors,
        "Z": Z,
        "centers": centers,
        "labels": labels,
        "n_iter": n_iter,
    }


def dc_analyst_predict(
    uploads,
    *,
    groups,
    alignment,
    maps,
    clusterer,
    centers,
    X_hat,
    labels,
    n_neighbors,
):
    """Server step of predict (analyst): label new rows from their parties' uploads.

    Each row group's joined intermediate representations go through its map
    g; a row then gets the nearest centroid (k-means) or the majority label
    of its ``n_neighbors`` nearest training rows in the collaborative space
    (spectral clustering, which has no out-of-sample rule).

    Parameters
    ----------
    uploads : Received
        ``f(X_new)`` of every party of the row groups that have new rows.
    groups : list of list of int
        Parties of each row group in block order.
    alignment : {"affine", "linear"}
        Form of the maps g.
    maps : list of ndarray
        The map g of each row group.
    clusterer : {"kmeans", "spectral"}
        The clustering of the fit.
    centers : ndarray
        Centroids of the fit (k-means).
    X_hat, labels : ndarray
        The analyst's training rows and their labels (spectral vote).
    n_neighbors : int
        Voters of the spectral rule.

    Returns
    -------
    labels : dict
        ``{row group: labels of its new rows}``.
    """
    vote = None
    if clusterer == "spectral":
        vote = KNeighborsClassifier(n_neighbors=min(n_neighbors, len(labels)))
        vote.fit(X_hat, labels)
    out = {}
    for i, group in enumerate(groups):
        if group[0] not in uploads:
            continue
        X_tilde = np.hstack([uploads[c] for c in group])
        if alignment == "affine":
            X_tilde = np.hstack([X_tilde, np.ones((len(X_tilde), 1))])
        X_new = X_tilde @ maps[i]
        if clusterer == "kmeans":
            out[i] = nearest_center(X_new, centers)
        else:
            out[i] = vote.predict(X_new)
    return out


class DCClustering(BaseFederatedClustering):
    """DC-Clustering: one-round clustering over horizontally and vertically split data.

    The parties form a lattice of row groups (institutions holding different
    samples) by feature blocks (parties of one institution holding different
    features of the same samples). All parties share a synthetic anchor
    matrix, drawn uniformly over the feature ranges from a recipe the analyst
    never sees. Each party fits a private map f (standardise, then PCA) on its
    own block and uploads only the reduced block and the reduced anchor slice.
    The analyst joins the blocks of each row group, takes the leading left
    singular vectors of the stacked anchor representations as a common target,
    maps each row group onto it by least squares (one map g per row group),
    clusters the result with k-means or spectral clustering and sends every
    party the centroids and the clustering-space rows of its samples; each
    party labels its samples by the nearest centroid. One round: one upload and
    one download per party.

    The default settings follow the paper's text (per-feature anchor ranges,
    ``n_features - 1`` intermediate components), which is lossy and depends on
    which features share a party. ``anchor_range="global"`` with
    ``n_components_intermediate=None`` is the lossless variant: the
    collaborative representation then equals the pooled data up to an affine
    map fixed by the anchors, and clustering it equals central clustering of
    the raw data, at the price of the dimensionality-reduction layer of the
    privacy argument. Read more in the :ref:`User Guide <dcclustering>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    clusterer : {"kmeans", "spectral"}, default="kmeans"
        Clustering run by the analyst on the collaborative representation.
        ``"spectral"`` uses a binary k-nearest-neighbour graph
        (``n_neighbors``), the normalised Laplacian embedding and k-means, as
        :class:`~sklearn.cluster.SpectralClustering` does.
    anchors : "uniform" or array-like of shape (n_anchors, n_features), default="uniform"
        Shared anchor data. ``"uniform"`` draws each feature uniformly over
        ``anchor_range``; an array is used as given (users only ever see it).
    n_anchors : "auto" or int, default="auto"
        Number of anchor rows r; ``"auto"`` uses the total number of samples,
        as in the paper (at least ``n_features + 1``). Must be at least the
        width of every row group's (augmented) intermediate representation.
    anchor_range : {"per_feature", "global"}, default="per_feature"
        Range of the uniform anchors: each feature's own minimum and maximum
        over all parties (the paper's text), or one minimum and maximum over
        all features (isotropic anchors). The collaborative geometry is
        whitened by the anchor covariance, so ``"per_feature"`` behaves like
        min-max scaled data and ``"global"`` like raw data.
    intermediate : "pca" or estimator with fit and transform, default="pca"
        The private map f of each party: ``"pca"`` is a standard scaler
        followed by PCA (the paper's choice); a transformer is cloned and
        fitted by every party (``n_components_intermediate`` is then ignored).
    n_components_intermediate : "n_features-1", int, float or None, default="n_features-1"
        Dimension of each party's intermediate representation:
        ``"n_features-1"`` (the paper), an int, a float in (0, 1) for the share
        of variance kept by PCA, or ``None`` for all features (lossless). A
        party with one feature keeps it, with a warning.
    n_components_collab : "auto", int or float, default="auto"
        Collaborative dimension m̂. ``"auto"`` is the smallest row-group
        intermediate dimension, plus one for the affine alignment; a float in
        (0, 1] keeps the leading singular vectors holding that share of the
        singular values' sum.
    alignment : {"affine", "linear"}, default="affine"
        Affine maps g (with translation, used in the paper's experiments) or
        linear maps (the original data-collaboration analysis).
    n_neighbors : int, default=10
        Neighbours of the spectral graph, and voters of ``predict`` in spectral
        mode; capped at ``n_samples - 1`` with a warning.
    n_init : int, default=10
        Restarts of k-means (the paper used scikit-learn 1.2's default of 10).
    max_iter : int, default=300
        Iterations of each k-means run.
    partition : int, partition specification or None, default=None
        How to simulate parties from a pooled ``X``: ``None`` gives three IID row
        groups holding all features, as for every estimator of the package; an
        int that many IID row groups; a
        :class:`~skfedclust.partition.HybridPartition` or
        :class:`~skfedclust.partition.VerticalPartition` a lattice. Ignored for
        a list of client arrays (each a row group), a nested list
        ``[[X_11, X_12], [X_21, X_22]]`` (row groups × feature blocks) or with
        ``client_ids``.
    n_jobs : int, default=None
        Number of parallel party workers (joblib).
    random_state : int, RandomState instance or None, default=None
        Seeds, in this order, the partition, every party's public seed and the
        analyst's clustering. The parties' private generators (the anchor
        recipe's seed, any randomness of the private maps) are derived from
        it without drawing from it, so a fit is reproducible; the analyst's
        side never sees them. On Flower each node draws its own.
    verbose : int, default=0
        Print progress per protocol stage (``1``), and every few seconds of a
        long client step how many clients are done; ``2`` adds debug detail.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Label of each input row, as computed and handed back by its row
        group's first party (not set on Flower, where each node writes its
        own).
    cluster_centers_ : ndarray of shape (n_clusters, n_components)
        Centroids in the clustering space: the collaborative space for
        k-means, the spectral embedding for spectral clustering.
    collaborative_representation_ : ndarray of shape (n_samples, m̂)
        The analyst's aligned representation X̂, in the analyst's row order:
        row group by row group, each in its parties' row order. That is the
        input order for a list of clients or a grid; for a pooled ``X`` with
        a partition, the rows of row group 0 come first.
    embedding_ : ndarray of shape (n_samples, n_clusters)
        Spectral embedding of X̂ (spectral mode only), in the analyst's row
        order.
    analyst_labels_ : ndarray of shape (n_samples,)
        The analyst's clustering of X̂, in the analyst's row order (the
        parties' labels, which they compute from the download, are the same).
    target_ : ndarray of shape (n_anchors, m̂)
        The common target the analyst aligns every row group's anchors to.
    collaboration_maps_ : list of ndarray
        The analyst's map g of each row group, of shape
        (intermediate width + 1, m̂) in affine mode, the last
        row being the translation.
    anchor_alignment_error_ : ndarray of shape (n_row_groups,)
        Frobenius residual of each row group's anchors mapped onto the target
        (zero up to rounding in the lossless case).
    n_components_intermediate_ : ndarray of shape (n_clients,)
        Intermediate dimension of each party.
    n_components_collab_ : int
        Collaborative dimension m̂.
    row_groups_ : list of list of int
        Parties of each row group, in feature-block order.
    feature_blocks_ : list of ndarray
        Feature indices of each block.
    session_ : Session or None
        The simulated parties with the private maps they kept, for
        :meth:`predict` (an in-process fit; pickled and copied with the
        model). ``None`` after a Flower fit and in :meth:`server_model`'s copy.
    n_clients_ : int
        Number of parties.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows held by each party.
    communication_ : dict
        Rounds and bytes exchanged; see :class:`~skfedclust.federation.Ledger`. One
        round (one upload and one download per party); the users-only
        agreement on the anchors before it (feature ranges to the
        coordinating user and the anchor recipe back, or slices of given
        anchors) is peer traffic counted in ``setup_rounds``.
    n_iter_ : int
        Iterations of the analyst's best k-means run.
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    skfedclust.KumarFederatedKMeans : Multi-round federated k-means baseline
        used in the paper's comparison (horizontal data only).

    Notes
    -----
    The fitted attributes are what the analyst holds. The anchors and every
    party's private map f stay with the users: there is no ``anchors_`` and
    no fitted f. ``predict`` is not part of the paper: it runs a second
    protocol with the parties that fitted the model, which map the new rows
    with the f they kept; the analyst applies its g and assigns them to the
    nearest centroid (k-means) or by a vote of their ``n_neighbors`` nearest
    training rows in the collaborative space (spectral). An in-process fit
    keeps the simulated parties in ``session_`` (pickled and copied with the
    model: it is their private maps); :meth:`server_model` drops them, and that
    copy, or a model fitted on Flower, cannot predict.

    References
    ----------
    .. [1] A. Kawamata, K. Kamijo, M. Kihira, A. Toyoda, T. Nakayama,
       A. Imakura, T. Sakurai and Y. Okada, "A new type of federated
       clustering: A non-model-sharing approach", arXiv:2506.10244, 2025.
    .. [2] A. Imakura and T. Sakurai, "Data collaboration analysis framework
       using centralization of individual intermediate representations for
       distributed data sets", ASCE-ASME J. Risk Uncertain. Eng. Syst. A, 2020.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import DCClustering
    >>> X, _ = make_blobs(400, n_features=4, centers=3, random_state=0)
    >>> grid = [[X[:200, :2], X[:200, 2:]], [X[200:, :2], X[200:, 2:]]]
    >>> dc = DCClustering(n_clusters=3, random_state=0).fit(grid)
    >>> dc.labels_.shape, dc.communication_["rounds"]
    ((400,), 1)
    >>> dc.collaborative_representation_.shape
    (400, 3)
    """

    _supports_vertical = True

    _parameter_constraints: dict = {
        **BaseFederatedClustering._parameter_constraints,
        "n_clusters": [Interval(numbers.Integral, 1, None, closed="left")],
        "clusterer": [StrOptions({"kmeans", "spectral"})],
        "anchors": [StrOptions({"uniform"}), "array-like"],
        "n_anchors": [StrOptions({"auto"}), Interval(numbers.Integral, 1, None, closed="left")],
        "anchor_range": [StrOptions({"per_feature", "global"})],
        "intermediate": [StrOptions({"pca"}), HasMethods(["fit", "transform"])],
        "n_components_intermediate": [
            StrOptions({"n_features-1"}),
            Interval(numbers.Integral, 1, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="neither"),
            None,
        ],
        "n_components_collab": [
            StrOptions({"auto"}),
            Interval(numbers.Integral, 1, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="right"),
        ],
        "alignment": [StrOptions({"affine", "linear"})],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        clusterer="kmeans",
        anchors="uniform",
        n_anchors="auto",
        anchor_range="per_feature",
        intermediate="pca",
        n_components_intermediate="n_features-1",
        n_components_collab="auto",
        alignment="affine",
        n_neighbors=10,
        n_init=10,
        max_iter=300,
        partition=None,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.clusterer = clusterer
        self.anchors = anchors
        self.n_anchors = n_anchors
        self.anchor_range = anchor_range
        self.intermediate = intermediate
        self.n_components_intermediate = n_components_intermediate
        self.n_components_collab = n_components_collab
        self.alignment = alignment
        self.n_neighbors = n_neighbors
        self.n_init = n_init
        self.max_iter = max_iter
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------ helpers
    def _party_dimension(self, n_rows, n_features, name):
        """Requested intermediate dimension of one party (PCA mode)."""
        spec = self.n_components_intermediate
        if isinstance(spec, numbers.Real) and not isinstance(spec, numbers.Integral):
            return float(spec)
        if spec is None:
            dim = n_features
        elif spec == "n_features-1":
            if n_features == 1:
                warnings.warn(
                    f"party {name} holds a single feature, which cannot be reduced: it is "
                    "shared unreduced (intermediate dimension 1), so f gives no "
                    "dimensionality-reduction protection for this party",
                    UserWarning,
                    stacklevel=_STACKLEVEL,
                )
            dim = max(1, n_features - 1)
        else:
            dim = int(spec)
            if dim > n_features:
                raise ValueError(
                    f"n_components_intermediate={dim} exceeds the {n_features} features of "
                    f"party {name}"
                )
        if dim > n_rows:
            warnings.warn(
                f"party {name} holds {n_rows} samples, fewer than its intermediate "
                f"dimension {dim}; PCA keeps {n_rows} components",
                UserWarning,
                stacklevel=_STACKLEVEL,
            )
            dim = n_rows
        return dim

    def _given_anchors(self, n_features):
        """The user-supplied anchors, validated and copied (``None`` for uniform anchors)."""
        if isinstance(self.anchors, str) and self.anchors == "uniform":
            return None
        # A copy: anchors_ must not change when the caller edits its array.
        anchors = check_array(self.anchors, dtype=np.float64, input_name="anchors", copy=True)
        if anchors.shape[1] != n_features:
            raise ValueError(
                f"anchors has {anchors.shape[1]} features but the data has {n_features}"
            )
        return anchors

    def _n_anchors(self, n_samples, n_features, given):
        if given is not None:
            return len(given)
        if self.n_anchors != "auto":
            return int(self.n_anchors)
        # The paper's r = n, raised to the widest possible affine system so
        # that tiny data sets with many features stay solvable.
        return max(n_samples, n_features + 1)

    def _min_samples(self):
        # One sample gives a single anchor row, too few to fit an affine map.
        return max(self.n_clusters, 2)

    def _check_neighbors(self, n_samples):
        if self.n_neighbors <= n_samples - 1:
            return self.n_neighbors
        capped = max(1, n_samples - 1)
        warnings.warn(
            f"n_neighbors={self.n_neighbors} is not below n_samples={n_samples}; using {capped}",
            UserWarning,
            stacklevel=_STACKLEVEL,
        )
        return capped

    # ------------------------------------------------------------ protocol
    def _run_protocol(self, runtime, random_state):
        groups, blocks = dc_lattice(
            runtime.row_groups, client_columns(runtime), runtime.client_sizes, runtime.n_features
        )
        # The analyst stacks the row groups in order, each in its parties' row
        # order: public metadata (the lattice and the row counts) fixes where
        # every row group's rows sit, and nothing else about the rows is needed.
        group_sizes = [int(runtime.client_sizes[g[0]]) for g in groups]
        n_samples, n_features = sum(group_sizes), runtime.n_features
        given = self._given_anchors(n_features)
        if given is not None and not isinstance(runtime, InProcessRuntime):
            # Given anchors come from whoever runs fit: in a simulation the user
            # who plays every party, on a deployed federation the analyst.
            raise ValueError(
                "anchors given as an array would be sent by the server, so the analyst would "
                "know them and could fit every party's private map; on a deployed federation "
                "use anchors='uniform' (the users draw them among themselves)"
            )
        n_anchors = self._n_anchors(n_samples, n_features, given)
        block_of_party = self._join_lattice(runtime, groups, blocks)
        self._share_anchors(runtime, block_of_party, given, n_anchors)

        runtime.stage("client step: private intermediate representations (the upload)")
        uploads = runtime.run(
            dc_party_intermediate,
            tag=TAG_UPLOAD,
            intermediate=self.intermediate,
            n_anchors=n_anchors,
        )

        runtime.stage("server step (analyst): alignment and clustering")
        n_neighbors = self._check_neighbors(n_samples) if self.clusterer == "spectral" else None
        result = runtime.server(
            dc_analyst_step,
            uploads,
            groups=groups,
            alignment=self.alignment,
            n_components_collab=self.n_components_collab,
            clusterer=self.clusterer,
            n_clusters=self.n_clusters,
            n_neighbors=n_neighbors,
            n_init=self.n_init,
            max_iter=self.max_iter,
            random_state=random_state,
        )
        centers, Z = result["centers"], result["Z"]
        offsets = np.cumsum([0] + group_sizes)
        runtime.send(
            {
                c: (centers, Z[offsets[i] : offsets[i + 1]])
                for i, group in enumerate(groups)
                for c in group
            },
            tag=TAG_DOWNLOAD,
        )

        runtime.stage("client step: nearest-centroid labels")
        runtime.run(dc_party_labels, tag="labels")
        self._keep_analysts_view(result, uploads, groups, blocks)
        # The parties, with the private maps they kept, for predict (None on a
        # deployed federation, whose nodes keep nothing after the fit): the user
        # of a simulation played them, and they travel with the model.
        self.session_ = runtime.party_session()

    def _join_lattice(self, runtime, groups, blocks):
        """Each party learns its own place in the public lattice; nothing is sent.

        Returns the feature block of every party.
        """
        block_of_party = [None] * runtime.n_clients
        dims = [None] * runtime.n_clients
        for i, group in enumerate(groups):
            for j, c in enumerate(group):
                block_of_party[c] = blocks[j]
                if isinstance(self.intermediate, str):
                    dims[c] = self._party_dimension(
                        runtime.client_sizes[c], len(blocks[j]), f"({i}, {j})"
                    )
        runtime.run(
            dc_party_join,
            tag="lattice",
            per_client={
                c: {
                    "columns": block_of_party[c],
                    "n_components": dims[c],
                    "hands_labels": c == groups[_row_group_of(groups, c)][0],
                }
                for c in range(runtime.n_clients)
            },
        )
        return block_of_party

    def _share_anchors(self, runtime, block_of_party, given, n_anchors):
        """Set-up among the users: the shared anchors, drawn by them or sliced from ``given``."""
        n_features = runtime.n_features
        runtime.stage("set-up (users only): shared anchors")
        others = [c for c in range(runtime.n_clients) if c != COORDINATOR]
        if given is None:
            if others:
                runtime.run(
                    dc_party_feature_range,
                    tag=TAG_RANGE,
                    clients=others,
                    setup=True,
                    coordinator=COORDINATOR,
                )
            runtime.run(
                dc_coordinator_anchor_recipe,
                tag=TAG_RECIPE,
                clients=[COORDINATOR],
                setup=True,
                coordinator=COORDINATOR,
                block_of_party=block_of_party,
                n_features=n_features,
                anchor_range=self.anchor_range,
                n_anchors=n_anchors,
            )
        else:
            runtime.run(
                dc_coordinator_anchor_slices,
                tag=TAG_SLICE,
                clients=[COORDINATOR],
                setup=True,
                coordinator=COORDINATOR,
                anchors=given,
                block_of_party=block_of_party,
            )

    def _keep_analysts_view(self, result, uploads, groups, blocks):
        """What the analyst holds, in its own row order (row group by row group)."""
        centers, Z = result["centers"], result["Z"]
        self.cluster_centers_ = centers
        self.collaborative_representation_ = np.vstack(result["X_hat"])
        if self.clusterer == "spectral":
            self.embedding_ = Z
        else:
            self.__dict__.pop("embedding_", None)
        self.analyst_labels_ = np.asarray(result["labels"], dtype=np.intp)
        self.target_ = result["target"]
        self.collaboration_maps_ = result["maps"]
        self.anchor_alignment_error_ = result["errors"]
        self.n_components_intermediate_ = np.array([u[0].shape[1] for u in uploads.list()])
        self.n_components_collab_ = result["target"].shape[1]
        self.row_groups_ = groups
        self.n_iter_ = result["n_iter"]
        self.feature_blocks_ = blocks

    # ------------------------------------------------------------ predict
    def _check_row_group(self, row_group, n_samples):
        n_groups = len(self.row_groups_)
        values = np.asarray(row_group)
        if values.ndim > 1 or (values.ndim == 1 and len(values) != n_samples):
            raise ValueError(
                f"row_group must be one int or one int per row of X: X has {n_samples} rows "
                f"but row_group has shape {values.shape}"
            )
        if values.dtype.kind not in "iu":
            raise ValueError(
                f"row_group must be integers (row group indices), got dtype {values.dtype}"
            )
        outside = values[(values < 0) | (values >= n_groups)]
        if outside.size:
            raise ValueError(
                f"row_group {int(outside.flat[0])} is out of range: the model has {n_groups} "
                f"row groups, numbered 0 to {n_groups - 1}"
            )
        return np.broadcast_to(values, (n_samples,))

    def _predict_federation(self, X, row_group):
        """The new rows as the parties hold them: party (i, j) has block j of group i's rows."""
        n_clients = sum(len(g) for g in self.row_groups_)
        client_rows, client_cols = [None] * n_clients, [None] * n_clients
        for i, group in enumerate(self.row_groups_):
            rows = np.flatnonzero(row_group == i)
            for c, cols in zip(group, self.feature_blocks_):
                client_rows[c], client_cols[c] = rows, np.asarray(cols)
        return Federation(X, client_rows, client_cols, [list(g) for g in self.row_groups_])

    def predict(self, X, row_group=0):
        """Assign new samples of a known row group to clusters (beyond the paper).

        A second protocol with the parties that fitted the model: each party of
        the row group maps its features of the new rows with the private f it
        kept and sends the result; the analyst applies the row group's g and
        gives each row the nearest centroid (k-means) or the majority label of
        its ``n_neighbors`` nearest training rows in the collaborative space
        (spectral); the parties get the labels back. With k-means, the
        training rows of a row group get their ``labels_`` back.

        The private maps never leave the parties, which an in-process fit
        keeps in ``session_`` (they travel with a pickled model): the server's
        copy (:meth:`server_model`) or a model fitted on Flower raises a
        ``RuntimeError``. On
        Flower the nodes label their own new rows with
        :func:`~skfedclust.flower.predict_on_flower` (fit with
        ``keep_for_predict=True``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New samples with all features, in the order used for fitting.
        row_group : int or array-like of shape (n_samples,), default=0
            Row group of every sample, or one row group for all of them.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Cluster of each sample.
        """
        check_is_fitted(self, "collaboration_maps_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        row_group = self._check_row_group(row_group, X.shape[0])
        session = getattr(self, "session_", None)
        if session is None:
            raise RuntimeError(
                "DCClustering.predict needs the parties that fitted this model: each maps its "
                "new rows with its private map f, which never leaves it. An in-process fit "
                "keeps them in session_; this model has none: it is the server's copy "
                "(server_model()) or was fitted on a deployed federation whose nodes keep "
                "nothing after the fit. "
                "Refit, or label new rows with fit_predict on the parties' data; on Flower, "
                "fit with keep_for_predict=True and call skfedclust.flower.predict_on_flower."
            )
        runtime = InProcessRuntime(
            self._predict_federation(X, row_group),
            n_jobs=self.n_jobs,
            name=f"{type(self).__name__}.predict",
            session=session,
        )
        present = [i for i in range(len(self.row_groups_)) if np.any(row_group == i)]
        self._predict_protocol(runtime, present)
        return np.asarray(runtime.hand_back("labels"), dtype=np.intp)

    def _predict_runtime(self, runtime):
        """The predict protocol on a runtime whose parties hold their new rows (Flower).

        A row group takes part when its parties hold new rows, the same
        number each (their features of the same rows). Returns the labels the
        analyst assigned, by party.
        """
        sizes = np.asarray(runtime.client_sizes)
        present = []
        for i, group in enumerate(self.row_groups_):
            counts = sizes[list(group)]
            if not counts.any():
                continue
            if np.any(counts != counts[0]):
                raise ValueError(
                    f"the parties {list(group)} of row group {i} hold {counts.tolist()} new "
                    "rows: each holds its features of the same new rows"
                )
            present.append(i)
        if not present:
            raise ValueError("no party holds new rows to predict")
        labels = self._predict_protocol(runtime, present)
        return {c: labels[i] for i in present for c in self.row_groups_[i]}

    def _predict_protocol(self, runtime, present):
        """Upload, assignment by the analyst, labels back: the analyst's labels by row group."""
        parties = [c for i in present for c in self.row_groups_[i]]
        uploads = runtime.run(dc_party_predict_upload, tag=TAG_PREDICT_UP, clients=parties)
        labels = runtime.server(
            dc_analyst_predict,
            uploads,
            groups=self.row_groups_,
            alignment=self.alignment,
            maps=self.collaboration_maps_,
            clusterer=self.clusterer,
            centers=self.cluster_centers_,
            X_hat=self.collaborative_representation_,
            labels=self.analyst_labels_,
            n_neighbors=self.n_neighbors,
        )
        runtime.send(
            {c: labels[i] for i in present for c in self.row_groups_[i]}, tag=TAG_PREDICT_DOWN
        )
        runtime.run(dc_party_predict_labels, tag="predicted labels", clients=parties)
        return labels


def _row_group_of(groups, party):
    return next(i for i, group in enumerate(groups) if party in group)


# Warnings of the estimator point at the caller of fit: the warning helper <-
# _run_protocol <- fit <- _fit_context <- caller.
_STACKLEVEL = 5
