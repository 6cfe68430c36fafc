"""Data loaders: local folder, environment variable, and download of the originals."""

import numpy as np
import pytest

from skfedclust.datasets import get_data_home, load_heart_statlog, load_s_sets


@pytest.mark.parametrize("i", [1, 2, 3, 4])
def test_s_sets_shapes_and_centers(i):
    s = load_s_sets(i)
    assert s.data.shape == (5000, 2)
    assert sorted(np.unique(s.target)) == list(range(15))
    assert s.centers.shape == (15, 2)
    # The published centers are close to the label means (same clusters).
    from skfedclust.metrics import centroid_distance

    assert centroid_distance(s.centers, s.label_means) / 1e4 < 5.0
    X, y = load_s_sets(i, return_X_y=True)
    np.testing.assert_array_equal(X, s.data)


def test_heart_statlog():
    h = load_heart_statlog()
    assert h.data.shape == (270, 13)
    assert set(h.target) == {0, 1}
    assert np.bincount(h.target).tolist() == [150, 120]
    assert h.feature_names[0] == "age"


def test_missing_file_without_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="SKFEDCLUST_DATA"):
        load_s_sets(1, data_home=tmp_path, download_if_missing=False)
    with pytest.raises(FileNotFoundError, match="heart"):
        load_heart_statlog(data_home=tmp_path, download_if_missing=False)
    with pytest.raises(ValueError, match="1, 2, 3 or 4"):
        load_s_sets(5)


def test_data_home_order(tmp_path, monkeypatch):
    monkeypatch.setenv("SKFEDCLUST_DATA", str(tmp_path / "env"))
    assert get_data_home() == tmp_path / "env"
    assert get_data_home(tmp_path / "arg") == tmp_path / "arg"


def test_download_converts_the_originals(tmp_path):
    # A local "server" folder with files in the original public formats.
    origin = tmp_path / "origin"
    origin.mkdir()
    pts = np.array([[10, 20], [11, 21], [50, 60], [51, 61]])
    np.savetxt(origin / "s2.txt", pts, fmt="%d")
    (origin / "s2-label.pa").write_text("VQ PARTITIONING 1.0\n----------\n3\n3\n7\n7\n")
    np.savetxt(origin / "s2-cb.txt", [[10, 20], [50, 60]], fmt="%d")
    s = load_s_sets(2, data_home=tmp_path / "cache", _url=origin.as_uri() + "/")
    np.testing.assert_array_equal(s.data, pts)
    np.testing.assert_array_equal(s.target, [0, 0, 1, 1])
    assert (tmp_path / "cache" / "s_sets" / "s2.csv").exists()

    heart = np.array([[63, 1, 4, 130, 250, 0, 2, 150, 0, 1.5, 2, 0, 3, 1]] * 2)
    heart[1, -1] = 2
    np.savetxt(origin / "heart.dat", heart, fmt="%g")
    X, y = load_heart_statlog(
        data_home=tmp_path / "cache", return_X_y=True, _url=(origin / "heart.dat").as_uri()
    )
    np.testing.assert_allclose(X, heart[:, :-1])
    np.testing.assert_array_equal(y, [0, 1])


def test_download_failure_is_explained(tmp_path):
    with pytest.raises(OSError, match="could not download"):
        load_s_sets(1, data_home=tmp_path, _url=(tmp_path / "nowhere").as_uri() + "/")
