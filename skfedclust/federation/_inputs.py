"""The input forms of ``fit``, checked once and turned into one :class:`Federation`.

1. ``fit([X_1, ..., X_m])``: a list of per-client 2-D arrays or DataFrames.
2. ``fit(X, client_ids=g)``: pooled rows with one client id per row.
3. ``fit(X)`` or ``fit(X, y)`` with a ``partition``: clients are simulated; ``y``
   is used only by label-skewed partitions.
4. ``fit([[X_11, X_12], [X_21, X_22]])``: row groups x feature blocks, for
   estimators that support vertical data.

A list of Python lists of numbers (``X.tolist()``) is a plain 2-D input.
"""

from __future__ import annotations

import inspect
import numbers
import warnings
from collections.abc import Iterator, Mapping, Set

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import DataConversionWarning
from sklearn.utils import check_array
from sklearn.utils._param_validation import HasMethods, Interval
from sklearn.utils.validation import validate_data

from ._column_stats import column_extremes_and_sums
from ._federation import Federation

__all__ = [
    "DEFAULT_N_CLIENTS",
    "FEDERATED_PARAMETER_CONSTRAINTS",
    "INPUT_FORMS",
    "build_federation",
    "input_form",
    "layout_from_partition",
]

#: Number of IID clients simulated when ``partition=None`` and the input is pooled.
DEFAULT_N_CLIENTS = 3

#: Parameter constraints every estimator that takes the federated input forms shares.
FEDERATED_PARAMETER_CONSTRAINTS: dict = {
    "partition": [
        None,
        Interval(numbers.Integral, 1, None, closed="left"),
        HasMethods("split"),
    ],
    "n_jobs": [None, numbers.Integral],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
}

INPUT_FORMS = (
    "a 2-D array of pooled rows (with client_ids= or a partition), a list of 2-D client "
    "arrays [X_1, ..., X_m], or, for vertical methods, a nested list of row groups x "
    "feature blocks [[X_11, X_12], [X_21, X_22]]"
)


def _is_array_object(obj):
    """True for numpy arrays, sparse matrices and pandas objects (not Python lists)."""
    return sp.issparse(obj) or (hasattr(obj, "ndim") and not isinstance(obj, (list, tuple)))


def _nesting_depth(obj):
    """Array depth of ``obj``: 2 for a matrix, 3 for a list of matrices, ..."""
    if sp.issparse(obj):
        return 2
    if _is_array_object(obj):
        return obj.ndim
    if isinstance(obj, (list, tuple)):
        return 1 + (_nesting_depth(obj[0]) if len(obj) else 0)
    return 0


def _refuse_unordered_or_one_pass(obj, what):
    """TypeError for containers numpy would turn into a 0-d object array.

    A dict, a set or a generator is not an array: ``np.asarray`` wraps it in a
    scalar, and the float conversion then fails with a message that names
    neither the input nor what to pass instead.
    """
    if _is_array_object(obj):  # scipy's dok_matrix is a dict, and still an array
        return
    if isinstance(obj, Mapping):
        hint = f"Pass list({what}.values()) for one client per entry (the keys are not used)."
        kind = "a dict"
    elif isinstance(obj, (Set, Iterator)):
        # A set has no order; an iterator can be read once, but fit reads
        # the clients more than once (validation, then the protocol).
        hint = f"Pass list({what}) instead."
        kind = "a set" if isinstance(obj, Set) else "an iterator or generator"
    else:
        return
    raise TypeError(
        f"{what} is {kind} ({type(obj).__name__}), not an array; fit takes {INPUT_FORMS}. {hint}"
    )


