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
3. adds its share of the noise, ``sigma / sqrt(s)``, drawn from its
   cryptographic generator (``Party.secret_bytes``). The coordinator
   announces how many clients' shares ``t`` complete ``sigma``; the node
   trusts at most its operator's ``dp-trusted-shares`` of them (default 1:
   it adds the whole ``sigma``), so ``s = min(t, dp-trusted-shares)``, and
   ``s = 1`` for a release that leaves it outside a secure sum (the server
   sees that one upload alone). Two participants colluding with the server
   out of three cannot make a node's noise ``sigma / sqrt(3)`` by announcing
   ``t = 3``: :func:`node_noise_share`;
4. records ``s`` with the secure sum it joins: it reveals nothing of its masks
   for an announcement of fewer than ``s`` survivors (the sum would hold less
   noise than the guarantee needs).

A charged release's sensitivity must hold whatever the coordinator sends: the
node validates the public box it clips to (:func:`public_box`) and projects
every server-sent point (centers) into it (:func:`project_into_box`) before it
computes, so a center at ``1e6`` or ``inf`` cannot make one row move the
release by more than the sensitivity it charged.

A refusal is a :class:`~skfedclust.secure._sum_guard.SumRefusal` naming its
rule (``dp-budget``, ``dp-noise``, ``noise-share``, ``dp-inputs``).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers

import numpy as np

from ._accounting import BudgetError, PrivacyAccountant, Release
from ._policy import NODE_ACCOUNTANT
from ._sum_guard import SumRefusal

__all__ = [
    "MIN_SURVIVORS",
    "NODE_ACCOUNTANT",
    "charge_node",
    "inside_secure_sum",
    "node_noise_share",
    "private_normal",
    "project_into_box",
    "public_box",
]

#: What a noisy step tells the secure sum it runs in: the fewest survivors.
MIN_SURVIVORS = "secure sum: min survivors"

#: Set by the node's own secure-sum code while the summand step runs: only
#: there do other clients' noise shares join the node's in what the server sees.
_IN_SECURE_SUM = contextvars.ContextVar("skfedclust: summand of a secure sum", default=False)


@contextlib.contextmanager
def inside_secure_sum():
    """Run the enclosed summand step as the vector of a secure sum (the node's own code)."""
    token = _IN_SECURE_SUM.set(True)
    try:
        yield
    finally:
        _IN_SECURE_SUM.reset(token)


def node_noise_share(party, announced):
    """How many clients' noise shares this node counts on for one release: ``s``.

    The node adds ``sigma / sqrt(s)`` and requires ``s`` survivors of the
    secure sum (:data:`MIN_SURVIVORS`). ``announced`` is the coordinator's
    ``t``; the node never counts on more than its policy's
    ``dp_trusted_shares`` (``s = min(t, dp_trusted_shares)``), and on none
    but its own outside a secure sum (``s = 1``): an upload the server reads
    alone must hold the whole noise.

    Parameters
    ----------
    party : Party
        The node.
    announced : int
        The shares the coordinator announces (``noise_share``).

    Returns
    -------
    share : int
    """
    if isinstance(announced, bool) or not isinstance(announced, numbers.Integral) or announced < 1:
        raise SumRefusal("noise-share", f"noise_share={announced!r} is not an int >= 1")
    if not _IN_SECURE_SUM.get():
        return 1
    return int(min(int(announced), party.policy.dp_trusted_shares))


def public_box(lower, upper):
    """The public box ``[lower, upper]`` a charged step clips to, checked by the node.

    The box is a public constant of the step, and every sensitivity the node
    charges is computed from it (its diagonal ``||upper - lower||``): a wider
    box costs more budget, never less privacy. It must be finite (a diagonal of
    ``inf`` would charge nothing it can check), ordered and of some width.

    Returns
    -------
    lower, upper : ndarray of float64
    """
    try:
        lower = np.asarray(lower, dtype=np.float64)
        upper = np.asarray(upper, dtype=np.float64)
        lower, upper = np.broadcast_arrays(lower, upper)
    except (TypeError, ValueError) as exc:
        raise SumRefusal("dp-inputs", f"the public box is malformed: {exc}") from None
    if lower.ndim != 1 or not lower.size:
        raise SumRefusal("dp-inputs", "the public box must be two vectors of the rows' width")
    with np.errstate(over="ignore", invalid="ignore"):
        width = upper - lower
        diagonal = float(np.linalg.norm(width))
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.isfinite(diagonal)):
        raise SumRefusal(
            "dp-inputs", "the public box is not finite: no sensitivity can be charged for it"
        )
    if np.any(width < 0) or not diagonal > 0:
        raise SumRefusal(
            "dp-inputs",
            "the public box has a lower bound above its upper one, or no width",
        )
    return lower.copy(), upper.copy()


def project_into_box(points, lower, upper, what="centers"):
    """Server-sent ``points`` projected into the node's public box ``[lower, upper]``.

    A charged step computes with points the coordinator chose (the centers of
    a Lloyd iteration, of the inertia); its sensitivity (each row adds at most
    ``||w||`` or ``||w||^2``, ``w`` the box's width) holds only for points
    in the box. A center at ``(t - L) u`` and one at ``(t + L) u`` with
    ``L = 1e6`` would make each row move an inertia by about ``2 L ||w||``,
    far beyond the ``||w||^2`` it charged. Clipping is the Euclidean
    projection onto the box; ``inf`` goes to the box's faces. NaN has no
    projection: refused (rule ``dp-inputs``).
    """
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != lower.shape[0] or not points.shape[0]:
        raise SumRefusal(
            "dp-inputs",
            f"the {what} must be a non-empty 2-D array of {lower.shape[0]} columns, got "
            f"shape {points.shape}",
        )
    if np.isnan(points).any():
        raise SumRefusal("dp-inputs", f"the {what} hold NaN: no point of the box to project to")
    return np.clip(points, lower, upper)


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
        How many clients' shares of the noise the node counts on
        (:func:`node_noise_share`): the secure sum must keep that many
        survivors.

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
