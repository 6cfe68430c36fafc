"""Metrics on hand-computed values."""

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from skfedclust.metrics import centroid_distance, clustering_accuracy, kappa, purity


def test_clustering_accuracy_hand_values():
    assert clustering_accuracy([0, 0, 1, 1], [5, 5, 7, 7]) == 1.0
    # Best map: cluster 1 -> class 0 (2 right), cluster 0 -> class 2 (1 right), 3 of 6.
    assert clustering_accuracy([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 0]) == pytest.approx(4 / 6)
    # More clusters than classes: the extra cluster counts as wrong.
    assert clustering_accuracy([0, 0, 0, 1], [0, 0, 2, 1]) == 0.75


def test_kappa_equal_counts_is_kappa_after_best_map():
    y_true = [0, 0, 0, 1, 1, 1, 2, 2]
    y_pred = [2, 2, 1, 0, 0, 0, 1, 1]
    mapped = [0, 0, 2, 1, 1, 1, 2, 2]
    assert kappa(y_true, y_pred) == pytest.approx(cohen_kappa_score(y_true, mapped))


def test_kappa_perfect_and_dbscan_noise():
    assert kappa([0, 0, 1, 1], [1, 1, 0, 0]) == 1.0
    # Noise label -1 is an ordinary cluster; with 3 clusters for 2 classes the
    # unmatched cluster gets a label no class has (padding quirk).
    y_true = np.array([0, 0, 0, 1, 1, 1])
    y_pred = np.array([-1, 0, 0, 1, 1, 1])
    # Hand computation: cluster 0 -> class 0, cluster 1 -> class 1, noise -> dummy 2.
    mapped = np.array([2, 0, 0, 1, 1, 1])
    assert kappa(y_true, y_pred) == pytest.approx(cohen_kappa_score(y_true, mapped))
    # p_o = 5/6, p_e = (3*2 + 3*3)/36 = 15/36 -> kappa = (5/6 - 15/36) / (1 - 15/36)
    assert kappa(y_true, y_pred) == pytest.approx((5 / 6 - 15 / 36) / (1 - 15 / 36))


def test_purity_both_averages():
    y_true = [0, 0, 1, 1, 1, 2]
    y_pred = [0, 0, 0, 1, 1, 1]
    assert purity(y_true, y_pred) == pytest.approx(4 / 6)
    assert purity(y_true, y_pred, average="cluster") == pytest.approx((2 / 3 + 2 / 3) / 2)
    with pytest.raises(ValueError, match="average"):
        purity(y_true, y_pred, average="mean")


def test_centroid_distance_matches_and_handles_fewer_centers():
    true = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    found = np.array([[0.0, 11.0], [1.0, 0.0], [10.0, 2.0]])
    assert centroid_distance(true, found) == pytest.approx(np.sqrt(1 + 1 + 4))
    assert centroid_distance(true, found[:2]) == pytest.approx(np.sqrt(1 + 1))
    with pytest.raises(ValueError, match="dimensions"):
        centroid_distance(true, np.zeros((3, 3)))


def test_label_length_mismatch():
    with pytest.raises(ValueError):
        clustering_accuracy([0, 1], [0])
