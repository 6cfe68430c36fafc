"""An empirical lower bound on a mechanism's epsilon: a distinguishing test on neighbours.

A mechanism that is (epsilon, delta)-DP cannot be told apart from its run on a
neighbouring data set better than the bound allows: for any test that guesses
which of the two data sets a release came from, with false-positive rate
``FPR`` and false-negative rate ``FNR``, ``FPR e^epsilon + FNR >= 1 - delta``
and the same with the roles swapped (Kairouz, Oh and Viswanath, 2015). Running
the mechanism many times on both data sets, thresholding a statistic of the
release and bounding the two rates from above with Clopper-Pearson intervals
gives an epsilon every (epsilon, delta) claim must exceed, with the stated
confidence (Jagielski, Ullman and Oprea, NeurIPS 2020; Nasr et al., IEEE S&P
2021). A lower bound above the claim shows the claim false; one below it is
consistent with it (the audit finds leaks; it does not prove privacy).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from joblib import Parallel, delayed
from scipy.stats import beta
from sklearn.utils import Bunch, check_random_state

__all__ = ["audit_epsilon"]


def _upper_rate(errors, trials, alpha):
    """One-sided Clopper-Pearson upper bound of a binomial rate at level ``1 - alpha``."""
    if errors >= trials:
        return 1.0
    return float(beta.ppf(1.0 - alpha, errors + 1, trials - errors))


def _epsilon_from_rates(fpr, fnr, delta):
    """The epsilon that rates ``fpr`` and ``fnr`` force on an (epsilon, delta) claim."""
    bounds = [0.0]
    for a, b in ((fpr, fnr), (fnr, fpr)):
        if a > 0 and 1.0 - delta - b > 0:
            bounds.append(math.log((1.0 - delta - b) / a))
    return max(bounds)


def _rates(statistics_first, statistics_second, threshold):
    """Errors of the test "second data set when the statistic exceeds ``threshold``"."""
    false_positives = int(np.count_nonzero(statistics_first > threshold))
    false_negatives = int(np.count_nonzero(statistics_second <= threshold))
    return false_positives, false_negatives


def _best_threshold(first, second, delta):
    """The threshold, among the observed statistics, with the largest empirical epsilon."""
    candidates = np.unique(np.concatenate([first, second]))
    best, best_epsilon = candidates[0], -1.0
    for threshold in candidates:
        fp, fn = _rates(first, second, threshold)
        epsilon = _epsilon_from_rates(max(fp, 0.5) / len(first), max(fn, 0.5) / len(second), delta)
        if epsilon > best_epsilon:
            best, best_epsilon = threshold, epsilon
    return float(best)


def _check_trials(n_trials):
    if isinstance(n_trials, bool) or not isinstance(n_trials, numbers.Integral) or n_trials < 4:
        raise ValueError(f"n_trials must be an integer >= 4, got {n_trials!r}")
    return int(n_trials)


def audit_epsilon(
    statistic,
    neighbours,
    *,
    n_trials=200,
    delta=1e-5,
    confidence=0.95,
    random_state=None,
    n_jobs=None,
):
    """A lower bound on the epsilon of a mechanism, from runs on two neighbouring data sets.

    ``statistic(data, seed)`` runs the mechanism once on ``data`` (its noise
    from ``seed``) and returns one number of its release (a center's
    coordinate, a projection, a loss). It runs ``n_trials`` times on each
    data set of ``neighbours``. The first half of the runs picks the
    threshold that best separates the two data sets; on the second half,
    the test "second data set when the statistic exceeds the threshold" has
    its false-positive and false-negative rates bounded from above with
    one-sided Clopper-Pearson intervals (each at ``(1 + confidence) / 2``,
    so that both hold with ``confidence``), and the epsilon those rates
    force on any (epsilon, delta) claim is returned.

    Read more in the :ref:`User Guide <privacy>`.

    Parameters
    ----------
    statistic : callable
        ``statistic(data, seed) -> float``: one run of the mechanism.
    neighbours : tuple
        Two data sets, inputs of the mechanism that differ in one individual, under the
        neighbouring relation of the claim (add/remove or replace one row).
        Any objects ``statistic`` takes.
    n_trials : int, default=200
        Runs on each data set (at least 4; half pick the threshold).
    delta : float, default=1e-5
        The delta of the claim being audited.
    confidence : float, default=0.95
        Probability that the returned bound is below the true epsilon.
    random_state : int, RandomState instance or None, default=None
        Draws the seed of every run.
    n_jobs : int, default=None
        Runs in parallel (joblib).

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``epsilon_lower`` (the lower bound, 0 when the runs do not tell the
        data sets apart), ``threshold`` and ``direction`` (the test guesses
        the second data set when the statistic is ``"above"`` or
        ``"below"`` the threshold), ``false_positive_rate`` and
        ``false_negative_rate`` (their upper confidence bounds on the held-out
        runs), ``n_trials``, ``confidence`` and ``delta``.

    Examples
    --------
    The Gaussian mechanism calibrated to epsilon = 1 on a sum of sensitivity
    1: the audit's bound stays below the claim.

    >>> import numpy as np
    >>> from skfedclust.secure import audit_epsilon, gaussian_sigma
    >>> sigma = gaussian_sigma(1.0, 1.0, 1e-5)
    >>> def noisy_sum(data, seed):
    ...     return float(np.sum(data) + np.random.default_rng(seed).normal(0.0, sigma))
    >>> result = audit_epsilon(noisy_sum, ([0.0] * 10, [0.0] * 9 + [1.0]),
    ...                        n_trials=400, random_state=0)
    >>> bool(0.0 <= result.epsilon_lower < 1.0)
    True
    """
    if not callable(statistic):
        raise TypeError(f"statistic must be callable, got {type(statistic).__name__}")
    if not isinstance(neighbours, (tuple, list)) or len(neighbours) != 2:
        raise ValueError("neighbours must be a pair of neighbouring data sets")
    n_trials = _check_trials(n_trials)
    if not (isinstance(delta, numbers.Real) and 0.0 <= delta < 1.0):
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if not (isinstance(confidence, numbers.Real) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    rng = check_random_state(random_state)
    seeds = rng.randint(np.iinfo(np.int32).max, size=(2, n_trials))
    runs = Parallel(n_jobs=n_jobs)(
        delayed(statistic)(neighbours[which], int(seed))
        for which in (0, 1)
        for seed in seeds[which]
    )
    values = np.asarray(runs, dtype=np.float64).reshape(2, n_trials)
    if not np.all(np.isfinite(values)):
        raise ValueError("statistic returned a value that is not a finite number")
    half = n_trials // 2
    # The test guesses the data set whose statistic is larger on the first half.
    sign = -1.0 if values[1, :half].mean() < values[0, :half].mean() else 1.0
    oriented = sign * values
    threshold = _best_threshold(oriented[0, :half], oriented[1, :half], delta)
    first, second = oriented[0, half:], oriented[1, half:]
    fp, fn = _rates(first, second, threshold)
    alpha = (1.0 - confidence) / 2.0
    fpr = _upper_rate(fp, len(first), alpha)
    fnr = _upper_rate(fn, len(second), alpha)
    return Bunch(
        epsilon_lower=_epsilon_from_rates(fpr, fnr, delta),
        threshold=float(sign * threshold),
        direction="above" if sign > 0 else "below",
        false_positive_rate=fpr,
        false_negative_rate=fnr,
        n_trials=n_trials,
        confidence=float(confidence),
        delta=float(delta),
    )
