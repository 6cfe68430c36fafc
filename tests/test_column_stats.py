"""One pass for a client's column statistics: the floats of NumPy's separate reductions."""

import numpy as np
import pytest

from skfedclust.federation._column_stats import (
    _COMPILED_MIN_ROWS,
    centered_column_moments,
    column_extremes_and_sums,
)
from skfedclust.federation._inputs import check_magnitude
from skfedclust.methods._lloyd_pass import labelled_inertia


@pytest.mark.parametrize("n", [5, _COMPILED_MIN_ROWS, 3 * _COMPILED_MIN_ROWS + 7])
@pytest.mark.parametrize("d", [1, 2, 3, 20])
@pytest.mark.parametrize("offset", [0.0, 1.7e9])
def test_the_same_floats_as_numpys_reductions(n, d, offset):
    rng = np.random.RandomState(d)
    X = rng.standard_normal((n, d)) * rng.uniform(1e-3, 1e3, d) + offset
    X.flags.writeable = False  # as the runtime hands a client its rows
    low, high, sums = column_extremes_and_sums(X)
    np.testing.assert_array_equal(low, X.min(axis=0))
    np.testing.assert_array_equal(high, X.max(axis=0))
    np.testing.assert_array_equal(sums, X.sum(axis=0))
    mean = sums / n + 0.25
    first, second = centered_column_moments(X, mean)
    deviations = X - mean
    np.testing.assert_array_equal(first, deviations.sum(axis=0))
    np.testing.assert_array_equal(second, np.einsum("ij,ij->j", deviations, deviations))


def test_writable_and_fortran_ordered_rows_give_numpys_floats():
    X = np.random.RandomState(0).uniform(size=(3 * _COMPILED_MIN_ROWS, 6))
    for rows in (X, np.asfortranarray(X)):
        low, high, sums = column_extremes_and_sums(rows)
        np.testing.assert_array_equal(low, rows.min(axis=0))
        np.testing.assert_array_equal(high, rows.max(axis=0))
        np.testing.assert_array_equal(sums, rows.sum(axis=0))
    assert X.flags.writeable


def test_magnitude_check_of_the_clients_is_the_pooled_one():
    X = np.random.RandomState(0).uniform(size=(5000, 3))
    check_magnitude(np.array_split(X, 4))
    for factor, match in [(1e152, "overflow"), (1e-152, "underflow")]:
        clients = np.array_split(X, 4)
        clients[2] = clients[2] * factor if factor > 1 else clients[2]
        rows = clients if factor > 1 else [c * factor for c in clients]
        with pytest.raises(ValueError, match=match):
            check_magnitude(rows)
        with pytest.raises(ValueError, match=match):
            check_magnitude(np.vstack(rows))


@pytest.mark.parametrize("n", [100, 5 * _COMPILED_MIN_ROWS + 3])
def test_labelled_inertia_is_the_sum_of_squared_deviations(n):
    rng = np.random.RandomState(1)
    X = rng.standard_normal((n, 5)) + 1.7e9
    centers = X[:4] + 0.5
    labels = rng.randint(0, 4, n)
    deviations = X - centers[labels]
    want = np.einsum("ij,ij->", deviations, deviations)
    np.testing.assert_allclose(labelled_inertia(X, centers, labels), want, rtol=1e-13)
