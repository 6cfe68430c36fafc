"""Who holds which rows and columns: the simulated federation behind a runtime."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Federation"]


@dataclass
class Federation:
    """Which rows and columns of a pooled matrix each client holds.

    The pooled matrix exists only because this is a simulation. Protocol code
    never sees it: the runtime hands each client step its own block
    (:meth:`client_data`) and nothing else. Clients given as a list of arrays
    keep them (``blocks``) and there is no pooled matrix: stacking them
    would copy every client's rows for nothing.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features) or None
        Pooled data, rows in the order the user gave them; ``None`` with
        ``blocks``.
    client_rows : list of ndarray of int
        Row indices (into ``X``) held by each client.
    client_cols : list of ndarray of int or None, default=None
        Column indices held by each client; ``None`` means every client holds
        all columns (horizontal federation).
    row_groups : list of list of int or None, default=None
        For vertical and hybrid federations, the clients of each row group
        (clients of one row group share the same rows, in the same order).
    seeds : ndarray of int or None, default=None
        One seed per client, drawn up front by the estimator.
    client_names : list, default=None
        Name of each client (the sorted ``client_ids``, or ``0 .. m - 1``).
    blocks : list of ndarray or None, default=None
        Each client's own rows (a horizontal federation), instead of ``X``:
        client ``i`` holds ``blocks[i]``, which are pooled rows
        ``client_rows[i]`` in the order of the input.
    """

    X: np.ndarray
    client_rows: list
    client_cols: list | None = None
    row_groups: list | None = None
    seeds: np.ndarray | None = None
    client_names: list = field(default=None)
    blocks: list | None = None

    def __post_init__(self):
        if self.client_names is None:
            self.client_names = list(range(len(self.client_rows)))
        if self.blocks is not None and (self.X is not None or self.client_cols is not None):
            raise ValueError("blocks stand for the pooled X of a horizontal federation")

    @property
    def n_clients(self):
        return len(self.client_rows)

    @property
    def n_samples(self):
        if self.blocks is not None:
            return sum(block.shape[0] for block in self.blocks)
        return self.X.shape[0]

    @property
    def n_features(self):
        if self.blocks is not None:
            return self.blocks[0].shape[1]
        return self.X.shape[1]

    @property
    def is_horizontal(self):
        """True when every client holds all features of its rows."""
        return self.client_cols is None

    @property
    def client_sizes(self):
        return np.array([len(r) for r in self.client_rows], dtype=np.intp)

    @property
    def client_widths(self):
        """Number of features held by each client."""
        if self.client_cols is None:
            return np.full(self.n_clients, self.n_features, dtype=np.intp)
        return np.array([len(c) for c in self.client_cols], dtype=np.intp)

    def client_data(self, i):
        """Return the data held by client ``i`` (its rows, its columns).

        A client whose rows are one run of consecutive pooled rows (clients
        given as a list of arrays, or by sorted ``client_ids``) gets a view of
        them: no copy of every client's data for the length of a fit.
        """
        if self.blocks is not None:
            return self.blocks[i]
        rows = self.client_rows[i]
        if self.client_cols is None:
            run = _consecutive(rows)
            return self.X[run] if run is not None else self.X[rows]
        return self.X[np.ix_(rows, self.client_cols[i])]

    def clients_data(self):
        """Every client's data, client by client (for estimators not yet on a runtime)."""
        return [self.client_data(i) for i in range(self.n_clients)]

    def gather_rows(self, per_client_values, clients=None):
        """Put per-client row values back in the order of the pooled input rows.

        Parameters
        ----------
        per_client_values : list of ndarray
            ``per_client_values[j]`` holds one value per row of client
            ``clients[j]`` (first axis).
        clients : list of int, default=None
            Which clients the values belong to; all clients by default. For a
            hybrid federation pass one client per row group.
        """
        clients = list(range(self.n_clients)) if clients is None else list(clients)
        first = np.asarray(per_client_values[0])
        out = np.empty((self.n_samples,) + first.shape[1:], dtype=first.dtype)
        filled = np.zeros(self.n_samples, dtype=bool)
        for c, values in zip(clients, per_client_values):
            rows = self.client_rows[c]
            # A run of rows is a slice: no index scatter.
            run = _consecutive(rows)
            rows = rows if run is None else run
            out[rows] = values
            filled[rows] = True
        if not filled.all():
            raise RuntimeError("gather_rows: some input rows belong to no client")
        return out

    def spawn_seeds(self, random_state):
        """Draw one independent seed per client from ``random_state``."""
        self.seeds = random_state.randint(
            np.iinfo(np.int32).max, size=self.n_clients, dtype=np.int64
        )
        return self.seeds


def _consecutive(rows):
    """``slice(a, b)`` when ``rows`` is ``a, a + 1, ..., b - 1``, else None."""
    rows = np.asarray(rows)
    if rows.ndim != 1 or rows.dtype.kind not in "iu" or not len(rows):
        return None
    start, stop = int(rows[0]), int(rows[-1]) + 1
    if stop - start != len(rows) or np.any(np.diff(rows) != 1):
        return None
    return slice(start, stop)
