"""What a client step releases, declared in the node's own code.

A coordinator names the steps a node runs; it does not get to say what they
send. Each client step of the package carries a declaration of the kind of
value it releases, made by a decorator beside its definition, and the node's
gate (:func:`skfedclust.node.serve_step`) derives its checks from that
declaration, whatever the dtype of the message: integers, counts, ranks and
histograms are values too. A step may combine kinds (a DP release sent as a
summand of a secure sum); a step that declares none is not run.

The kinds (:data:`RELEASE_KINDS`):

``data-independent``
    Keys, nonces, commitments, mask shares, acknowledgements: nothing computed
    from the node's rows. A node with a DP budget sends these.
``summand``
    One client's statistic made to be added (per-cluster sums, moments): sent
    only as the vector of a secure sum, or in the clear where the node's
    policy allows clear sums.
``sum-only``
    Per-client values only their total may reveal (binary-order histograms):
    run only inside a secure sum, never on their own.
``summary``
    A per-client summary (local centroids, micro-centroids): each vector must
    be backed by ``min-rows-per-vector`` of the node's rows and be none of them.
``bound-only``
    Row-level values that a bound agreement reduces to the binary order of
    their largest entry before anything leaves the node.
``rows-by-design``
    Row-level values that the method's paper releases (DC's representations,
    FFCM's k-means++ seeds): sent only where the node's operator allows that
    method by name.
``dp-release``
    A noisy release the step charges to the node's own accountant, with a
    sensitivity it computes from parameters it enforces itself.
``private-rows``
    Post-processing of the rows the node privatised earlier in the fit
    (input perturbation): charged already.
"""

from __future__ import annotations

__all__ = [
    "RELEASE_KINDS",
    "bound_only",
    "data_independent",
    "declared_releases",
    "dp_release",
    "on_private_rows",
    "releases_rows",
    "sum_only",
    "summand",
    "summary",
]

#: Every kind of release a client step can declare, with what the node checks.
RELEASE_KINDS = {
    "data-independent": (
        "keys, nonces, commitments and mask shares: nothing computed from the node's rows"
    ),
    "summand": (
        "one client's statistic made to be added: only as the vector of a secure sum "
        "(in the clear only with allow-clear-sums)"
    ),
    "sum-only": "per-client values only their total may reveal: only inside a secure sum",
    "summary": ("a per-client summary: each vector backed by min-rows-per-vector rows, none a row"),
    "bound-only": (
        "row-level values a bound agreement reduces to the binary order of their largest entry"
    ),
    "rows-by-design": (
        "row-level values the method's paper releases: only for methods the operator names "
        "in allow-row-release"
    ),
    "dp-release": "a noisy release charged to the node's own accountant",
    "private-rows": "post-processing of rows the node privatised (charged already)",
}

_ATTRIBUTE = "__skfedclust_releases__"


def _declare(step, kind):
    if kind not in RELEASE_KINDS:
        raise ValueError(f"unknown release kind {kind!r}; known: {', '.join(RELEASE_KINDS)}")
    setattr(step, _ATTRIBUTE, frozenset(getattr(step, _ATTRIBUTE, frozenset())) | {kind})
    return step


def declared_releases(step):
    """The release kinds ``step`` declares (an empty frozenset: it declares none)."""
    return frozenset(getattr(step, _ATTRIBUTE, frozenset()))


def data_independent(step):
    """Declare a client step that sends nothing computed from its node's rows.

    Keys, nonces, commitments, the shares of its own masks, acknowledgements:
    values a node with a DP budget may send, since no row moves them.
    """
    return _declare(step, "data-independent")


def summary(step):
    """Declare a client step that sends a per-client summary of its node's rows.

    Local centroids, micro-centroids, per-client scalers: each vector it sends
    must be backed by at least ``min-rows-per-vector`` rows of the node and be
    none of them (``refuse-raw-rows``); a node with a DP budget refuses it
    unless the step charged its release.
    """
    return _declare(step, "summary")


def dp_release(step):
    """Declare a client step that makes a noisy release charged to its node's accountant.

    The step computes the release's sensitivity from parameters the node
    enforces itself (its public box, projected server inputs), charges the
    node's accountant before drawing the noise and keeps the accountant
    (:data:`~skfedclust.node.NODE_ACCOUNTANT`); the gate refuses a reply of
    such a step that charged nothing on a node with a budget.
    """
    return _declare(step, "dp-release")


def bound_only(step):
    """Mark a client step that may run only inside a bound agreement.

    Such a step sends row-level values (the rows themselves, their deviations
    from a mean) that a bound agreement reduces to a histogram of binary
    orders before anything leaves the node. A node refuses to run it on its
    own or as the vector of a secure sum, whatever the coordinator asks.
    """
    step.__skfedclust_bound_only__ = True
    return _declare(step, "bound-only")


def summand(step):
    """Mark a client step whose message is one client's statistic, made to be added.

    Its vector goes into a secure sum, where the server learns the total
    only. Run on its own, the same step hands the server that one client's
    statistic in the clear: a node does so only where its policy allows clear
    sums (``allow-clear-sums``, the estimators' ``secure_aggregation=False``).
    """
    step.__skfedclust_summand__ = True
    return _declare(step, "summand")


def sum_only(step):
    """Mark a client step that may run only inside a secure sum (as its vector or its bound).

    Such a step sends per-client values that only their total may reveal (a
    histogram of binary orders, per-cluster sums of distances): a node refuses
    to run it on its own, whatever the coordinator asks.
    """
    step.__skfedclust_sum_only__ = True
    return _declare(step, "sum-only")


def releases_rows(reason):
    """Declare a client step whose method releases row-level values by design.

    DC's intermediate representations (every row through the party's private
    map) and FFCM's k-means++ seeds (rows of the seed client,
    ``init="k-means++-rows"``) are what their papers send. A node runs such a
    step only in a fit of a method its operator names in
    ``allow-row-release`` (rule ``row-release``; a default node names none).
    So allowed, its policy does not count the step's vectors or look for its
    rows in them (it would refuse the method itself), unless it sets
    ``refuse-raw-rows = strict``, which refuses them. The Security page lists
    every such step with ``reason``.
    """

    def mark(step):
        step.__skfedclust_releases_rows__ = str(reason)
        return _declare(step, "rows-by-design")

    return mark


def on_private_rows(step):
    """Mark a client step that computes only on the rows its node privatised.

    Under input perturbation a step makes a noisy copy of its node's rows,
    charged to the node's own accountant, and every later step computes on
    that copy: its messages are post-processing of a release already paid
    for. A node with a budget (``dp-epsilon``) sends no value that is not
    charged (rule ``dp-only``), except from a step so declared while it holds
    such a copy.
    """
    step.__skfedclust_on_private_rows__ = True
    return _declare(step, "private-rows")
