"""DC-Clustering's analyst: the collaborative representation and its clustering.

Server steps of :class:`~skfedclust.DCClustering` (Kawamata et al., 2025): from
the parties' intermediate representations of the shared anchors, the analyst
finds the collaborative space (the leading left singular vectors of the
stacked anchor representations), the map of every party into it (least
squares on the anchors), and clusters the mapped rows (k-means, or spectral
clustering of their kNN graph). No party's data reaches it, only the
intermediate representations the parties chose to send.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.cluster import KMeans, k_means
from sklearn.manifold import spectral_embedding
from sklearn.neighbors import kneighbors_graph


def _collab_dimension(n_components_collab, singular_values, group_widths, affine, n_anchors):
    max_dim = min(n_anchors, len(singular_values))
    if n_components_collab == "auto":
        dim = min(group_widths) + (1 if affine else 0)
    elif isinstance(n_components_collab, numbers.Integral):
        dim = int(n_components_collab)
    else:
        share = np.cumsum(singular_values) / singular_values.sum()
        dim = int(np.searchsorted(share, n_components_collab - 1e-12) + 1)
    if not 1 <= dim <= max_dim:
        raise ValueError(
            f"n_components_collab={dim} must lie in [1, {max_dim}] (at most n_anchors and the "
            "number of columns the analyst stacks)"
        )
    return dim


# Smallest singular-value ratio for which the Gram-matrix route below keeps
# about ten correct digits (its error grows like eps / ratio**2).
_GRAM_RATIO = 1e-3


def _leading_left_vectors(B, gram, choose_dim):
    """Leading left singular vectors of a tall matrix ``B`` with Gram matrix ``gram``.

    Taken from the eigendecomposition of the small ``gram = B.T @ B``: for
    ``n_anchors`` far above the number of columns this needs a fraction of the
    flops of LAPACK's thin SVD, which forms and multiplies an orthogonal factor
    as tall as ``B``. Squaring costs accuracy for small singular values, so a
    target that needs one below ``_GRAM_RATIO`` times the largest comes from
    the SVD instead. ``choose_dim`` maps the singular values to the number of
    vectors kept.
    """
    eigenvalues, V = np.linalg.eigh(gram)
    s = np.sqrt(eigenvalues[::-1].clip(min=0))
    V = V[:, ::-1]
    dim = choose_dim(s)
    if s[dim - 1] > _GRAM_RATIO * s[0]:
        return (B @ V[:, :dim]) / s[:dim]
    U, s, _ = np.linalg.svd(B, full_matrices=False)
    return U[:, : choose_dim(s)]


def _least_squares(A, gram, target):
    """``pinv(A) @ target`` and its residual norm, through the Gram matrix of ``A``.

    The Gram route is used when ``A`` is well conditioned; the residual
    ``||A G - target||_F`` then comes from small matrices too, unless it is so
    small that the expansion would lose it to cancellation.
    """
    eigenvalues, V = np.linalg.eigh(gram)
    if eigenvalues[0] <= _GRAM_RATIO**2 * eigenvalues[-1]:
        G = np.linalg.lstsq(A, target, rcond=None)[0]
        return G, np.linalg.norm(A @ G - target)
    cross = A.T @ target
    G = V @ ((V.T @ cross) / eigenvalues[:, None])
    target_sq = np.einsum("ij,ij->", target, target)
    residual_sq = np.einsum("ij,ij->", G, gram @ G) - 2 * np.einsum("ij,ij->", G, cross)
    residual_sq += target_sq
    if residual_sq > 1e-6 * target_sq:
        return G, np.sqrt(residual_sq)
    return G, np.linalg.norm(A @ G - target)


def _joined(blocks):
    """The blocks side by side (a single block as it is, without a copy)."""
    return blocks[0] if len(blocks) == 1 else np.hstack(blocks)


def _stacked_anchors(anchor_blocks, affine):
    """All row groups' anchor representations side by side, ``(B, column bounds)``.

    Row group ``i`` owns columns ``bounds[i]:bounds[i + 1]`` of ``B``: its
    parties' blocks in order, then (affine maps) a column of ones.
    """
    widths = [sum(block.shape[1] for block in blocks) + affine for blocks in anchor_blocks]
    bounds = np.cumsum([0, *widths])
    B = np.empty((anchor_blocks[0][0].shape[0], bounds[-1]))
    for blocks, start, stop in zip(anchor_blocks, bounds[:-1], bounds[1:]):
        column = start
        for block in blocks:
            B[:, column : column + block.shape[1]] = block
            column += block.shape[1]
        if affine:
            B[:, stop - 1] = 1.0
    return B, bounds


def dc_server_collaborate(uploads, groups, *, alignment, n_components_collab):
    """Analyst step: collaborative representation from the parties' uploads only.

    Parameters
    ----------
    uploads : list or mapping of (ndarray, ndarray)
        ``(X_tilde, anchor_tilde)`` of every party, indexed by party.
    groups : list of list of int
        Parties of each row group in block order (the public lattice).
    alignment : {"affine", "linear"}
        Form of the maps g.
    n_components_collab : "auto", int or float
        Collaborative dimension (see :class:`DCClustering`).

    Returns
    -------
    X_hat : list of ndarray
        Collaborative representation of each row group.
    target : ndarray of shape (n_anchors, n_components_collab)
        The common target (leading left singular vectors of the stacked anchors).
    maps : list of ndarray
        ``G_i`` of each row group; in affine mode its last row is the translation.
    alignment_error : ndarray
        ``||[anchor_tilde_i, 1] G_i - target||_F`` of each row group.
    """
    affine = alignment == "affine"
    data = [_joined([uploads[c][0] for c in group]) for group in groups]
    B, bounds = _stacked_anchors([[uploads[c][1] for c in group] for group in groups], affine)
    # Each row group's (augmented) anchor block is a view of B: with r = n
    # anchors (the paper's choice) B is as large as the data times the number
    # of row groups, so it is written once rather than stacked twice.
    anchors = [B[:, a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    n_anchors = B.shape[0]
    widths = [A.shape[1] - (1 if affine else 0) for A in anchors]
    for i, A_i in enumerate(anchors):
        if n_anchors < A_i.shape[1]:
            raise ValueError(
                f"n_anchors={n_anchors} is below the dimension of row group {i}: its "
                f"{'augmented ' if affine else ''}intermediate representation has "
                f"{A_i.shape[1]} columns, so the map g cannot be determined; use "
                f"n_anchors >= {max(A.shape[1] for A in anchors)}"
            )
    gram = B.T @ B
    target = _leading_left_vectors(
        B,
        gram,
        lambda s: _collab_dimension(n_components_collab, s, widths, affine, n_anchors),
    )
    maps, X_hat, errors = [], [], []
    for X_i, A_i, a, b in zip(data, anchors, bounds[:-1], bounds[1:]):
        G_i, error = _least_squares(A_i, gram[a:b, a:b], target)
        maps.append(G_i)
        # [X_i, 1] @ G_i without copying X_i: the last row of G_i is the translation.
        X_hat.append(X_i @ G_i[:-1] + G_i[-1] if affine else X_i @ G_i)
        errors.append(error)
    return X_hat, target, maps, np.asarray(errors)


def dc_server_cluster(X_hat, *, clusterer, n_clusters, n_neighbors, n_init, max_iter, random_state):
    """Analyst step: cluster the collaborative representation.

    k-means runs on ``X_hat`` itself. Spectral clustering builds the
    nearest-neighbour graph exactly as
    :class:`~sklearn.cluster.SpectralClustering` with
    ``affinity="nearest_neighbors"`` does and shares one random state between
    the embedding and k-means, so labels equal that estimator's; it is written
    out because the estimator exposes neither the embedding nor its centroids,
    which the parties need.

    Returns ``(Z, centers, labels, n_iter)``: the clustering space (``X_hat``
    or the spectral embedding), the centroids in that space, the labels and
    the iterations of the best k-means run.
    """
    if clusterer == "kmeans":
        km = KMeans(n_clusters, n_init=n_init, max_iter=max_iter, random_state=random_state)
        km.fit(X_hat)
        return X_hat, km.cluster_centers_, km.labels_, km.n_iter_
    graph = kneighbors_graph(X_hat, n_neighbors=n_neighbors, include_self=True)
    affinity = 0.5 * (graph + graph.T)
    Z = spectral_embedding(
        affinity, n_components=n_clusters, random_state=random_state, drop_first=False
    )
    centers, labels, _, n_iter = k_means(
        Z,
        n_clusters,
        n_init=n_init,
        max_iter=max_iter,
        random_state=random_state,
        return_n_iter=True,
    )
    return Z, centers, labels, n_iter
