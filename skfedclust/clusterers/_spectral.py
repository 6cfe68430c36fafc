"""Choice of the eigensolver of scikit-learn's spectral embedding on large sparse graphs.

scikit-learn's ``SpectralClustering`` (and ``spectral_embedding``) defaults to
ARPACK in shift-invert mode: :func:`scipy.sparse.linalg.eigsh` with
``sigma=-1e-5`` factorizes the normalised Laplacian with SuperLU. On the
k-nearest-neighbour graph of high-dimensional data (a graph with no small
separators) the factor fills in faster than the graph grows: on 10-neighbour
graphs of 784-dimensional digit images the embedding took 1 s at 5,000
vertices, 29 s at 20,000 and did not finish in 70 minutes at 70,000. LOBPCG
(Knyazev, "Toward the optimal preconditioned eigensolver", SIAM J. Sci.
Comput. 23(2), 2001) needs only products with the Laplacian, and with an
algebraic multigrid preconditioner (smoothed aggregation, Vanek, Mandel &
Brezina, Computing 56, 1996, from pyamg) it converges in a few dozen
iterations, in time and memory linear in the edges.

Below :data:`AMG_MIN_VERTICES` the automatic choice keeps ARPACK, so that
results at small sizes are those of scikit-learn's default.
"""

from __future__ import annotations

import scipy.sparse as sp

__all__ = ["AMG_MIN_VERTICES", "EIGEN_SOLVERS", "choose_eigen_solver"]

#: Vertices from which a sparse affinity is embedded with ``"amg"`` (pyamg, a
#: dependency of the package) when no solver is given. Measured on 10-neighbour
#: graphs of 784-dimensional digit images (``benchmarks/omnifc_mnist_scale.py``):
#: at 20,000 vertices ARPACK took 29 s and AMG 1.2 s, with the same labels up to
#: a few rows (NMI 0.9994); at 70,000 AMG took 15 s and ARPACK did not finish.
#: Below, ARPACK is kept: results at small sizes are scikit-learn's default.
AMG_MIN_VERTICES = 20_000

#: Eigensolvers of :func:`sklearn.manifold.spectral_embedding`.
EIGEN_SOLVERS = ("arpack", "lobpcg", "amg")


def choose_eigen_solver(eigen_solver, affinity):
    """The eigensolver of the spectral embedding of ``affinity``.

    Parameters
    ----------
    eigen_solver : {"arpack", "lobpcg", "amg"} or None
        A given solver is returned unchanged. ``None`` chooses: ``"arpack"``
        for a dense affinity or one with fewer than :data:`AMG_MIN_VERTICES`
        vertices (scikit-learn's default), otherwise ``"amg"`` (pyamg's
        algebraic multigrid; pyamg is a dependency of the package).
    affinity : array-like or sparse matrix of shape (n_vertices, n_vertices)
        The affinity to embed.

    Returns
    -------
    eigen_solver : str
        One of ``"arpack"``, ``"lobpcg"``, ``"amg"``.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from skfedclust.clusterers import choose_eigen_solver
    >>> choose_eigen_solver(None, sp.identity(100, format="csr"))
    'arpack'
    >>> choose_eigen_solver("lobpcg", sp.identity(100, format="csr"))
    'lobpcg'
    """
    if eigen_solver is not None:
        if eigen_solver not in EIGEN_SOLVERS:
            raise ValueError(
                f"eigen_solver must be one of {EIGEN_SOLVERS} or None, got {eigen_solver!r}"
            )
        return eigen_solver
    if not sp.issparse(affinity) or affinity.shape[0] < AMG_MIN_VERTICES:
        return "arpack"
    return "amg"
