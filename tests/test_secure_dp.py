"""Tests of skfedclust.secure._dp: FedSC's sensitivities, calibrations, clipping, noise."""

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from skfedclust.methods._fedsc_core import (
    client_update,
    solve_coefficients,
)
from skfedclust.secure import (
    add_gaussian_noise,
    clip_columns,
    clip_rows,
    coef_norm_bound,
    coef_sensitivity,
    data_noise_scale,
    dictionary_sensitivity,
    factor_noise_scales,
    relative_noise_scale,
)

FACTORS = dict(bandwidth=1.0, n_components=10, lam=0.01, n_rounds=20, learning_rate=0.1)


def gdp_epsilon(mu, delta):
    """epsilon at delta of mu-GDP (Dong, Roth & Su), computed without the package."""

    def delta_of(epsilon):
        tail = math.exp(min(epsilon + norm.logcdf(-epsilon / mu - mu / 2), 700.0))
        return norm.cdf(-epsilon / mu + mu / 2) - tail

    hi = 1.0
    while delta_of(hi) > delta:
        hi *= 2
    return brentq(lambda e: delta_of(e) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12)


# --------------------------------------------------------------------------- #
# Calibration: exact, at every epsilon
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 10.0, 100.0, 500.0, 1e4])
def test_factor_noise_spends_exactly_the_budget(epsilon):
    """S dictionaries and one coefficient release compose (mu-GDP) to the requested epsilon."""
    delta = 1e-5
    s = factor_noise_scales(epsilon, delta, **FACTORS)
    mu = math.hypot(
        math.sqrt(FACTORS["n_rounds"]) * s.dictionary_sensitivity / s.dictionary,
        s.coef_sensitivity / s.coef,
    )
    assert gdp_epsilon(mu, delta) == pytest.approx(epsilon, rel=1e-6)
    # Half of mu**2 each.
    assert FACTORS["n_rounds"] * (s.dictionary_sensitivity / s.dictionary) ** 2 == pytest.approx(
        (s.coef_sensitivity / s.coef) ** 2
    )


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 100.0, 1e3])
def test_data_noise_is_the_exact_gaussian_mechanism(epsilon):
    sigma = data_noise_scale(epsilon, 1e-5, 3.0)
    assert gdp_epsilon(6.0 / sigma, 1e-5) == pytest.approx(epsilon, rel=1e-6)


def test_the_classical_calibration_would_overstate_the_privacy():
    """What the replaced formulas promised and what they delivered (mu-GDP)."""
    delta = 1e-5
    # sigma = c Delta / epsilon, c = sqrt(2 ln(1.25 / delta)): epsilon = 100 is really ~300.
    classical = math.sqrt(2 * math.log(1.25 / delta)) / 100.0
    assert gdp_epsilon(1.0 / classical, delta) > 250
    assert data_noise_scale(100.0, delta, 0.5) > classical
    # The composition formula: epsilon = 500 over 20 rounds was really about 1030.
    S, eps = 20, 500.0
    composed = math.sqrt(8 * S * math.log(math.e + eps / delta)) / eps
    assert gdp_epsilon(math.sqrt(S) / composed, delta) > 1000


def test_factor_calibration_follows_the_sensitivities():
    base = factor_noise_scales(2.0, 1e-5, **FACTORS)
    assert base.coef_sensitivity == 20.0  # 2 / sqrt(lam)
    assert base.dictionary_sensitivity == pytest.approx(1.0)  # eta / (r sqrt(lam))
    # A coefficient clip below 1 / (2 sqrt(lam)) shrinks both in proportion.
    tight = factor_noise_scales(2.0, 1e-5, coef_clip=2.5, **FACTORS)
    assert tight.dictionary == pytest.approx(base.dictionary / 2)
    assert tight.coef == pytest.approx(base.coef / 4)
    # A looser clip than the automatic bounds changes nothing.
    assert factor_noise_scales(2.0, 1e-5, coef_clip=1e9, **FACTORS) == base
    # The share moves mu**2 between the two releases.
    more_z = factor_noise_scales(2.0, 1e-5, dictionary_share=0.8, **FACTORS)
    assert more_z.dictionary < base.dictionary and more_z.coef > base.coef
    # The dictionary noise covers every round: sigma grows like sqrt(S).
    longer = factor_noise_scales(2.0, 1e-5, **{**FACTORS, "n_rounds": 80})
    assert longer.dictionary == pytest.approx(2 * base.dictionary)
    assert longer.coef == base.coef


