"""Exact Gaussian accounting: calibration, composition, the accountant."""

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from skfedclust.secure import (
    BudgetError,
    PrivacyAccountant,
    gaussian_epsilon,
    gaussian_sigma,
)


def _gdp_delta(epsilon, mu):
    # Dong, Roth and Su: the (epsilon, delta) curve of mu-GDP, computed here
    # independently of the package (and of dp-accounting).
    # exp(epsilon) * Phi(b) in log space: epsilon can be in the thousands.
    first = norm.cdf(-epsilon / mu + mu / 2)
    return first - math.exp(min(epsilon + norm.logcdf(-epsilon / mu - mu / 2), 700.0))


def _gdp_epsilon(mu, delta):
    if _gdp_delta(0.0, mu) <= delta:
        return 0.0
    hi = 1.0
    while _gdp_delta(hi, mu) > delta:
        hi *= 2
    return brentq(lambda e: _gdp_delta(e, mu) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("sigma", [1e-2, 1e-1, 1.0, 10.0, 1e2, 1e3, 1e4])
@pytest.mark.parametrize("compositions", [1, 10, 100, 1000])
def test_reported_epsilon_is_exact_gdp_to_one_percent(sigma, compositions):
    delta = 1e-5
    accountant = PrivacyAccountant(delta=delta)
    accountant.charge("x", sensitivity=1.0, sigma=sigma, count=compositions)
    mu = math.sqrt(compositions) / sigma
    reported, _ = accountant.spent()
    exact = _gdp_epsilon(mu, delta)
    assert reported == pytest.approx(exact, rel=0.01, abs=1e-9)


@pytest.mark.parametrize("epsilon", [0.01, 0.5, 1.0, 10.0, 100.0, 500.0, 1e4])
@pytest.mark.parametrize("compositions", [1, 20])
def test_calibrated_sigma_meets_the_target_exactly_at_every_epsilon(epsilon, compositions):
    delta = 1e-5
    sigma = gaussian_sigma(2.0, epsilon, delta, compositions=compositions)
    mu = 2.0 * math.sqrt(compositions) / sigma
    # The target is met, and not with room to spare (the smallest sigma).
    assert _gdp_delta(epsilon, mu) <= delta * (1 + 1e-6)
    assert _gdp_delta(epsilon, mu * 1.001) > delta


def test_the_classical_formula_overstates_privacy_at_large_epsilon():
    # sigma = sqrt(2 ln(1.25/delta)) / epsilon is valid only for epsilon < 1:
    # at epsilon = 100 it delivers about 300.
    delta = 1e-5
    classical = math.sqrt(2 * math.log(1.25 / delta)) / 100.0
    assert gaussian_epsilon(1.0 / classical, delta) > 250
    assert gaussian_sigma(1.0, 100.0, delta) > classical


def test_budget_refuses_a_release_that_would_exceed_it():
    accountant = PrivacyAccountant(epsilon=1.0, delta=1e-5)
    sigma = gaussian_sigma(1.0, 1.0, 1e-5, compositions=2)
    accountant.charge("first half", sensitivity=1.0, sigma=sigma)
    accountant.charge("second half", sensitivity=1.0, sigma=sigma)
    assert accountant.spent()[0] == pytest.approx(1.0, rel=1e-6)
    assert accountant.remaining_mu() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(BudgetError, match="over the budget epsilon=1"):
        accountant.charge("one more", sensitivity=1.0, sigma=sigma)
    assert len(accountant.releases) == 2


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="epsilon must be in"):
        gaussian_sigma(1.0, 0.0, 1e-5)
    with pytest.raises(ValueError, match="delta must be in"):
        gaussian_sigma(1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="compositions must be an int"):
        gaussian_sigma(1.0, 1.0, 1e-5, compositions=0)
    with pytest.raises(ValueError, match="neighbouring must be one of"):
        PrivacyAccountant(neighbouring="swap")
    assert gaussian_epsilon(0.0, 1e-5) == 0.0
    assert np.isfinite(gaussian_sigma(1e-300, 1e-300, 1e-5))


# --------------------------------------------------------------------------- #
# One range for every argument, and clear errors
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("count", [-3, 0, 2.9, True, "2"])
def test_a_count_is_an_integer_of_at_least_one(count):
    accountant = PrivacyAccountant(epsilon=1.0)
    accountant.charge("sums", sensitivity=1.0, sigma=100.0)
    before = accountant.spent()
    with pytest.raises(ValueError, match="count must be an int >= 1"):
        accountant.charge("sums", sensitivity=1.0, sigma=100.0, count=count)
    assert accountant.spent() == before and len(accountant.releases) == 1  # nothing refunded


@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.inf, math.nan, 1e300, True])
def test_epsilon_is_finite_positive_and_within_the_calibrated_range(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        gaussian_sigma(1.0, epsilon, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        PrivacyAccountant(epsilon=epsilon)


@pytest.mark.parametrize(
    ("sensitivity", "sigma"), [(1.0, 1e-300), (math.inf, 1.0), (1.0, math.inf), (1.0, 0.0)]
)
def test_a_release_without_noise_to_speak_of_is_refused(sensitivity, sigma):
    with pytest.raises(ValueError, match="sigma|sensitivity"):
        PrivacyAccountant().charge("sums", sensitivity=sensitivity, sigma=sigma)


def test_the_largest_epsilon_still_calibrates():
    from skfedclust.node._accounting import MAX_EPSILON

    sigma = gaussian_sigma(1.0, MAX_EPSILON, 1e-5)
    assert 0 < sigma < 1e-3
    accountant = PrivacyAccountant()
    accountant.charge("sums", sensitivity=1.0, sigma=sigma)
    assert accountant.spent()[0] == pytest.approx(MAX_EPSILON, rel=1e-6)
