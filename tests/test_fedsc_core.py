"""Tests of the FedSC kernel factorisation (skfedclust.methods._fedsc_core)."""

import warnings

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from sklearn.datasets import load_iris
from threadpoolctl import threadpool_limits

from skfedclust.methods._fedsc_core import (
    aggregate_dictionaries,
    client_objective,
    client_update,
    combine_feature_sums,
    dictionary_gradient,
    gaussian_kernel,
    gradient_dictionary_step,
    initial_dictionaries,
    preconditioned_dictionary_step,
    solve_coefficients,
    squared_distances,
    trilateration_attack,
)
from skfedclust.methods._fedsc_hyperparameters import (
    combine_n_components,
    energy_rank,
    federated_bandwidth,
    mean_pairwise_distance,
    n_components_auto,
    pair_distance_sum,
    pair_sum_bandwidth,
    pooled_bandwidth,
)
from skfedclust.secure import add_gaussian_noise, factor_noise_scales, relative_noise_scale

OFFSET = 1.7e9


@pytest.fixture(autouse=True)
def one_thread():
    """The problems here are small: BLAS and OpenMP threads only add synchronisation."""
    with threadpool_limits(1):
        yield


def brute_kernel(A, B, r):
    diff = np.asarray(A)[:, None, :] - np.asarray(B)[None, :, :]
    return np.exp(-(diff**2).sum(-1) / (2 * r**2))


