"""Nearest centers, distances and memberships far from the centers, against exact arithmetic."""

from fractions import Fraction

import numpy as np
import pytest

from skfedclust.clusterers import fuzzy_memberships, nearest_center, squared_distances


def _exact_squared_distances(X, C):
    # Fractions hold every float64 exactly, so these are the true distances of the inputs.
    return [[sum((Fraction(a) - Fraction(b)) ** 2 for a, b in zip(x, c)) for c in C] for x in X]


def _exact_nearest(X, C):
    return np.array(
        [min(range(len(row)), key=lambda j: (row[j], j)) for row in _exact_squared_distances(X, C)]
    )


@pytest.mark.parametrize("offset", [0.0, 1.7e9])
@pytest.mark.parametrize("magnitude", [1.0, 1e8, 1e17, 1e100, 1e200, 1e300])
def test_nearest_center_is_exact_at_any_distance(magnitude, offset):
    rng = np.random.default_rng(0)
    C = rng.normal(size=(4, 3)) + offset
    X = rng.normal(size=(200, 3)) * magnitude + offset
    labels = nearest_center(X, C)
    np.testing.assert_array_equal(labels, _exact_nearest(X, C))
    assert len(np.unique(labels)) > 1


def test_nearest_center_decided_by_a_small_coordinate_of_a_far_row():
    # Both centers are equally far along the large coordinate; the small one decides.
    C = np.array([[-1.0, 5.0], [1.0, 5.0]]) + 1.7e9
    X = np.array([[1e-3, 1e17], [-1e-3, 1e17], [1e-3, -1e200], [-1e-3, -1e200]]) + C.mean(axis=0)
    np.testing.assert_array_equal(nearest_center(X, C), _exact_nearest(X, C))


def test_nearest_center_at_the_float64_limit():
    # Differences to the reference overflow: the rows are compared by their halves.
    X = np.array([[1.7e308, -1.7e308, 0.0], [-1.7e308, 1.7e308, 0.0]])
    C = np.array([[-1e308, 0.0, 0.0], [1e308, 0.0, 1.0]])
    np.testing.assert_array_equal(nearest_center(X, C), _exact_nearest(X, C))


def test_nearest_center_ties_and_trivial_cases():
    C = np.array([[0.0, 0.0], [2.0, 0.0], [2.0, 0.0]])
    np.testing.assert_array_equal(nearest_center([[1.0, 0.0], [3.0, 0.0]], C), [0, 1])
    assert nearest_center(np.zeros((0, 2)), C).shape == (0,)
    np.testing.assert_array_equal(nearest_center([[1e300, 1.0]], C[:1]), [0])
    np.testing.assert_array_equal(nearest_center([[1e17, 0.0]], np.zeros((3, 2))), [0])


def test_nearest_center_does_not_depend_on_the_block_size(monkeypatch):
    import skfedclust.clusterers._centroids as centroids

    rng = np.random.default_rng(1)
    C = rng.normal(size=(5, 4))
    X = np.vstack([rng.normal(size=(300, 4)), rng.normal(size=(300, 4)) * 1e250])
    expected = nearest_center(X, C)
    monkeypatch.setattr(centroids, "_BLOCK_ELEMENTS", 7)
    np.testing.assert_array_equal(nearest_center(X, C), expected)
    np.testing.assert_array_equal(expected, _exact_nearest(X, C))


@pytest.mark.parametrize("magnitude", [1e8, 1e17, 1e100, 1e150, 1e200])
def test_squared_distances_far_from_the_centers(magnitude):
    rng = np.random.default_rng(2)
    C = rng.normal(size=(3, 2)) + 1.7e9
    X = rng.normal(size=(30, 2)) * magnitude + 1.7e9
    d2 = squared_distances(X, C)
    exact = np.array(_exact_squared_distances(X, C), dtype=object)
    limit = Fraction(np.finfo(np.float64).max)
    overflows = np.vectorize(lambda v: v > limit)(exact).astype(bool)
    # inf exactly where the true distance exceeds the float64 range, not an OverflowError
    np.testing.assert_array_equal(np.isinf(d2), overflows)
    finite = ~overflows
    np.testing.assert_allclose(d2[finite], exact[finite].astype(float), rtol=1e-14)


@pytest.mark.parametrize("magnitude", [1e8, 1e17, 1e200])
def test_fuzzy_memberships_far_from_the_centers(magnitude):
    rng = np.random.default_rng(3)
    C = rng.normal(size=(3, 2))
    X = rng.normal(size=(20, 2)) * magnitude
    u = fuzzy_memberships(X, C, 2.0)
    # m = 2: u_ij = (1 / d_ij) / sum_h (1 / d_ih) with the exact squared distances
    exact = np.array(
        [
            [float((1 / d) / sum(1 / e for e in row)) for d in row]
            for row in _exact_squared_distances(X, C)
        ]
    )
    np.testing.assert_allclose(u, exact, rtol=0, atol=1e-15)
