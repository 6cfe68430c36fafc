"""Differential privacy a node enforces itself: its own accountant, its own noise.

A coordinator announces the noise of every release (its standard deviation,
the public box the rows are clipped to, how many clients' shares make it up);
a lying one could announce no noise, or a share of it that no sum ever
completes. So a node that makes a noisy release:

1. computes the release's sensitivity from the public box itself;
2. charges the release to its own accountant (its node policy's ``dp-epsilon``
   and ``dp-delta``, per fit, or across fits on the same rows with a
   ``privacy-ledger``) before drawing any noise, and refuses it when the
   budget cannot pay or when the release carries no noise;
3. adds its share of the noise, ``sigma / sqrt(t)`` for a release that ``t``
   clients' shares complete, drawn from its cryptographic generator
   (``Party.secret_bytes``);
4. records ``t`` with the secure sum it joins: it reveals nothing of its masks
   for an announcement of fewer than ``t`` survivors (the sum would hold less
   noise than the guarantee needs).

A refusal is a :class:`~skfedclust.secure._sum_guard.SumRefusal` naming its
rule (``dp-budget``, ``dp-noise``, ``noise-share``).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ._accounting import BudgetError, PrivacyAccountant, Release
from ._policy import NODE_ACCOUNTANT
from ._sum_guard import SumRefusal

__all__ = ["MIN_SURVIVORS", "NODE_ACCOUNTANT", "charge_node", "private_normal"]

#: What a noisy step tells the secure sum it runs in: the fewest survivors.
MIN_SURVIVORS = "secure sum: min survivors"


def node_accountant(state, party):
    """The node's accountant so far (a copy: the state a step sees is read-only).

    With a privacy ledger, every release charged on the node's rows, in this
    fit and the earlier ones; else this fit's.
    """
    policy = party.policy
    accountant = PrivacyAccountant(policy.dp_epsilon, policy.dp_delta, policy.dp_neighbouring)
    ledger = getattr(party, "ledger", None)
    if ledger is not None:
        accountant.releases = [Release(*r) for r in ledger.releases()]
        return accountant
    previous = state.get(NODE_ACCOUNTANT)
    if previous is not None:
        accountant.releases = list(previous.releases)
    return accountant


def charge_node(state, party, releases, noise_share):
    """Charge ``releases`` to the node's own accountant; what the step keeps.

    Parameters
    ----------
    state : mapping
        The node's private state.
    party : Party
        The node (its policy holds its budget).
    releases : list of (str, float, float)
        ``(what, sensitivity, sigma)`` of each Gaussian release, ``sigma`` the
        standard deviation the released value holds in total.
    noise_share : int
        How many clients' shares of the noise make up ``sigma``.

    Returns
    -------
    keep : dict
        The updated accountant and the sum's fewest survivors, for the step's
        ``Reply(keep=...)``.
    """
    if (
        isinstance(noise_share, bool)
        or not isinstance(noise_share, numbers.Integral)
        or noise_share < 1
    ):
        raise SumRefusal("noise-share", f"noise_share={noise_share!r} is not an int >= 1")
    ledger = getattr(party, "ledger", None)
    if ledger is None:
        accountant = _charge(node_accountant(state, party), releases, "for this fit")
    else:
        # One lock across reading what was spent, checking the budget and
        # writing the charge: a fit of the same node running at once charges
        # before or after, never in between (both would pass the check).
        with ledger.locked():
            accountant = node_accountant(state, party)
            before = len(accountant.releases)
            _charge(accountant, releases, f"across the fits kept in {ledger.path}")
            # Written before the noise is drawn and anything leaves the node.
            new = accountant.releases[before:]
            ledger.record_releases([(r.what, r.sensitivity, r.sigma, r.count) for r in new])
    return {NODE_ACCOUNTANT: accountant, MIN_SURVIVORS: int(noise_share)}


def _charge(accountant, releases, span):
    """Charge ``releases`` to ``accountant``; a refusal names the budget's ``span``."""
    for what, sensitivity, sigma in releases:
        try:
            accountant.charge(what, sensitivity=sensitivity, sigma=sigma)
        except BudgetError as exc:
            raise SumRefusal("dp-budget", f"this node's own budget {span}: {exc}") from exc
        except ValueError as exc:
            raise SumRefusal("dp-noise", f"the release {what!r} is not private: {exc}") from exc
    return accountant


def private_normal(party, std, shape):
    """Gaussian noise of standard deviation ``std`` from the party's cryptographic generator.

    Box-Muller on uniform draws of 53 bits each from ChaCha20
    (``Party.secret_bytes``):
    a server that knows every public seed cannot regenerate it, and in a
    simulation it is reproducible from ``random_state``.
    """
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.zeros(shape)
    words = np.frombuffer(party.secret_bytes(16 * n), dtype=np.uint64).reshape(2, n)
    # Uniform in (0, 1]: never log(0).
    u1 = ((words[0] >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53
    u2 = (words[1] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    normal = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return (float(std) * normal).reshape(shape)