def input_form(X):
    """Classify ``X`` as ``"pooled"``, ``"clients"`` or ``"grid"``.

    A list whose elements are Python lists of numbers (``X.tolist()``) is a
    plain 2-D input, as scikit-learn's checks expect; a list of 2-D arrays is
    a list of clients; a list of lists of 2-D arrays is a grid of row groups x
    feature blocks. A dict, set or generator (of clients or of rows) raises a
    ``TypeError`` and anything else ambiguous a ``ValueError``, both naming
    the forms.
    """
    _refuse_unordered_or_one_pass(X, "X")
    if not isinstance(X, (list, tuple)) or len(X) == 0:
        return "pooled"
    for i, element in enumerate(X):
        if not isinstance(element, (list, tuple)):
            _refuse_unordered_or_one_pass(element, f"X[{i}]")
        elif element and not isinstance(element[0], numbers.Number):
            # a row group of a grid (the rows of X.tolist() hold numbers)
            for j, block in enumerate(element):
                _refuse_unordered_or_one_pass(block, f"X[{i}][{j}]")
    # The deepest element decides, so that an empty first row group of a grid
    # ([[], [A, B]]) is still read as a grid (and refused clearly).
    first = max(X, key=_nesting_depth)
    depth = _nesting_depth(first)
    if _is_array_object(first) and depth == 1 and np.size(first) > 1:
        raise ValueError(
            "X is a list of 1-D arrays, which is ambiguous (one client per array? one row "
            f"per array?). fit takes {INPUT_FORMS}. Reshape a one-feature client with "
            "X_i.reshape(-1, 1), or pass np.vstack(rows) for pooled rows."
        )
    if depth == 2:
        return "clients"
    if depth == 3 and not _is_array_object(first):
        return "grid"
    if depth >= 3:
        raise ValueError(f"X has {depth + 1} nested levels; fit takes {INPUT_FORMS}")
    return "pooled"


# --------------------------------------------------------------------------- #
# Client ids
# --------------------------------------------------------------------------- #
def check_client_ids(client_ids, n_samples):
    """Validate ``client_ids``: one hashable, comparable id per row, no missing values."""
    ids = np.asarray(client_ids)
    if ids.ndim == 2 and ids.shape[1] == 1:
        # scikit-learn's column_or_1d would warn about "y"; the column here is client_ids.
        warnings.warn(
            "client_ids was given as a column (shape (n_samples, 1)); it is read as "
            "one id per row. Pass a 1d array to avoid this warning.",
            DataConversionWarning,
            stacklevel=3,
        )
        ids = ids[:, 0]
    if ids.ndim != 1:
        raise ValueError(
            f"client_ids must hold one id per row (shape (n_samples,)), got shape {ids.shape}"
        )
    if len(ids) != n_samples:
        raise ValueError(f"client_ids has {len(ids)} entries but X has {n_samples} samples")
    if ids.dtype.kind == "f" and not np.isfinite(ids).all():
        raise ValueError("client_ids contains NaN or infinity; every row needs a client")
    if ids.dtype.kind == "O":
        kinds = set()
        for value in ids:
            if value is None or (isinstance(value, float) and not np.isfinite(value)):
                raise ValueError(
                    f"client_ids contains {value!r}; every row needs a client id (no None/NaN)"
                )
            kinds.add("number" if isinstance(value, numbers.Number) else type(value).__name__)
        if len(kinds) > 1:
            raise TypeError(
                f"client_ids mixes types ({', '.join(sorted(kinds))}); use one type of id, "
                "for instance all strings or all integers"
            )
    return ids


# --------------------------------------------------------------------------- #
# Partition specifications
# --------------------------------------------------------------------------- #
def check_partition_spec(partition):
    """Reject objects that have ``split`` but are not client partitions."""
    from ..partition import _BasePartition

    if isinstance(partition, _BasePartition):
        return
    if isinstance(partition, (str, bytes)):
        raise TypeError(
            f"partition={partition!r} is a string; pass an int (that many IID clients), a "
            "specification from skfedclust.partition (e.g. IIDPartition(3), "
            "DirichletPartition(5, alpha=0.5)), or an object whose split(X, y) yields the "
            "row indices of each client"
        )
    if hasattr(partition, "get_n_splits"):
        raise TypeError(
            f"partition={partition!r} is a cross-validation splitter: its split yields "
            "(train, test) pairs, not clients. Pass an int (IID clients), a specification "
            "from skfedclust.partition, or an object whose split(X, y) yields the row "
            "indices of each client (or (rows, columns) pairs for vertical splits)."
        )


def _split(partition, X, y, random_state):
    parameters = inspect.signature(partition.split).parameters
    if "random_state" in parameters:
        return list(partition.split(X, y, random_state=random_state))
    return list(partition.split(X, y))


def _as_index_array(values, n, what):
    idx = np.asarray(values)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise ValueError(f"{what} must be a 1-D array of integer indices, got {idx!r:.60}")
    idx = idx.astype(np.intp, copy=False)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"{what} has indices outside 0..{n - 1}")
    return idx