def test_coefficient_norm_bounds():
    assert coef_norm_bound(lam=0.04) == pytest.approx(5.0)
    assert coef_norm_bound(lam=0.04, coef_clip=1.5) == 1.5
    # sqrt(d) / lam is smaller only for lam > d.
    assert coef_norm_bound(lam=4.0, n_components=1) == pytest.approx(0.25)
    assert coef_norm_bound(lam=0.04, n_components=10) == pytest.approx(5.0)
    rng = np.random.default_rng(0)
    for lam in (1e-3, 1e-2, 1.0):
        Z, X = rng.normal(size=(6, 2)) * 0.3, rng.normal(size=(200, 2))
        C = solve_coefficients(X, Z, bandwidth=0.5, lam=lam)
        assert np.linalg.norm(C, axis=0).max() <= coef_norm_bound(lam=lam)


@pytest.mark.parametrize("t", [0.01, 7.0])
def test_sensitivities_respect_the_units_of_length(t):
    """Rescaling every length by t leaves the coefficients unchanged, and a gradient
    step (whose step size is a squared length) moves the dictionary by a length."""
    common = dict(lam=0.05, n_components=5)
    assert coef_sensitivity(**common) == coef_sensitivity(**common)
    step = dictionary_sensitivity(bandwidth=1.3, learning_rate=0.2, **common)
    scaled = dictionary_sensitivity(bandwidth=1.3 * t, learning_rate=0.2 * t**2, **common)
    assert scaled == pytest.approx(t * step)


# --------------------------------------------------------------------------- #
# Sensitivities against an adversary
# --------------------------------------------------------------------------- #
def _releases(X, Z, *, r, lam, eta, coef_clip):
    """What the client sends: its dictionary after one gradient step, and the
    coefficients of row 0 (clipped to coef_clip if given), for the same Z."""
    upload = client_update(
        X, Z, bandwidth=r, lam=lam, z_update="gradient", learning_rate=eta, coef_clip=coef_clip
    ).dictionary
    coef = solve_coefficients(X[:1], Z, bandwidth=r, lam=lam)
    if coef_clip is not None:
        coef = clip_columns(coef, coef_clip)
    return upload, coef[:, 0]


def _adversarial_search(*, lam, coef_clip, seed, restarts=4, steps=150, n=5, d=4, m=2):
    """Largest changes of the releases found by replacing row 0 of a client.

    Random restarts over the client's other rows, the public dictionary and the
    two candidate rows, then a local search (accepted random moves with a
    shrinking step) over the replaced row, its replacement and the dictionary,
    for each of the two releases. Returns the largest ratios to the reported
    sensitivities."""
    rng = np.random.default_rng(seed)
    r, eta = 1.0, 0.5
    bounds = (
        dictionary_sensitivity(bandwidth=r, learning_rate=eta, lam=lam, coef_clip=coef_clip),
        coef_sensitivity(lam=lam, coef_clip=coef_clip),
    )
    worst = [0.0, 0.0]
    for release in (0, 1):
        for _ in range(restarts):
            X = rng.normal(size=(n, m))
            Z = rng.normal(size=(d, m)) * rng.uniform(0.05, 1.5)
            x, x2 = rng.normal(size=(2, m)) * 2

            def change(x, x2, Z, X=X, release=release):
                A, B = X.copy(), X.copy()
                A[0], B[0] = x, x2
                a = _releases(A, Z, r=r, lam=lam, eta=eta, coef_clip=coef_clip)[release]
                b = _releases(B, Z, r=r, lam=lam, eta=eta, coef_clip=coef_clip)[release]
                return np.linalg.norm(a - b)

            best, step = change(x, x2, Z), 0.5
            for _ in range(steps):
                moved = (
                    x + step * rng.normal(size=m),
                    x2 + step * rng.normal(size=m),
                    Z + 0.3 * step * rng.normal(size=Z.shape),
                )
                value = change(*moved)
                if value > best:
                    (x, x2, Z), best = moved, value
                else:
                    step *= 0.99
            worst[release] = max(worst[release], best / bounds[release])
    return worst