@pytest.fixture
def small_client():
    """F1 setting: m = 3, n_p = 10, d = 4, r = 1.3, lam = 0.01."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 3))
    Z = rng.normal(size=(4, 3))
    return X, Z, 1.3, 0.01


def run_fedsc_stage_one(X, parts, *, n_components, bandwidth, lam=1e-2, n_rounds=20, seed=0):
    """Algorithm 1 with the building blocks: broadcast, client updates, mean, refit."""
    uploads = initial_dictionaries(len(parts), n_components, X.shape[1], random_state=seed)
    history = []
    for _ in range(n_rounds):
        Z = aggregate_dictionaries(uploads)
        updates = [client_update(X[idx], Z, bandwidth=bandwidth, lam=lam) for idx in parts]
        uploads = [u.dictionary for u in updates]
        history.append(sum(u.objective for u in updates))
    Z = aggregate_dictionaries(uploads)
    coef = np.empty((n_components, len(X)))
    for idx in parts:
        coef[:, idx] = solve_coefficients(X[idx], Z, bandwidth=bandwidth, lam=lam)
    return Z, coef, history


@pytest.fixture(scope="module")
def iris_run():
    X = load_iris().data
    r = pooled_bandwidth(X)
    d = n_components_auto(X, bandwidth=r)
    parts = np.array_split(np.random.default_rng(0).permutation(len(X)), 8)
    Z, coef, history = run_fedsc_stage_one(X, parts, n_components=d, bandwidth=r)
    return X, r, d, Z, coef, history


# --------------------------------------------------------------------------- #
# Kernel
# --------------------------------------------------------------------------- #
def test_gaussian_kernel_matches_the_definition():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(7, 5)) * 3, rng.normal(size=(4, 5))
    np.testing.assert_allclose(gaussian_kernel(A, B, bandwidth=2.1), brute_kernel(A, B, 2.1))
    K = gaussian_kernel(A, bandwidth=2.1)
    np.testing.assert_allclose(K, brute_kernel(A, A, 2.1))
    assert np.array_equal(np.diag(K), np.ones(7)) and np.array_equal(K, K.T)


def test_kernel_and_client_round_are_translation_invariant(small_client):
    X, Z, r, lam = small_client
    X, Z = X * 0.3, Z * 0.3  # the regime where every kernel value matters
    K = gaussian_kernel(Z, X, bandwidth=r)
    K_far = gaussian_kernel(Z + OFFSET, X + OFFSET, bandwidth=r)
    # At 1.7e9 the data themselves are stored to ~2.4e-7; the raw expansion
    # ||z||^2 - 2 z.x + ||x||^2 would be off by hundreds.
    np.testing.assert_allclose(K_far, K, atol=1e-6)
    np.testing.assert_allclose(squared_distances(X + OFFSET), squared_distances(X), atol=1e-5)
    near = client_update(X, Z, bandwidth=r, lam=lam)
    far = client_update(X + OFFSET, Z + OFFSET, bandwidth=r, lam=lam)
    np.testing.assert_allclose(far.coef, near.coef, atol=1e-4)
    np.testing.assert_allclose(far.dictionary - OFFSET, near.dictionary, atol=1e-4)
    assert far.objective == pytest.approx(near.objective, abs=1e-5)
    assert mean_pairwise_distance(X + OFFSET) == pytest.approx(mean_pairwise_distance(X), abs=1e-6)


# --------------------------------------------------------------------------- #
# C-step, gradient, Z-steps
# --------------------------------------------------------------------------- #
def test_dictionary_gradient_matches_finite_differences(small_client):
    X, Z, r, lam = small_client
    coef = np.random.default_rng(3).normal(size=(4, 10))  # any C: it is held fixed

    def f(Zv):
        return client_objective(X, Zv, coef, bandwidth=r, lam=lam)

    numeric = np.zeros_like(Z)
    h = 1e-6
    for idx in np.ndindex(Z.shape):
        E = np.zeros_like(Z)
        E[idx] = h
        numeric[idx] = (f(Z + E) - f(Z - E)) / (2 * h)
    analytic = dictionary_gradient(X, Z, coef, bandwidth=r)
    assert np.linalg.norm(analytic - numeric) / np.linalg.norm(numeric) < 1e-6


def test_coefficient_step_is_the_exact_minimiser(small_client):
    X, Z, r, lam = small_client
    coef = solve_coefficients(X, Z, bandwidth=r, lam=lam)
    K_zz, K_zx = brute_kernel(Z, Z, r), brute_kernel(Z, X, r)
    # df/dC = (K(Z, Z) + lam I) C - K(Z, X) vanishes ...
    assert np.linalg.norm((K_zz + lam * np.eye(4)) @ coef - K_zx) < 1e-10
    # ... and the objective is larger in every direction around it.
    f0 = client_objective(X, Z, coef, bandwidth=r, lam=lam)
    rng = np.random.default_rng(4)
    for _ in range(5):
        E = rng.normal(size=coef.shape) * 1e-3
        assert client_objective(X, Z, coef + E, bandwidth=r, lam=lam) > f0


def test_coefficients_of_each_point_are_independent(small_client):
    """Per-column solves: out-of-sample coefficients equal the in-sample ones."""
    X, Z, r, lam = small_client
    joint = solve_coefficients(X, Z, bandwidth=r, lam=lam)
    single = solve_coefficients(X[6:7], Z, bandwidth=r, lam=lam)
    np.testing.assert_allclose(single[:, 0], joint[:, 6], rtol=1e-12)


def test_preconditioned_step_is_a_scaled_gradient_step(small_client):
    """Z - grad (M / r^2)^-1 = X^T W M^-1 (both in the paper's column layout)."""
    X, Z, r, lam = small_client
    coef = solve_coefficients(X, Z, bandwidth=r, lam=lam)
    # M rebuilt from its definition: diag(1^T W) + 2 Q - 2 diag(1^T Q).
    W = coef.T * brute_kernel(X, Z, r)
    Q = 0.5 * (coef @ coef.T) * brute_kernel(Z, Z, r)
    M = np.diag(W.sum(0)) + 2 * Q - 2 * np.diag(Q.sum(0))
    grad = dictionary_gradient(X, Z, coef, bandwidth=r)
    scaled_step = Z - np.linalg.solve(M / r**2, grad)
    step = preconditioned_dictionary_step(X, Z, coef, bandwidth=r)
    np.testing.assert_allclose(step, scaled_step, atol=1e-10)
    np.testing.assert_allclose(step, np.linalg.solve(M, W.T @ X), atol=1e-10)


def test_gradient_steps_descend(small_client):
    X, Z, r, lam = small_client
    coef = solve_coefficients(X, Z, bandwidth=r, lam=lam)
    values = [client_objective(X, Z, coef, bandwidth=r, lam=lam)]
    for _ in range(10):
        Z = gradient_dictionary_step(X, Z, coef, bandwidth=r)
        values.append(client_objective(X, Z, coef, bandwidth=r, lam=lam))
    assert np.all(np.diff(values) < 0)
    # A fixed step is taken as given: a tiny one barely moves the dictionary.
    Z2 = gradient_dictionary_step(X, Z, coef, bandwidth=r, learning_rate=1e-9)
    assert 0 < np.abs(Z2 - Z).max() < 1e-8


def test_client_update_options(small_client):
    X, Z, r, lam = small_client
    base = client_update(X, Z, bandwidth=r, lam=lam)
    np.testing.assert_allclose(base.coef, solve_coefficients(X, Z, bandwidth=r, lam=lam))
    assert base.objective == pytest.approx(
        client_objective(X, Z, base.coef, bandwidth=r, lam=lam), rel=1e-12
    )
    np.testing.assert_allclose(
        base.dictionary, preconditioned_dictionary_step(X, Z, base.coef, bandwidth=r)
    )
    grad = client_update(X, Z, bandwidth=r, lam=lam, z_update="gradient", n_local_steps=3)
    np.testing.assert_allclose(
        grad.dictionary, gradient_dictionary_step(X, Z, base.coef, bandwidth=r, n_steps=3)
    )
    # Clipping the coefficients used by the step changes the step, not the upload of C.
    clipped = client_update(X, Z, bandwidth=r, lam=lam, coef_clip=0.05)
    assert np.array_equal(clipped.coef, base.coef)
    assert not np.allclose(clipped.dictionary, base.dictionary)
    loose = client_update(X, Z, bandwidth=r, lam=lam, coef_clip=1e6)
    np.testing.assert_array_equal(loose.dictionary, base.dictionary)
    # Repeated preconditioned steps re-solve C before each step (frozen C diverges):
    # Q local steps are Q single-step rounds without the averaging.
    repeated = client_update(X, Z, bandwidth=r, lam=lam, n_local_steps=3)
    chained = Z
    for _ in range(3):
        chained = client_update(X, chained, bandwidth=r, lam=lam).dictionary
    np.testing.assert_allclose(repeated.dictionary, chained, rtol=1e-10)
    assert repeated.objective == base.objective


def test_atoms_without_weight_stay_where_they_are():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(6, 2))
    Z = np.vstack([X[:2] + 0.1, [[40.0, -40.0]]])  # the last atom sees no sample
    coef = solve_coefficients(X, Z, bandwidth=1.0, lam=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step = preconditioned_dictionary_step(X, Z, coef, bandwidth=1.0)
    assert np.all(np.isfinite(step))
    np.testing.assert_allclose(step[2], Z[2])


def test_far_initialisation_is_reported():
    X = np.random.default_rng(6).normal(size=(5, 2)) + 1e3
    Z = np.zeros((3, 2))
    with pytest.raises(ValueError, match="too far from the data"):
        client_update(X, Z, bandwidth=1.0, lam=0.01, check_underflow=True)
    # Without the check, atoms that see no sample do not move.
    out = client_update(X, Z, bandwidth=1.0, lam=0.01)
    assert np.array_equal(out.dictionary, Z)


def test_invalid_parameters(small_client):
    X, Z, r, lam = small_client
    with pytest.raises(ValueError, match="z_update"):
        client_update(X, Z, bandwidth=r, lam=lam, z_update="newton")
    with pytest.raises(ValueError, match="learning_rate"):
        client_update(X, Z, bandwidth=r, lam=lam, learning_rate=-1.0)
    with pytest.raises(ValueError, match="n_local_steps"):
        client_update(X, Z, bandwidth=r, lam=lam, n_local_steps=0)
    with pytest.raises(ValueError, match="bandwidth"):
        gaussian_kernel(X, bandwidth=0.0)
    with pytest.raises(ValueError, match="coef must have shape"):
        dictionary_gradient(X, Z, np.ones((3, 10)), bandwidth=r)


# --------------------------------------------------------------------------- #
# Federated rounds on iris
# --------------------------------------------------------------------------- #
def test_iris_hyperparameters():
    X = load_iris().data
    r = pooled_bandwidth(X)
    assert r == pytest.approx(2.5277, abs=1e-4)
    assert n_components_auto(X, bandwidth=r) == 7


def test_iris_kernel_reconstruction(iris_run):
    X, r, d, Z, coef, history = iris_run
    K = gaussian_kernel(X, bandwidth=r)
    K_hat = coef.T @ gaussian_kernel(Z, bandwidth=r) @ coef
    assert np.linalg.norm(K_hat - K) / np.linalg.norm(K) < 0.03
    assert history[0] / history[-1] > 10


def test_trilateration_recovers_iris_from_noiseless_coefficients(iris_run):
    X, r, d, Z, coef, _ = iris_run
    assert d > X.shape[1]
    recovered = trilateration_attack(coef, Z, bandwidth=r, lam=1e-2)
    assert np.abs(recovered - X).max() < 1e-8


def test_trilateration_fails_on_noisy_coefficients(iris_run):
    X, r, d, Z, coef, _ = iris_run
    scales = factor_noise_scales(
        0.5, 1e-5, bandwidth=r, n_components=d, lam=1e-2, n_rounds=20, learning_rate=0.1
    )
    noisy = add_gaussian_noise(coef, scales.coef, random_state=0)
    error = np.abs(trilateration_attack(noisy, Z, bandwidth=r, lam=1e-2) - X)
    assert error.mean() > X.std()
    # The experiments' 5 % relative noise already hides the exact values.
    noisy = add_gaussian_noise(coef, relative_noise_scale(coef, 0.05), random_state=0)
    error = np.abs(trilateration_attack(noisy, Z, bandwidth=r, lam=1e-2) - X)
    assert error.max() > 0.1


def test_trilateration_needs_more_atoms_than_features():
    X = np.random.default_rng(7).normal(size=(4, 3))
    Z = X[:3]
    coef = solve_coefficients(X, Z, bandwidth=1.0, lam=0.01)
    with pytest.raises(ValueError, match="at least n_features \\+ 1 = 4 atoms"):
        trilateration_attack(coef, Z, bandwidth=1.0, lam=0.01)


# --------------------------------------------------------------------------- #
# Server aggregation and statistics
# --------------------------------------------------------------------------- #
def test_aggregation():
    rng = np.random.default_rng(8)
    uploads = rng.normal(size=(3, 4, 2))
    np.testing.assert_allclose(aggregate_dictionaries(list(uploads)), uploads.mean(0))
    counts = [10, 30, 60]
    expected = 0.1 * uploads[0] + 0.3 * uploads[1] + 0.6 * uploads[2]
    np.testing.assert_allclose(aggregate_dictionaries(uploads, sample_counts=counts), expected)
    with pytest.raises(ValueError, match="sample_counts"):
        aggregate_dictionaries(uploads, sample_counts=[1, 2])


def test_initial_dictionaries_average_around_the_center():
    Z = initial_dictionaries(8, 50, 40, center=np.full(40, 5.0), random_state=0)
    mean = aggregate_dictionaries(Z)
    assert mean.mean() == pytest.approx(5.0, abs=0.02)
    assert mean.var() == pytest.approx(1 / 8, rel=0.1)
    rng = np.random.default_rng(9)
    parts = [rng.normal(size=(n, 3)) + 4 for n in (5, 9)]
    center = combine_feature_sums([(p.sum(axis=0), len(p)) for p in parts])
    np.testing.assert_allclose(center, np.vstack(parts).mean(0))


def test_bandwidth_statistics():
    rng = np.random.default_rng(10)
    X = rng.normal(size=(300, 4))
    # Ordered pairs with the zero diagonal: 2 * sum(pdist) / n^2.
    assert mean_pairwise_distance(X) == pytest.approx(2 * pdist(X).sum() / 300**2, rel=1e-12)
    parts = np.array_split(X, 3)
    stats = [mean_pairwise_distance(p) for p in parts]
    assert federated_bandwidth(stats, scale=2.0) == pytest.approx(2 * np.mean(stats))
    # Subsampling is reproducible and close to the full value.
    sub = mean_pairwise_distance(X, max_samples=200, random_state=0)
    assert sub == mean_pairwise_distance(X, max_samples=200, random_state=0)
    assert sub == pytest.approx(mean_pairwise_distance(X), rel=0.05)
    with pytest.raises(ValueError, match="bandwidth is 0"):
        federated_bandwidth([0.0, 0.0])


def test_energy_rank_is_the_smallest_sufficient_prefix():
    rng = np.random.default_rng(11)
    for _ in range(20):
        s = rng.exponential(size=15)
        tol = rng.uniform(0.3, 0.999)
        k = energy_rank(s, tol)
        ordered = np.sort(s)[::-1]
        assert ordered[:k].sum() >= tol * s.sum() * (1 - 1e-12)
        assert k == 1 or ordered[: k - 1].sum() < tol * s.sum()
    assert energy_rank(np.ones(6), 1.0) == 6


def test_local_rule_on_clients_underestimates_the_pooled_one():
    X = load_iris().data
    r = pooled_bandwidth(X)
    parts = np.array_split(np.random.default_rng(0).permutation(150), 8)
    local = [n_components_auto(X[idx], bandwidth=r) for idx in parts]
    assert combine_n_components(local) == max(local) <= n_components_auto(X, bandwidth=r)


@pytest.mark.parametrize(
    "n_features, tol, shrink",
    [(20, 0.99, 1.0), (5, 0.999, 3.0), (20, 0.99, 4.0)],
    ids=["first sketch", "doubled sketch", "full spectrum"],
)
def test_leading_spectrum_rank_equals_the_full_spectrum_rank(n_features, tol, shrink):
    """Above 2000 rows the rule sketches the leading eigenvalues (128 candidates,
    doubled while they miss the energy, the full spectrum once a sketch would
    exceed n / 4 columns); the answers are those of the full spectrum."""
    from scipy import linalg
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(2100, n_features=n_features, centers=5, random_state=0)
    r = pooled_bandwidth(X) / shrink
    full = energy_rank(linalg.eigvalsh(gaussian_kernel(X, bandwidth=r)), tol)
    assert n_components_auto(X, bandwidth=r, tol=tol) == full


def test_pair_distance_bandwidth_estimates_the_pooled_rule():
    """Distinct pairs inside the clients, times 1 - 1/n: the pooled Eq. 40 for IID clients."""
    rng = np.random.default_rng(12)
    X = rng.normal(size=(400, 3))
    total, pairs = pair_distance_sum(X[:50])
    assert pairs == 50 * 49
    assert total / pairs == pytest.approx(pdist(X[:50]).mean(), rel=1e-12)
    assert pair_distance_sum(X[:1]) == (0.0, 0)
    parts = np.array_split(X, 4)
    sums = [pair_distance_sum(p) for p in parts]
    total, pairs = sum(t for t, _ in sums), sum(p for _, p in sums)
    by_hand = sum(pdist(p).sum() * 2 for p in parts) / pairs * (1 - 1 / 400)
    assert pair_sum_bandwidth(total, pairs, n_samples=400) == pytest.approx(by_hand, rel=1e-12)
    assert pair_sum_bandwidth(total, pairs, n_samples=400, scale=2.0) == pytest.approx(2 * by_hand)
    assert pair_sum_bandwidth(total, pairs, n_samples=400) == pytest.approx(
        pooled_bandwidth(X), rel=0.02
    )
    # A one-sample client contributes nothing (Eq. 42 would count a zero).
    alone, no_pairs = pair_distance_sum(X[:1])
    assert pair_sum_bandwidth(total + alone, pairs + no_pairs, n_samples=401) == pytest.approx(
        by_hand * (1 - 1 / 401) / (1 - 1 / 400)
    )
    with pytest.raises(ValueError, match="no client holds two distinct points"):
        pair_sum_bandwidth(0.0, 0, n_samples=2)


def test_gradient_step_is_eq_16_with_the_documented_step_size(small_client):
    """Z - eta grad, with eta given or 1 / ||M / r^2||_2 rebuilt from its definition."""
    X, Z, r, lam = small_client
    coef = solve_coefficients(X, Z, bandwidth=r, lam=lam)
    grad = dictionary_gradient(X, Z, coef, bandwidth=r)
    fixed = gradient_dictionary_step(X, Z, coef, bandwidth=r, learning_rate=0.3)
    np.testing.assert_allclose(fixed, Z - 0.3 * grad, rtol=1e-12, atol=1e-14)
    W = coef.T * brute_kernel(X, Z, r)
    Q = 0.5 * (coef @ coef.T) * brute_kernel(Z, Z, r)
    M = np.diag(W.sum(0)) + 2 * Q - 2 * np.diag(Q.sum(0))
    auto = gradient_dictionary_step(X, Z, coef, bandwidth=r)
    np.testing.assert_allclose(auto, Z - grad / np.linalg.norm(M / r**2, 2), rtol=1e-10)
