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
``peer-masked``
    A summand sent to the other nodes only (sealed peer messages), under
    pairwise masks shared with each of them: only the total over every node
    opens, on the nodes; the coordinator relays ciphertext.
``private-rows``
    Post-processing of the rows the node privatised earlier in the fit
    (input perturbation): charged already.
``nothing``
    No message at all, to the server or to a peer: the step keeps state or
    hands its own user an output (its labels). Any send is refused.

Some kinds exclude each other on one step (:data:`EXCLUSIVE_KINDS`): what the
node checks for one would be what it lets through for the other (a summary
counted by ``min-rows-per-vector`` is not also rows by design, exempt from
it). :func:`contradictions` names them; the package's test suite holds every
step of the package to it.
"""

from __future__ import annotations

__all__ = [
    "EXCLUSIVE_KINDS",
    "RELEASE_KINDS",
    "bound_only",
    "coded_shares",
    "contradictions",
    "coordinator_centers",
    "data_independent",
    "declared_releases",
    "dp_release",
    "masked_sum",
    "on_private_rows",
    "peer_masked",
    "releases_nothing",
    "takes_coordinator_centers",
    "releases_rows",
    "result",
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
    "peer-masked": (
        "a summand sent to the other nodes only, under pairwise masks: only the total over "
        "every node opens, and the coordinator relays it sealed"
    ),
    "nothing": "no message at all (state, or its own user's labels): any send is refused",
    "result": (
        "the federation's result, computed over every node (the blind k-means' centers): "
        "not counted as the node's vectors, each cluster's backing checked by the step, "
        "still searched for the node's rows"
    ),
    "masked-sum": (
        "a secure sum's upload: a summand under pairwise masks; only the total over the "
        "participants opens, under the secure sum's rules"
    ),
    "coded-shares": (
        "Lagrange-coded shares of the rows, or evaluations on them: any n_colluders of them "
        "tell nothing of the rows; enough of them decode only the method's output"
    ),
}

_ROW_LEVEL = (
    "summand",
    "sum-only",
    "summary",
    "bound-only",
    "rows-by-design",
    "peer-masked",
    "masked-sum",
    "coded-shares",
    "result",
)

#: ``kind: kinds it excludes on the same step``. A step that sends nothing, or
#: nothing computed from its rows, is that alone; the five ways a value
#: computed from rows may leave (added, only added, counted, reduced to a
#: bound, released by design) get checks that contradict each other, so a
#: step is at most one of them. ``dp-release`` and ``private-rows`` say how
#: the values were paid for and combine with any of the five.
_ALONE = ("nothing", "data-independent")
EXCLUSIVE_KINDS = {
    kind: frozenset(
        other
        for other in RELEASE_KINDS
        if other != kind
        and (kind in _ALONE or other in _ALONE or (kind in _ROW_LEVEL and other in _ROW_LEVEL))
    )
    for kind in RELEASE_KINDS
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


def contradictions(kinds):
    """The pairs of ``kinds`` that exclude each other (:data:`EXCLUSIVE_KINDS`).

    Parameters
    ----------
    kinds : iterable of str or callable
        Release kinds, or a client step (its :func:`declared_releases`).

    Returns
    -------
    pairs : list of tuple of str
        Each contradicting pair once, sorted; empty for a consistent
        declaration.

    Examples
    --------
    >>> from skfedclust.node._declarations import contradictions
    >>> contradictions({"summand", "dp-release"})
    []
    >>> contradictions({"summary", "rows-by-design"})
    [('rows-by-design', 'summary')]
    """
    kinds = declared_releases(kinds) if callable(kinds) else frozenset(kinds)
    return sorted(
        {
            tuple(sorted((kind, other)))
            for kind in kinds
            for other in EXCLUSIVE_KINDS.get(kind, ())
            if other in kinds
        }
    )


def releases_nothing(step):
    """Declare a client step that sends no message at all.

    It keeps state for the party's later steps, or hands its own user an
    output (its labels, the position of its rows): nothing goes to the
    server or to a peer, and the node refuses any send from it, whatever its
    inputs.
    """
    return _declare(step, "nothing")


def coordinator_centers(step):
    """Mark a client step whose exact statistics answer centers the coordinator chose.

    Not a kind of release but a condition on running at all: exact Lloyd
    totals for centers the coordinator picks adaptively are a reconstruction
    oracle (Denning 1980; Dinur and Nissim 2003), whatever the secure sum
    hides of each node's share. A node runs such a step only for a method its
    operator names in ``allow-coordinator-centers`` (rule
    ``coordinator-centers``); a default node names none, and runs
    :class:`~skfedclust.FederatedKMeans` with the nodes choosing the centers
    (``coordinator="blind"``).
    """
    step.__skfedclust_coordinator_centers__ = True
    return step


def takes_coordinator_centers(step):
    """Whether ``step`` is marked :func:`coordinator_centers`."""
    return bool(getattr(step, "__skfedclust_coordinator_centers__", False))


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
    (``NODE_ACCOUNTANT``); the gate refuses a reply of
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


def peer_masked(step):
    """Declare a client step that sends a summand to its peers only, under pairwise masks.

    The coordinator-blind Lloyd iteration: every node sends its statistics to
    every other node, masked with a seed it shares with each of them, and the
    nodes add the uploads themselves. Nothing of it goes to the coordinator.
    """
    return _declare(step, "peer-masked")


def result(step):
    """Declare a client step that releases the federation's result, computed over every node.

    The coordinator-blind k-means' centers are every node's rows' means, not
    this node's summary: the node does not count them against its own rows
    (``min-rows-per-vector``); the step checks that each released cluster is
    backed by enough rows and clients, and the node still searches what it
    sends for its rows.
    """
    return _declare(step, "result")


def masked_sum(step):
    """Declare a secure sum's upload step: its summand under pairwise masks.

    What leaves is the inner step's vector plus masks the node shares with its
    neighbours; the coordinator opens only the total over the participants,
    under the secure sum's rules (each checked by the node).
    """
    return _declare(step, "masked-sum")


def coded_shares(step):
    """Declare a client step that sends Lagrange-coded shares of its rows, or evaluations on them.

    OmniFC's shares are private against ``n_colluders`` parties; the
    evaluations of the squared distances decode, from enough parties, only
    the distance matrix (the method's output).
    """
    return _declare(step, "coded-shares")


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