def layout_from_partition(partition, X, y, random_state):
    """Run a partition's public ``split`` and return ``(rows, cols, row_groups)``.

    The contract: ``split(X, y=None)`` yields one array of row indices per
    client (horizontal split, each row held by exactly one client) or one
    ``(rows, columns)`` pair per client (vertical or hybrid split; clients
    holding the same rows form a row group). A ``split`` that also accepts
    ``random_state`` receives the estimator's when the specification has no
    seed of its own.
    """
    check_partition_spec(partition)
    n, d = X.shape
    parts = _split(partition, X, y, random_state)
    if not parts:
        raise ValueError(f"partition {partition!r} yielded no client")
    vertical = isinstance(parts[0], tuple) and len(parts[0]) == 2
    if not vertical:
        rows = [_as_index_array(r, n, f"client {i}'s rows") for i, r in enumerate(parts)]
        counts = np.bincount(np.concatenate(rows), minlength=n) if n else np.zeros(0)
        if (counts != 1).any():
            missing, repeated = int((counts == 0).sum()), int((counts > 1).sum())
            raise ValueError(
                f"partition {partition!r} must give every row to exactly one client; "
                f"{missing} rows belong to no client and {repeated} to several"
            )
        return rows, None, None
    rows, cols = [], []
    for i, part in enumerate(parts):
        if not (isinstance(part, tuple) and len(part) == 2):
            raise ValueError("a vertical partition must yield (rows, columns) for every client")
        rows.append(_as_index_array(part[0], n, f"client {i}'s rows"))
        cols.append(_as_index_array(part[1], d, f"client {i}'s columns"))
    groups = {}
    for i, r in enumerate(rows):
        groups.setdefault(r.tobytes(), []).append(i)
    return rows, cols, list(groups.values())


# --------------------------------------------------------------------------- #
# Client arrays and grids
# --------------------------------------------------------------------------- #
def _feature_names(Xi):
    columns = getattr(Xi, "columns", None)
    if columns is None:
        return None
    names = np.asarray(columns, dtype=object)
    if not all(isinstance(c, str) for c in names):
        return None
    return names


def _is_float32(block):
    dtypes = getattr(block, "dtypes", None)
    if dtypes is not None:  # a DataFrame
        # A pandas extension dtype (Float32, Int64, ...) is not a NumPy dtype:
        # scikit-learn computes such a frame in float64, and so do we.
        return len(dtypes) > 0 and all(isinstance(t, np.dtype) and t == np.float32 for t in dtypes)
    return getattr(block, "dtype", None) == np.float32


def float32_input(X):
    """Whether every block of ``X`` (any input form of fit) is float32.

    Computation runs in float64 (the secure sums in fixed point); an
    estimator that keeps its input's precision, as scikit-learn's KMeans
    does, casts what it learnt back to float32.
    """
    form = input_form(X)
    if form == "pooled":
        return _is_float32(X)
    blocks = X if form == "clients" else [b for group in X for b in group]
    return len(blocks) > 0 and all(_is_float32(b) for b in blocks)


def check_client_array(Xi, name):
    """Validate one client's block: a finite 2-D float array with at least one row."""
    try:
        Xi = check_array(Xi, dtype=np.float64, input_name=name, ensure_min_samples=0)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc
    if Xi.shape[0] == 0:
        raise ValueError(f"{name} holds no samples")
    return Xi


def _agreed_feature_names(clients):
    """Column names shared by every client, or None; raise when clients disagree."""
    names = [_feature_names(Xi) for Xi in clients]
    if all(n is None for n in names):
        return None
    if any(n is None for n in names):
        raise ValueError(
            "some clients are DataFrames with column names and others are not; give every "
            "client the same columns, or none"
        )
    for i, n in enumerate(names[1:], start=1):
        if len(n) != len(names[0]) or (n != names[0]).any():
            raise ValueError(
                f"client {i}'s columns {list(n)} differ from client 0's {list(names[0])} "
                "(in names or order); clients must hold the same features in the same order"
            )
    return names[0]


def _federation_from_clients(estimator, clients):
    names = _agreed_feature_names(clients)
    arrays = [check_client_array(Xi, f"client {i}") for i, Xi in enumerate(clients)]
    widths = [a.shape[1] for a in arrays]
    for i, w in enumerate(widths):
        if w != widths[0]:
            raise ValueError(
                f"clients must share the same features: client {i} has {w} features "
                f"but client 0 has {widths[0]}"
            )
    # Each client's block was checked above, once: only the estimator's record
    # of the features is left to set (and no stack of every client's rows).
    validate_data(estimator, arrays[0], skip_check_array=True)
    if names is not None:
        estimator.feature_names_in_ = names
    bounds = np.cumsum([0] + [a.shape[0] for a in arrays])
    rows = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    return Federation(None, rows, blocks=arrays)