@pytest.mark.parametrize("lam, coef_clip", [(1e-2, None), (1e-3, None), (1e-3, 0.5), (1e-1, None)])
def test_no_neighbouring_data_set_exceeds_the_sensitivities(lam, coef_clip):
    """The coefficients are re-solved from the replaced row inside the step; the
    search moves the public dictionary too, so the bounds hold for every Z."""
    dictionary_ratio, coef_ratio = _adversarial_search(lam=lam, coef_clip=coef_clip, seed=0)
    assert dictionary_ratio <= 1.0 and coef_ratio <= 1.0
    # The search is not idle: it reaches a visible fraction of both bounds.
    assert dictionary_ratio > 0.05 and coef_ratio > 0.05


def test_add_gaussian_noise_has_the_requested_spread_and_copies():
    X = np.full((400, 50), 3.0)
    noisy = add_gaussian_noise(X, 0.5, random_state=1)
    assert np.all(X == 3.0)
    assert np.std(noisy - X) == pytest.approx(0.5, rel=0.02)
    assert abs(np.mean(noisy - X)) < 0.01
    assert np.array_equal(noisy, add_gaussian_noise(X, 0.5, random_state=1))
    assert np.array_equal(add_gaussian_noise(X, 0.0), X)


# --------------------------------------------------------------------------- #
# Clipping and relative noise
# --------------------------------------------------------------------------- #
def test_clip_rows_and_columns():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 4)) * rng.uniform(0.1, 5, size=(30, 1))
    original = X.copy()
    clipped = clip_rows(X, 2.0)
    norms = np.linalg.norm(X, axis=1)
    assert np.array_equal(X, original)
    assert np.all(np.linalg.norm(clipped, axis=1) <= 2.0 + 1e-12)
    inside = norms <= 2.0
    assert inside.any() and (~inside).any()
    assert np.array_equal(clipped[inside], X[inside])
    np.testing.assert_allclose(np.linalg.norm(clipped[~inside], axis=1), 2.0)
    # Directions are kept.
    np.testing.assert_allclose(clipped[~inside] * norms[~inside, None] / 2.0, X[~inside])
    np.testing.assert_array_equal(clip_columns(X.T, 2.0), clipped.T)
    # Zero rows stay zero.
    assert np.array_equal(clip_rows(np.zeros((2, 3)), 1.0), np.zeros((2, 3)))


def test_relative_noise_scale_uses_population_std():
    M = np.arange(12.0).reshape(3, 4)
    assert relative_noise_scale(M, 0.15) == pytest.approx(0.15 * np.std(M, ddof=0))
    assert relative_noise_scale(M, 0.0) == 0.0


# --------------------------------------------------------------------------- #
# Errors
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("epsilon", [0, -1.0, float("nan"), None])
def test_invalid_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        data_noise_scale(epsilon, 1e-5, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        factor_noise_scales(epsilon, 1e-5, **FACTORS)


@pytest.mark.parametrize("delta", [0, 1, -1e-3, 1.5, None])
def test_invalid_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        data_noise_scale(0.5, delta, 1.0)
    with pytest.raises(ValueError, match="delta"):
        factor_noise_scales(0.5, delta, **FACTORS)


def test_missing_clip_norm_is_a_clear_error():
    with pytest.raises(ValueError, match="clip_norm is required"):
        data_noise_scale(0.5, 1e-5, None)
    with pytest.raises(ValueError, match="clip_norm must be a finite number > 0"):
        data_noise_scale(0.5, 1e-5, 0.0)
    with pytest.raises(ValueError, match="max_norm"):
        clip_rows(np.ones((2, 2)), None)


def test_other_invalid_parameters():
    with pytest.raises(ValueError, match="fixed, data-independent"):
        factor_noise_scales(1.0, 1e-5, **{**FACTORS, "learning_rate": "auto"})
    with pytest.raises(ValueError, match="dictionary_share"):
        factor_noise_scales(1.0, 1e-5, dictionary_share=1.0, **FACTORS)
    with pytest.raises(ValueError, match="n_rounds"):
        factor_noise_scales(1.0, 1e-5, **{**FACTORS, "n_rounds": 0})
    with pytest.raises(ValueError, match="n_components"):
        coef_sensitivity(n_components=0, lam=0.1)
    with pytest.raises(ValueError, match="lam"):
        coef_sensitivity(lam=0.0)
    with pytest.raises(ValueError, match="coef_clip"):
        dictionary_sensitivity(bandwidth=1.0, learning_rate=0.1, lam=0.1, coef_clip=-1.0)
    with pytest.raises(ValueError, match="scale"):
        add_gaussian_noise(np.ones(2), -0.1)
    with pytest.raises(ValueError, match="2D"):
        clip_rows(np.ones(3), 1.0)