def _grid_feature_names(grid):
    """Column names of a grid, block by block, or None; raise when parties disagree.

    The parties of one feature block (one per row group) must name its columns
    alike; the names of the blocks, joined in block order, name the features.
    """
    names = [[_feature_names(Xb) for Xb in group] for group in grid]
    flat = [n for group in names for n in group]
    if all(n is None for n in flat):
        return None
    if any(n is None for n in flat):
        raise ValueError(
            "some parties of the grid are DataFrames with column names and others are not; "
            "give every party named columns, or none"
        )
    for g, group in enumerate(names[1:], start=1):
        for b, (n, first) in enumerate(zip(group, names[0])):
            if len(n) != len(first) or (n != first).any():
                raise ValueError(
                    f"feature block {b} has columns {list(n)} in row group {g} but "
                    f"{list(first)} in row group 0; the parties of a feature block must hold "
                    "the same features in the same order"
                )
    joined = np.concatenate(names[0])
    if len(set(joined)) != len(joined):
        raise ValueError(
            f"the feature blocks' columns {[list(n) for n in names[0]]} name a feature twice; "
            "each feature belongs to one block"
        )
    return joined


def _federation_from_grid(estimator, grid):
    """Row groups x feature blocks: ``grid[g][b]`` is party (g, b)."""
    for g, group in enumerate(grid):
        if not isinstance(group, (list, tuple)) or len(group) == 0:
            raise ValueError(f"row group {g} of the grid holds no feature block")
    n_blocks = len(grid[0])
    blocks = []
    for g, group in enumerate(grid):
        if len(group) != n_blocks:
            raise ValueError(
                "every row group must cover the same features in the same block layout: "
                f"row group {g} has {len(group)} feature blocks but row group 0 has {n_blocks}"
            )
        arrays = [check_client_array(Xb, f"party ({g}, {b})") for b, Xb in enumerate(group)]
        heights = [a.shape[0] for a in arrays]
        if len(set(heights)) != 1:
            raise ValueError(
                f"the feature blocks of row group {g} must hold the same rows; "
                f"got row counts {heights}"
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
    names = _grid_feature_names(grid)
    X = validate_data(estimator, np.vstack([np.hstack(a) for a in blocks]), dtype=np.float64)
    if names is not None:
        estimator.feature_names_in_ = names
    col_bounds = np.cumsum([0] + widths)
    cols = [np.arange(a, b) for a, b in zip(col_bounds[:-1], col_bounds[1:])]
    row_bounds = np.cumsum([0] + [a[0].shape[0] for a in blocks])
    client_rows, client_cols, row_groups = [], [], []
    for g in range(len(blocks)):
        rows = np.arange(row_bounds[g], row_bounds[g + 1])
        row_groups.append(list(range(g * n_blocks, (g + 1) * n_blocks)))
        client_rows.extend([rows] * n_blocks)
        client_cols.extend(cols)
    return Federation(X, client_rows, client_cols, row_groups)


def _federation_from_ids(X, client_ids):
    ids = check_client_ids(client_ids, X.shape[0])
    if len(ids) and ids.dtype.kind != "O" and bool(np.all(ids[:-1] <= ids[1:])):
        # Rows grouped by client in sorted order (the usual layout): each client
        # is a run of rows, found without sorting, and its block is a view.
        starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
        stops = np.append(starts[1:], len(ids))
        rows = [np.arange(a, b) for a, b in zip(starts, stops)]
        return Federation(X, rows, client_names=ids[starts].tolist())
    names, inverse = _unique_ids(ids)
    # Stable, so each client keeps its rows in input order; a radix sort for
    # up to 2**16 clients (the inverse then fits in 16 bits).
    small = np.uint16 if len(names) <= 2**16 else np.intp
    order = np.argsort(inverse.astype(small, copy=False), kind="stable")
    counts = np.bincount(inverse, minlength=len(names))
    rows = np.split(order, np.cumsum(counts)[:-1])
    return Federation(X, rows, client_names=names.tolist())


def _unique_ids(ids):
    """``np.unique(ids, return_inverse=True)``, without a sort for integer ids of a narrow range."""
    if ids.dtype.kind in "iu" and len(ids):
        low, high = int(ids.min()), int(ids.max())
        wide = np.iinfo(np.intp)
        if high - low < max(len(ids), 2**16) and wide.min <= low and high <= wide.max:
            # In intp before the subtraction: an int8 id minus the least wraps.
            offsets = ids.astype(np.intp) - low
            present = np.bincount(offsets, minlength=high - low + 1) > 0
            names = (np.flatnonzero(present) + low).astype(ids.dtype)
            return names, (np.cumsum(present) - 1)[offsets]
    names, inverse = np.unique(ids, return_inverse=True)
    return names, inverse.reshape(-1)


def build_federation(estimator, X, y, client_ids, random_state):
    """Turn any input form into a :class:`Federation` with one seed per client.

    ``estimator`` supplies the hooks ``_default_partition()``,
    ``_supports_vertical``, ``_min_samples()`` and ``_min_client_samples()``.
    """
    form = input_form(X)
    if form != "pooled" and client_ids is not None:
        raise ValueError("client_ids can only be given with a pooled X, not a list of clients")
    if form != "pooled" and estimator.partition is not None:
        raise ValueError(
            "partition simulates clients from a pooled X; it cannot be combined "
            "with a list of client arrays"
        )
    if form == "grid" and not estimator._supports_vertical:
        raise ValueError(
            f"{type(estimator).__name__} supports horizontal federations only; "
            "a nested list of row groups x feature blocks is for vertical methods"
        )
    if form == "clients":
        federation = _federation_from_clients(estimator, X)
    elif form == "grid":
        federation = _federation_from_grid(estimator, X)
    else:
        X = validate_data(estimator, X, dtype=np.float64)
        _check_n_samples(estimator, X.shape[0])
        if client_ids is not None:
            federation = _federation_from_ids(X, client_ids)
        else:
            partition = estimator.partition
            if partition is None:
                partition = estimator._default_partition()
            elif isinstance(partition, numbers.Integral):
                from ..partition import IIDPartition

                partition = IIDPartition(int(partition))
            federation = Federation(X, *layout_from_partition(partition, X, y, random_state))
    if form != "pooled":
        _check_n_samples(estimator, federation.n_samples)
    if not federation.is_horizontal and not estimator._supports_vertical:
        raise ValueError(
            f"{type(estimator).__name__} supports horizontal federations only (every client "
            "holds all features); got a vertical or hybrid split"
        )
    _check_client_sizes(estimator, federation)
    # Each client can check its own rows; the pooled check is the same bound.
    check_magnitude(federation.X if federation.blocks is None else federation.blocks)
    federation.spawn_seeds(random_state)
    return federation


#: Squared distances of float64 values overflow beyond about 1e154 and underflow
#: below about 1e-154; a margin keeps sums of squares over many features finite.
MAX_MAGNITUDE = 1e150
MIN_SPREAD = 1e-150


def check_magnitude(X):
    """Refuse data whose squared distances float64 cannot represent.

    ``X`` is the pooled rows, or a list of the clients' blocks.

    Translation does not matter (every distance is computed relative to a
    reference point), so the bound is on the spread of the data: its largest
    deviation from the per-feature midrange must lie between ``MIN_SPREAD`` and
    ``MAX_MAGNITUDE`` (or be exactly zero: identical rows).
    """
    blocks = [block for block in (X if isinstance(X, list) else [X]) if block.size]
    if not blocks:
        return
    # One pass per block for both extremes; the pooled ones are theirs.
    extremes = [column_extremes_and_sums(block)[:2] for block in blocks]
    low = np.min([e[0] for e in extremes], axis=0)
    high = np.max([e[1] for e in extremes], axis=0)
    spread = float(np.max(high / 2.0 - low / 2.0)) * 2.0
    if spread > MAX_MAGNITUDE:
        raise ValueError(
            f"the data's range is {spread:.1e}: squared distances at this magnitude overflow "
            f"float64 (above about {MAX_MAGNITUDE:.0e}). Rescale the data, for instance divide "
            "it by a power of ten; clustering is unchanged by a common scale."
        )
    if 0.0 < spread < MIN_SPREAD:
        raise ValueError(
            f"the data's range is {spread:.1e}: squared distances at this scale underflow "
            f"float64 (below about {MIN_SPREAD:.0e}). Rescale the data, for instance multiply "
            "it by a power of ten; clustering is unchanged by a common scale."
        )


def _check_n_samples(estimator, n_samples):
    needed = estimator._min_samples()
    if n_samples < needed:
        raise ValueError(
            f"n_samples={n_samples} should be >= {needed} "
            f"(n_clusters={getattr(estimator, 'n_clusters', None)})."
        )


def _check_client_sizes(estimator, federation):
    needed = estimator._min_client_samples()
    for i, size in enumerate(federation.client_sizes):
        if size == 0:
            raise ValueError(f"client {i} holds no samples")
        if size < needed:
            raise ValueError(
                f"client {i} holds {size} samples but {type(estimator).__name__} needs at "
                f"least {needed} per client with these parameters"
            )
