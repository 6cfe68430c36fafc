"""What a node agrees to do: its policy, set by its operator (a node config on Flower).

The coordinator chooses the method and its parameters, and some choices make
a node give away more than its operator may accept: fuzzy c-means seeded with
``n_clusters`` equal to a node's row count uploads every one of its rows. A
node therefore checks each request against its own policy before it answers:

``allowed-methods``
    Comma-separated estimator class names (``"KFed,FeCA,GOLDClustering"``).
    The node refuses the handshake of a fit of any other method, and any step
    that belongs to another method's module.
``min-rows-per-vector``
    The node refuses to send the server (in the clear or as the plaintext of
    a secure sum) an array of more than ``n_rows / m`` vectors of its feature
    width (centroids, per-cluster sums, seeds): each vector it sends then
    summarises at least ``m`` of its rows on average. Default 2; ``0`` turns
    it off.
``refuse-raw-rows``
    ``true`` (the default): the node refuses to send any message containing a
    vector within ``raw-row-tolerance`` (``1e-4`` of each feature's spread on
    the node) of one of its own rows, to the server or to another party, or
    sums in the clear from which the server computes such a row (a reply's
    ``reveals``: a cluster's mean from its sum of deviations from a public
    center); ``strict`` also in the steps whose method releases rows by design
    (``releases_rows``, listed on the Security
    page); ``false`` turns the check off.
``raw-row-tolerance``
    How close to one of its rows, in units of each feature's spread on the
    node, a vector counts as that row for ``refuse-raw-rows`` (default
    ``1e-4``; a finite number >= 0).
``dc-full-rank-maps``
    ``false`` (the default): in DC-Clustering the node refuses to map its rows
    to as many dimensions as it has features. The server colluding with any
    one party (which holds the anchors' recipe) sees the anchors and their
    images, solves for the node's map and inverts it: exactly when the map
    keeps every dimension, up to the dimensions it drops otherwise.
``dp-epsilon``, ``dp-delta``
    The node's own differential-privacy budget for a fit (no budget by
    default; ``dp-delta`` 1e-5). Every noisy release a step makes is charged
    to the node's own accountant, from the public bounds and the noise the
    release holds, before the noise is drawn: a release the budget cannot
    pay, or one with no noise, is refused. A node with a budget sends no
    value of any dtype (floats, counts, histograms, bools) that is not such a
    release, computed only from rows it privatised with one, or declared
    data-independent by its step (keys, nonces, commitments, mask shares;
    rule ``dp-only``): exact statistics, in the clear or inside a secure sum,
    would bypass the budget. It answers no bound agreement (rule
    ``dp-bounds``): its bounds are the public box.
``dp-trusted-shares``
    How many clients' shares of a noisy sum's noise the node counts on
    (default 1). The coordinator announces ``t`` shares; the node adds
    ``sigma / sqrt(min(t, dp-trusted-shares))`` inside a secure sum (the
    whole ``sigma`` outside one) and unmasks no sum announced with fewer
    survivors than that (rule ``noise-share``): two participants colluding
    with the coordinator cannot cut its noise by announcing a larger ``t``.
    Set it to ``k`` where fewer than ``k`` of the other participants are
    trusted not to collude with the coordinator.
``dp-neighbouring``
    The neighbouring relation of that budget: ``replace-one`` (the default
    and the only one a node can hold). Every message a node sends is
    calibrated for it, and its row count is public (its handshake says it):
    under ``add-remove`` a count would be a release no noise covers, so a
    node config asking for it is refused with that reason.
``dp-trusted-shares``
    How many clients' shares of a release's noise the node counts on (default
    1, an integer >= 1): it adds ``sigma / sqrt(dp-trusted-shares)`` of the
    noise whatever the coordinator announces, so that a release keeps its
    noise with no fewer honest clients than its operator trusts.
``allow-clear-sums``
    ``false`` (the default): the node refuses to run on its own a step whose
    message is one client's statistic made to be added
    (``summand``: per-cluster sums, moments,
    inertias): it sends such a statistic only inside a secure sum, where the
    server learns the total. ``true`` lets the coordinator ask for it in the
    clear (the estimators' ``secure_aggregation=False``).
``min-sum-participants``
    The fewest clients a secure sum may add up (default 3). A sum of two
    tells each of them the other's vector, and a sum of one is the vector:
    the node refuses to upload to a smaller sum, whatever the server asks.
``max-bound-queries``
    The most bound agreements a node answers per fit for one step with
    different inputs (default 8): a bound agreement tells the binary order of
    the largest value a step computes, and asked a few hundred times for
    distances to centers the server moves along a line it locates the
    farthest row. A repeat with the same inputs is not counted. ``0`` turns
    the limit off.
``privacy-ledger``
    A directory where the node keeps, in one ledger per node (keyed by its
    identity key, else its name; never by its rows), every differentially
    private release it charged, every fit it took part in and the record of
    its secure sums (:mod:`skfedclust.node._ledger`): ``dp-epsilon`` and
    ``dp-delta`` then bound all the node's fits together, whatever data set
    or version of it each ran on, and a sum repeated by a later fit over
    other clients is refused (rule ``one-sum-per-input``). A ledger written
    once and then missing or damaged is refused (rule ``ledger-damaged``);
    only its operator resets it (``python -m skfedclust.flower ledger
    reset``, or deleting the directory). By default the per-user
    state directory (``default_ledger_directory``:
    ``$SKFEDCLUST_STATE_DIR/ledger``, else
    ``$XDG_STATE_HOME/skfedclust/ledger``, else
    ``~/.local/state/skfedclust/ledger``). ``none`` keeps no ledger, which
    weakens the node: its budget is then per fit, and a coordinator that
    starts fit after fit can take the difference of two sums of them.
``max-fits``
    With a ledger: the most fits the node takes part in, all its data sets
    together (``DEFAULT_MAX_FITS``, 100, by default; set it higher to
    allow more); a fit beyond it is refused at the handshake (rule
    ``max-fits``).
``allow-row-release``
    Comma-separated estimator class names, checked as ``allowed-methods``'
    (none by default): the methods whose steps that release rows by design
    (the method's paper releases them, listed on the Security page) this
    node runs; a node refuses such a step of any other method (rule
    ``row-release``).
``allow-coordinator-centers``
    Comma-separated estimator class names (none by default; ``*`` for
    every method): the methods for which this node sends exact statistics
    for centers the coordinator chose (steps marked
    :func:`~skfedclust.node._declarations.coordinator_centers`: the Lloyd
    steps of ``FederatedKMeans(coordinator="sees-totals")`` and of
    ``FederatedFuzzyCMeans(coordinator="sees-totals")``, and an array start
    of a coordinator-blind fit); a node refuses them for any other method
    (rule ``coordinator-centers``). Exact totals for centers a coordinator
    moves adaptively give rows away; a default node runs
    :class:`~skfedclust.FederatedKMeans` and
    :class:`~skfedclust.FederatedFuzzyCMeans` only with the nodes choosing
    the centers (``coordinator="blind"`` or ``"verified"``, their defaults;
    k-means also under its DP budget).

Each field is checked when the policy is read (at a Flower node's first
message), with the node's other node-config fields
(:data:`~skfedclust.node._node_config.NODE_CONFIG_FIELDS`, the Flower guide's
node-config reference): a field no node reads (a misspelt one) is refused
with the closest known field, and so is a value its field cannot take
(empty, ``'abc'``, ``'nan'``, fractional for an integer, out of range, a flag
that is not true or false), naming the field and what it accepts. An empty
value never turns a rule off: ``0`` does for ``min-rows-per-vector`` and
``max-bound-queries``, ``false`` for ``refuse-raw-rows``, ``none`` for
``privacy-ledger``. ``NodePolicy(...)`` checks its arguments the same way.

Every party has a policy: a Flower node reads it from its node config (the
defaults above when a field is absent); a simulated party gets
:meth:`NodePolicy.simulation` (the secure sum's rules, without the harvest
checks: the user of a simulation holds every row) unless the runtime is given
another (``InProcessRuntime(..., policy=NodePolicy())`` simulates deployed
nodes, with their default ledger in the per-user state directory).

A refusal is a :class:`PermissionError` with the reason; the server raises it
as a :class:`~skfedclust.flower.FlowerNodeError` naming the node.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import os
import weakref
from pathlib import Path

import numpy as np

from ._declarations import declared_releases, on_private_rows, takes_coordinator_centers
from ._methods import package_method, package_method_names
from ._node_config import NODE_CONFIG_FIELDS, POLICY_FIELDS, check_node_config
from ._refusal import NodeRefusal

__all__ = [
    "DEFAULT_MAX_FITS",
    "DEFAULT_MIN_SUM_PARTICIPANTS",
    "NODE_ACCOUNTANT",
    "PAID_SUMMAND",
    "PRIVATE_ROWS",
    "NodePolicy",
    "agreed_method",
    "charged_to_node",
    "on_private_rows",
    "default_ledger_directory",
    "method_step_modules",
]

#: A secure sum of two clients tells each the other's vector.
DEFAULT_MIN_SUM_PARTICIPANTS = 3
#: Each vector a node sends summarises at least two of its rows on average.
DEFAULT_MIN_ROWS_PER_VECTOR = 2
#: A vector this close to a row (relative to each feature's spread) is the row.
DEFAULT_RAW_ROW_TOLERANCE = 1e-4
#: Bound agreements a node answers per fit for one step with different inputs.
DEFAULT_MAX_BOUND_QUERIES = 8
#: Fits a node with a ledger takes part in unless its operator sets ``max-fits``:
#: a few fits a day for a month of honest use (model selection runs one fit per
#: candidate), while a coordinator that restarts fit after fit to average out
#: what is not noise meets a wall it cannot pass by changing a row.
DEFAULT_MAX_FITS = 100

#: A simulated party's ``dp_trusted_shares``: every share the estimator announces.
SIMULATION_TRUSTED_SHARES = 2**31 - 1

#: In ``allow_row_release``: every method (a simulated party's, whose user holds every row).
ROW_RELEASE_WILDCARD = "*"

#: Where a node keeps its own DP accountant in its private state; a step that
#: charged a release keeps it there.
NODE_ACCOUNTANT = "dp: this node's accountant"


#: Kept by a step that replaced the node's rows by a noisy copy it charged to
#: the node's own accountant: what is computed from that copy alone is
#: post-processing of a release already paid for.
PRIVATE_ROWS = "dp: the rows are the privatised copy"


#: Kept by the secure sum's upload when the summand it masked passed the
#: node's ``dp-only`` check (charged, or post-processing of privatised rows):
#: the masked vector is that summand's.
PAID_SUMMAND = "dp: the masked summand is paid for"


def charged_to_node(reply, step=None, state=None):
    """Whether what a step sends is paid for by the node's own DP accountant.

    Either the step charged a noisy release (it keeps the node's accountant),
    or it is declared to compute on the privatised rows alone
    (:func:`on_private_rows`, in the node's own
    code) and the node holds such rows, charged earlier in the fit, or it is
    the masked upload of such a summand (:data:`PAID_SUMMAND`).
    """
    keep = reply.keep or {}
    if NODE_ACCOUNTANT in keep or keep.get(PAID_SUMMAND) is True:
        return True
    declared = getattr(step, "__skfedclust_on_private_rows__", False)
    return bool(declared) and state is not None and state.get(PRIVATE_ROWS) is True


#: Modules whose client steps serve several methods (labelling by nearest
#: center, federated scalers, the secure sum and its bounds, moments and
#: sampling): allowed whatever the method. The secure steps of one method
#: (OmniFC's offset, coded shares and evaluations, in ``secure._lcc*``) are
#: not listed: they belong to that method (its ``_client_step_modules``) and
#: run only in its fits. A new module of :mod:`skfedclust.secure` is
#: therefore no method's until it is listed here or claimed by a method.
SHARED_STEP_MODULES = (
    "skfedclust.methods._centroid_steps",
    "skfedclust.preprocessing",
    "skfedclust.metrics",
    "skfedclust.secure._secure_sum",
    "skfedclust.secure._sum_bounds",
    "skfedclust.secure._moments",
    "skfedclust.secure._sampling",
    "skfedclust.federation",
)

#: The method this node agreed to at the fit's handshake, while it runs a step
#: (``None``: none announced, as in a simulation).
_AGREED_METHOD = contextvars.ContextVar("skfedclust_agreed_method", default=None)


@contextlib.contextmanager
def agreed_method(method):
    """Run a node's step under the method it agreed to at the handshake.

    A step that runs another step by name (a secure sum, the summand whose
    vector it adds) has the node check that one too
    (:meth:`NodePolicy.check_step` without ``method`` reads it from here):
    a coordinator that announced a k-FED fit cannot reach OmniFC's offset
    step by wrapping it in a secure sum.
    """
    token = _AGREED_METHOD.set(method or None)
    try:
        yield
    finally:
        _AGREED_METHOD.reset(token)


def _within(module, modules):
    return any(module == m or module.startswith(m + ".") for m in modules)


# Cached: a function of the name and of the installed code alone, asked at every
# step a node serves (importing and walking the module costs more than the check).
@functools.lru_cache(maxsize=1024)
def _defining_module(step_name):
    """The module a step named ``module:qualname`` is defined in (the name's, if not found).

    A coordinator may name a step through a package that re-exports it
    (``skfedclust.secure:offset_sum_step``); the step belongs to the module
    that defines it. Only the package's own modules are imported to find it:
    a module outside the package is imported, if at all, by the runtime
    after its allow-list check, never by a name the coordinator sent.
    """
    module, _, qualname = step_name.partition(":")
    if not _within(module, ("skfedclust",)):
        return module
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError):
        return module
    return getattr(obj, "__module__", None) or module


def method_step_modules(method):
    """The package modules whose client steps a fit of ``method`` may run.

    ``method`` is the estimator class name a fit's handshake announces. For a
    method of the package: its own module, the modules it declares in its
    ``_client_step_modules`` class attribute (FederatedKMeans' k-FED start) and
    :data:`SHARED_STEP_MODULES`. For any other name (a user's own method):
    the shared modules only, so that naming an unknown method does not open
    the package's method steps to the coordinator. Returns a tuple of module
    names.
    """
    own = package_method(method) if method else None
    if own is None:
        return SHARED_STEP_MODULES
    return (*own, *SHARED_STEP_MODULES)


def default_ledger_directory():
    """The per-user directory of a node's privacy ledger (``privacy-ledger``'s default).

    ``$SKFEDCLUST_STATE_DIR/ledger`` if set, else
    ``$XDG_STATE_HOME/skfedclust/ledger``, else
    ``~/.local/state/skfedclust/ledger``.
    """
    state = os.environ.get("SKFEDCLUST_STATE_DIR")
    if state:
        return Path(state) / "ledger"
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "skfedclust" / "ledger"


def _setting(name, value):
    """``value`` of the policy field ``name``, parsed and checked as in a node config."""
    return NODE_CONFIG_FIELDS[name].parse(value, name)


def _method_modules(name):
    """The modules of the client steps of the package's method ``name``: its own module and
    those its class declares (``_client_step_modules``)."""
    modules = package_method(name)
    if modules is None:
        known = ", ".join(package_method_names())
        raise ValueError(f"node config allowed-methods names {name!r}; known: {known}")
    return modules


def _arrays(payload):
    if isinstance(payload, np.ndarray):
        yield payload
    elif isinstance(payload, dict):
        for value in payload.values():
            yield from _arrays(value)
    elif isinstance(payload, (list, tuple)):
        for value in payload:
            yield from _arrays(value)


class NodePolicy:
    """A node's policy (see the module docstring), read from its node config.

    Parameters
    ----------
    allowed_methods : list of str or None, default=None
        Estimator class names; ``None`` allows every method.
    min_rows_per_vector : int or None, default=2
        Smallest average number of the node's rows behind each vector it sends
        (``None`` or 0: no minimum).
    refuse_raw_rows : bool or "strict", default=True
        Refuse to send any of the node's rows (within ``raw_row_tolerance``);
        ``"strict"`` also in steps that release rows by design.
    min_sum_participants : int, default=3
        Fewest clients of a secure sum this node uploads to (at least 2).
    raw_row_tolerance : float, default=1e-4
        How close to a row (in units of each feature's spread on the node) a
        sent vector counts as that row.
    dc_full_rank_maps : bool, default=False
        Let DC-Clustering map the node's rows to as many dimensions as it has
        features (invertible by the server colluding with one party).
    dp_epsilon : float or None, default=None
        The node's own budget for the noisy releases of a fit (``None``: no
        budget; releases are still checked to carry noise).
    dp_delta : float, default=1e-5
        The delta of that budget.
    dp_neighbouring : {"replace-one"}, default="replace-one"
        The neighbouring relation of that budget (``"add-remove"`` is refused:
        the node's row count is public).
    allow_clear_sums : bool, default=False
        Run summands (``summand``) on their own,
        sending one client's statistic in the clear.
    max_bound_queries : int or None, default=8
        Bound agreements per fit and step with different inputs (``None`` or
        0: no limit).
    privacy_ledger : str, path-like, None or False, default=None
        The node's ledger directory: its budget, its count of fits and its
        secure sums' record hold across all the node's fits. ``None``: the
        per-user state directory (``default_ledger_directory``, read
        when the ledger is used); ``False`` or ``"none"``: no ledger (the
        budget and the sums' rules are per fit, a weaker node).
    max_fits : int or None, default=None
        With ``privacy_ledger``: the most fits of the node (``None``:
        ``DEFAULT_MAX_FITS``).
    dp_trusted_shares : int, default=1
        How many clients' shares of a release's noise the node counts on: it
        adds ``sigma / sqrt(dp_trusted_shares)`` whatever the coordinator
        announces (1: every node adds the full ``sigma``).
    allow_row_release : tuple of str, default=()
        Estimator class names whose steps that release rows by design (the
        paper's own release) this node runs.
    allow_coordinator_centers : tuple of str, default=()
        Estimator class names for which this node sends exact statistics for
        centers the coordinator chose (``"*"``: every method).
    """

    def __init__(
        self,
        allowed_methods=None,
        min_rows_per_vector=DEFAULT_MIN_ROWS_PER_VECTOR,
        refuse_raw_rows=True,
        min_sum_participants=DEFAULT_MIN_SUM_PARTICIPANTS,
        raw_row_tolerance=DEFAULT_RAW_ROW_TOLERANCE,
        dc_full_rank_maps=False,
        dp_epsilon=None,
        dp_delta=1e-5,
        allow_clear_sums=False,
        dp_neighbouring="replace-one",
        privacy_ledger=None,
        max_fits=None,
        max_bound_queries=DEFAULT_MAX_BOUND_QUERIES,
        dp_trusted_shares=1,
        allow_row_release=(),
        allow_coordinator_centers=(),
    ):
        # Every value goes through its node-config field's parser (the same as a
        # node config's): a policy built in Python is checked as one read from text.
        # ``None`` keeps its meaning per field (every method, no minimum, no budget,
        # the default ledger directory, no limit).
        if allowed_methods is not None:
            allowed_methods = _setting("allowed-methods", allowed_methods)
        if min_rows_per_vector is not None:
            min_rows_per_vector = _setting("min-rows-per-vector", min_rows_per_vector)
        if max_bound_queries is not None:
            max_bound_queries = _setting("max-bound-queries", max_bound_queries)
        if max_fits is not None:
            max_fits = _setting("max-fits", max_fits)
        self.dp_neighbouring = _setting("dp-neighbouring", dp_neighbouring)
        #: How many clients' noise shares the node counts on for one release:
        #: it adds sigma / sqrt(dp_trusted_shares), never fewer than its operator set.
        self.dp_trusted_shares = _setting("dp-trusted-shares", dp_trusted_shares)
        #: Methods whose by-design row releases this node's operator allows.
        self.allow_row_release = _setting("allow-row-release", allow_row_release)
        #: Methods whose exact statistics for coordinator-chosen centers this node sends.
        self.allow_coordinator_centers = _setting(
            "allow-coordinator-centers", allow_coordinator_centers
        )
        self.allow_clear_sums = _setting("allow-clear-sums", allow_clear_sums)
        if privacy_ledger is True:
            privacy_ledger = None
        self._privacy_ledger = (
            None if privacy_ledger is None else _setting("privacy-ledger", privacy_ledger)
        )
        if max_fits is not None and self._privacy_ledger is False:
            raise ValueError(
                "max-fits needs a privacy-ledger: the node counts its fits there, across fits"
            )
        self.max_bound_queries = None if max_bound_queries in (None, 0) else max_bound_queries
        self.max_fits = max_fits
        self.allowed_methods = None if allowed_methods is None else list(allowed_methods)
        self._modules = (
            None
            if allowed_methods is None
            else {module: name for name in self.allowed_methods for module in _method_modules(name)}
        )
        self.min_rows_per_vector = None if min_rows_per_vector in (None, 0) else min_rows_per_vector
        refuse_raw_rows = _setting("refuse-raw-rows", refuse_raw_rows)
        self.refuse_raw_rows = bool(refuse_raw_rows)
        #: Refuse rows and row-level counts in steps that release rows by design too.
        self.strict_rows = refuse_raw_rows == "strict"
        self.raw_row_tolerance = _setting("raw-row-tolerance", raw_row_tolerance)
        self.dc_full_rank_maps = _setting("dc-full-rank-maps", dc_full_rank_maps)
        self.dp_epsilon = None if dp_epsilon is None else _setting("dp-epsilon", dp_epsilon)
        self.dp_delta = _setting("dp-delta", dp_delta)
        self.min_sum_participants = _setting("min-sum-participants", min_sum_participants)

    @classmethod
    def simulation(cls):
        """The policy of a simulated party: the secure sum's rules, no harvest checks.

        In a simulation the user holds every party's rows and plays the
        coordinator too; the checks against row-level harvests
        (``min-rows-per-vector``, ``refuse-raw-rows``), which guard a node
        against a coordinator it does not control, are off, so that small
        test data and scikit-learn's estimator checks run as they would
        centrally; every method's release of rows by design is allowed
        (``allow_row_release=("*",)``). A test that simulates deployed nodes
        passes ``NodePolicy()`` (a node's defaults) to the runtime.

        A simulated party counts on every noise share the estimator announces
        (``dp_trusted_shares`` = ``SIMULATION_TRUSTED_SHARES``): the
        collusion a node's ``dp-trusted-shares`` guards against is of other
        participants with the coordinator, all of them the user here. So a
        simulated ``privacy="dp"`` fit shares the noise among the clients of
        each secure sum, as the estimators' documentation describes; a
        deployed node's default adds the whole noise.
        """
        return cls(
            min_rows_per_vector=None,
            refuse_raw_rows=False,
            dc_full_rank_maps=True,
            allow_clear_sums=True,
            # The user's own data, fitted as often as the user likes.
            privacy_ledger=False,
            # The user plays every party and the coordinator: no participant
            # colludes against the others, so each counts on the noise shares
            # the estimator announces (a node counts on its dp-trusted-shares).
            dp_trusted_shares=SIMULATION_TRUSTED_SHARES,
            # Every method's own release of rows: they are the user's rows.
            allow_row_release=(ROW_RELEASE_WILDCARD,),
            # The user is the coordinator: the centers are the user's choice.
            allow_coordinator_centers=(ROW_RELEASE_WILDCARD,),
        )

    @classmethod
    def from_node_config(cls, node_config, extra=()):
        """The policy set by a node config (the fields of the module docstring).

        Every field of ``node_config`` is checked, the Flower node's own
        (``data-path``, ``identity-key``, ...) too: a field no node reads (a
        misspelt one) or a value its field cannot take (empty, ``'abc'``,
        ``'nan'``, fractional for a count, out of range, a flag that is not
        true or false) is refused, naming the field
        (``check_node_config``).

        Parameters
        ----------
        node_config : mapping
            The node config; a policy field it lacks takes its default.
        extra : iterable of str, default=()
            Fields the node's own functions read (its app's loader), accepted
            as they are.

        Raises
        ------
        ValueError
            Naming each unknown field (with the closest known one) and each
            refused value (with what its field accepts).
        """
        values = check_node_config(node_config, extra)
        return cls(
            **{
                field.attribute: values[field.name]
                for field in POLICY_FIELDS
                if field.name in values
            }
        )

    @property
    def privacy_ledger(self):
        """The ledger directory (str), or ``None`` for a node without a ledger."""
        if self._privacy_ledger is False:
            return None
        if self._privacy_ledger is None:
            # Read at use, not at construction: the state directory is the
            # environment's of the process the node runs in.
            return str(default_ledger_directory())
        return self._privacy_ledger

    def ledger(self, data, fit, *, node=None, source=None, written=False, adopt=None):
        """The node's ledger for the fit ``fit`` (``None`` without one, or without data).

        Parameters
        ----------
        data : ndarray or None
            The rows the fit runs on: their fingerprint is noted with the
            fit, as information; the ledger is the node's, not the rows'.
        fit : str
            The fit's token.
        node : str
            The node's identity (its identity key's fingerprint, else its
            name): one budget and one count of fits per node.
        source : str, default=None
            The data set's name (its path), noted with the fit.
        written : bool, default=False
            The ledger was written earlier in this fit.
        adopt : {"all", "rows"} or None, default=None
            Ledgers of versions 1 and 2 (keyed by rows) this node takes over
            when its ledger is new: every one of the directory (a deployed
            node's own directory), or the one of ``data``'s rows.

        Returns
        -------
        ledger : NodeLedger or None
            With ``max-fits`` if set, else ``DEFAULT_MAX_FITS``.
        """
        directory = self.privacy_ledger
        if directory is None or data is None:
            return None
        if node is None:
            raise ValueError("a node's ledger is keyed by the node: pass its identity or name")
        from ._ledger import NodeLedger, data_fingerprint, legacy_ledgers

        fingerprint = data_fingerprint(data)
        data_set = {"source": source, "rows": fingerprint, "n_rows": int(np.shape(data)[0])}
        if adopt is None or written:
            adopt = ()
        else:
            adopt = legacy_ledgers(directory, None if adopt == "all" else fingerprint)
        return NodeLedger(
            directory,
            node,
            fit,
            max_fits=DEFAULT_MAX_FITS if self.max_fits is None else self.max_fits,
            data_set=data_set,
            written=written,
            adopt=adopt,
        )

    def check_method(self, method):
        """Refuse a fit of ``method`` (an estimator class name) that the policy does not allow."""
        if self.allowed_methods is not None and method not in self.allowed_methods:
            raise NodeRefusal(
                "allowed-methods",
                f"this node's policy allows the methods {', '.join(self.allowed_methods)}; "
                f"it does not take part in a fit of {method}",
            )

    def check_step(self, step_name, method=None):
        """Refuse a client step (``module:function``) outside the fit's method.

        Two rules: the step belongs to a method the policy allows (or to a
        shared module), and, when ``method`` (the method this node agreed to
        at the handshake; by default the one of ``agreed_method``'s
        context) is given, a step of the package belongs to that method
        (``method_step_modules``): a coordinator that announced a k-FED
        fit cannot have the node run FFCM's seeding step, which uploads rows,
        nor OmniFC's offset step, which sends exact column sums. A step
        belongs to the module that defines it, whatever module its name goes
        through. Steps of modules outside the package run only where the node's
        operator allowed their package, and are the operator's choice.
        """
        if method is None:
            method = _AGREED_METHOD.get()
        if method is None and self._modules is None:
            # No method agreed and every method allowed (a simulation): nothing to check.
            return
        named = step_name.partition(":")[0]
        modules = (named, _defining_module(step_name))
        if method is not None and any(_within(m, ("skfedclust",)) for m in modules):
            agreed = method_step_modules(method)
            if not all(_within(m, agreed) for m in modules):
                raise NodeRefusal(
                    "agreed-method",
                    f"this node agreed to a fit of {method}; step {step_name} belongs to "
                    f"another method (a fit of {method} runs steps of {', '.join(agreed)})",
                )
        if self._modules is None:
            return
        if all(m in self._modules or _within(m, SHARED_STEP_MODULES) for m in modules):
            return
        raise NodeRefusal(
            "allowed-methods",
            f"this node's policy allows the methods {', '.join(self.allowed_methods)}; "
            f"step {step_name} belongs to none of them",
        )

    def allows_coordinator_centers(self, method=None):
        """Whether this node sends exact statistics for coordinator-chosen centers of ``method``.

        ``method`` defaults to the one agreed at the handshake
        (``agreed_method``'s context); ``None`` (unknown) is allowed only by
        the wildcard ``"*"``.
        """
        if method is None:
            method = _AGREED_METHOD.get()
        allowed = self.allow_coordinator_centers
        return ROW_RELEASE_WILDCARD in allowed or (method is not None and method in allowed)

    def check_coordinator_centers(self, step, method=None, what=None):
        """Refuse a step marked ``coordinator_centers`` unless the operator allows its method."""
        if not takes_coordinator_centers(step) and what is None:
            return
        if self.allows_coordinator_centers(method):
            return
        method = method or _AGREED_METHOD.get()
        name = f"{getattr(step, '__module__', '?')}:{getattr(step, '__qualname__', step)}"
        listed = ",".join((*self.allow_coordinator_centers, method or "*"))
        raise NodeRefusal(
            "coordinator-centers",
            f"step {name} {what or 'sends exact statistics for centers the coordinator chose'}"
            "; exact totals for centers a coordinator moves adaptively give rows away, and "
            f"this node's operator allows that for "
            f"{', '.join(self.allow_coordinator_centers) or 'no method'} "
            f"(allow-coordinator-centers), not for "
            f"{method or 'a fit whose method no handshake named'}. Fit with the nodes choosing "
            'the centers (coordinator="blind" or "verified", the defaults of FederatedKMeans '
            "and FederatedFuzzyCMeans), or set "
            f'allow-coordinator-centers = "{listed}" in the node config',
        )

    def check_clear_sum(self, step):
        """Refuse a summand asked for as a step of its own, unless clear sums are allowed."""
        if getattr(step, "__skfedclust_summand__", False) and not self.allow_clear_sums:
            name = f"{getattr(step, '__module__', '?')}:{getattr(step, '__qualname__', step)}"
            raise NodeRefusal(
                "clear-sum",
                f"step {name} sends one client's statistic, made to be added by a secure sum; "
                "this node's policy (allow-clear-sums = false) sends it only inside one",
            )

    def check_outgoing(
        self, data, to_server, to_peers, step, *, reveals=None, charged=False, method=None
    ):
        """Refuse to send what a step sends if it breaks the policy.

        The vector count applies to what goes to the server (summaries such as
        centroids, per-cluster sums) and to the plaintext of a secure sum;
        secret shares to other parties are not summaries. Rows (within the
        raw-row tolerance) are refused on both, and among the vectors the
        server computes from what it receives (``reveals``: a cluster's mean
        from its sum of deviations from a center the server chose, so that a
        center placed to catch one row does not get that row back in the
        clear). A step declared with
        ``releases_rows`` (its method releases
        row-level values by design, as the Security page lists) runs only for
        a method the operator names in ``allow-row-release`` (rule
        ``row-release``); so allowed, it is exempt from both rules unless the
        policy is strict.

        Parameters
        ----------
        data : ndarray or None
            The node's rows.
        to_server, to_peers : object
            What the step sends (arrays, tuples, dicts of them).
        step : callable or str
            The step, or its ``module:function`` name.
        reveals : object or callable, default=None
            Vectors the server derives from ``to_server`` (searched for rows,
            not counted: they are not sent), or a function computing them.
        charged : bool, default=False
            Whether the step charged what it sends to the node's own
            accountant (a noisy release), or is post-processing of one. A node
            with a budget (``dp-epsilon``) sends no value of any dtype that is
            not, unless the step is declared data-independent (rule
            ``dp-only``).
        method : str or None, default=None
            The estimator class name of the fit this node agreed to (its
            handshake's). A step that releases rows by design runs only where
            ``allow_row_release`` names it; ``None`` (a fit of no known
            method) only where it holds the wildcard ``"*"``.
        """
        if data is None or data.ndim != 2 or data.shape[0] == 0:
            return
        if self.dp_epsilon is not None and not charged:
            self._check_only_private_values(to_server, to_peers, step)
        name, declared = _step_declaration(step)
        if declared is not None:
            # The paper's own release of rows: only for a method the operator named.
            self._check_row_release(name, declared, method)
        if self.min_rows_per_vector is None and not self.refuse_raw_rows:
            # Neither rule is on (a simulated party): nothing below can refuse.
            return
        if declared is not None and not self.strict_rows:
            return
        n_rows, width = data.shape
        if callable(reveals):
            # Computed only where they are searched.
            reveals = reveals() if self.refuse_raw_rows else None
        # The federation's result (the blind k-means' centers, computed over every
        # node) is not this node's summary: its clusters' backing is checked by the
        # step itself; it is still searched for the node's rows.
        kinds = declared_releases(_resolved(step))
        global_result = "result" in kinds
        # Integers are values too: a matrix of integer vectors of the node's width
        # is counted and searched like floats, except where the declaration says
        # they are masked words, ring elements or coded shares (a one-dimensional
        # integer array is a count or a histogram).
        masked = bool(kinds & _MASKED_KINDS)
        for payload, counted in ((to_server, True), (to_peers, False), (reveals, False)):
            for array in _arrays(payload):
                if array.size == 0 or not _rules_look_at(array, masked):
                    continue
                vectors = array.reshape(1, -1) if array.ndim == 1 else array
                if vectors.ndim != 2 or vectors.shape[1] != width:
                    continue
                if counted and array.ndim == 2 and not global_result:
                    self._check_count(vectors.shape[0], n_rows, name, declared)
                # One feature: any statistic of it is some row's value; nothing to tell.
                if self.refuse_raw_rows and width > 1:
                    self._check_raw_rows(data, vectors, name, declared)

    def allows_row_release(self, method):
        """Whether this node runs the steps that release rows by design of ``method``.

        ``method`` is the fit's estimator class name (``None``: unknown). The
        wildcard ``"*"`` in ``allow_row_release`` (a simulated party's)
        allows every method.
        """
        allowed = self.allow_row_release
        return ROW_RELEASE_WILDCARD in allowed or (method is not None and method in allowed)

    def _check_row_release(self, step_name, reason, method):
        if self.allows_row_release(method):
            return
        if method is None:
            whose = (
                "the method of this fit is unknown to the node (no handshake named it), so "
                f'only allow-row-release = "{ROW_RELEASE_WILDCARD}" would let it through'
            )
        else:
            named = ", ".join(self.allow_row_release) or "no method"
            listed = ",".join((*self.allow_row_release, method))
            whose = (
                f"this node's operator allows that for {named} (allow-row-release), not for "
                f'{method}: to allow it, set allow-row-release = "{listed}" in the node config'
            )
        raise NodeRefusal(
            "row-release",
            f"step {step_name} sends row-level values of this node by its method's design "
            f"({reason}); {whose}. Otherwise fit a variant of the method that does not "
            "release rows",
        )

    def _check_only_private_values(self, to_server, to_peers, step):
        # A budget bounds what any sequence of releases tells about a row only
        # if every value computed from the rows is a charged, noisy release:
        # otherwise a coordinator asks for the exact statistic instead (the
        # exact Lloyd totals of centers it moves adaptively give rows away).
        # Whatever the dtype: a count, a histogram of binary orders (a bound
        # agreement on server-chosen centers), a bool or a byte string is a
        # value too. Only a step the node's own code declares data-independent
        # (keys, nonces, commitments, mask shares) sends what no row moves.
        name = _step_declaration(step)[0]
        if "data-independent" in declared_releases(_resolved(step)):
            return
        for payload in (to_server, to_peers):
            if _holds_values(payload):
                raise NodeRefusal(
                    "dp-only",
                    f"step {name} would send values that are not a noisy release charged "
                    f"to this node's budget (dp-epsilon={self.dp_epsilon:g}), not declared "
                    "data-independent and not computed from rows it privatised: a node "
                    "with a budget sends only differentially private values, whatever "
                    "their dtype (rule 'dp-only')",
                )

    def _check_count(self, n_vectors, n_rows, step_name, declared=None):
        minimum = self.min_rows_per_vector
        if minimum is not None and n_vectors * minimum > n_rows:
            raise NodeRefusal(
                "min-rows-per-vector",
                f"step {step_name} would send {n_vectors} vectors summarising this node's "
                f"{n_rows} rows (fewer than {minimum} rows each, its policy's "
                "min-rows-per-vector)" + _strict_note(declared),
            )

    def _check_raw_rows(self, data, vectors, step_name, declared=None):
        hit = raw_row_matches(data, vectors, self.raw_row_tolerance)
        if hit is not None:
            raise NodeRefusal(
                "raw-row",
                f"step {step_name} would send a vector within {self.raw_row_tolerance:g} of "
                f"this node's row {hit} (relative to each feature's spread), which its policy "
                "(refuse-raw-rows) forbids" + _strict_note(declared),
            )

    def __repr__(self):
        return (
            f"NodePolicy(allowed_methods={self.allowed_methods!r}, "
            f"min_rows_per_vector={self.min_rows_per_vector!r}, "
            f"refuse_raw_rows={'strict' if self.strict_rows else self.refuse_raw_rows!r}, "
            f"min_sum_participants={self.min_sum_participants!r}, "
            f"raw_row_tolerance={self.raw_row_tolerance!r}, "
            f"dc_full_rank_maps={self.dc_full_rank_maps!r}, "
            f"dp_epsilon={self.dp_epsilon!r}, dp_delta={self.dp_delta!r}, "
            f"dp_trusted_shares={self.dp_trusted_shares!r}, "
            f"allow_clear_sums={self.allow_clear_sums!r}, "
            f"privacy_ledger={self.privacy_ledger!r}, max_fits={self.max_fits!r}, "
            f"max_bound_queries={self.max_bound_queries!r}, "
            f"allow_row_release={self.allow_row_release!r}, "
            f"allow_coordinator_centers={self.allow_coordinator_centers!r})"
        )


def _holds_values(payload):
    """Whether ``payload`` carries any value (of any dtype) beyond empty containers."""
    if payload is None:
        return False
    if isinstance(payload, np.ndarray):
        return payload.size > 0
    if isinstance(payload, dict):
        return any(_holds_values(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return any(_holds_values(v) for v in payload)
    # Numbers, bools, strings, bytes, numpy scalars, anything else.
    return True


#: Kinds whose integers are masked words, ring elements or coded shares, not values.
_MASKED_KINDS = frozenset({"masked-sum", "peer-masked", "coded-shares", "data-independent"})


def _rules_look_at(array, masked):
    """Whether the rules on vectors look at ``array``: floats, or a matrix of integers."""
    if array.dtype.kind == "f":
        return True
    return array.dtype.kind in "iu" and array.ndim == 2 and not masked


def _resolved(step):
    """The step function of ``step`` (a callable, or its ``module:function`` name)."""
    if not isinstance(step, str):
        return step
    try:
        from ._contract import resolve_client_step

        return resolve_client_step(step, role="bound")
    except PermissionError:
        return None


def _step_declaration(step):
    """A step's name and, if its method releases rows by design, the reason (else None)."""
    if isinstance(step, str):
        name = step
        try:
            from ._contract import resolve_client_step

            step = resolve_client_step(step, role="bound")
        except PermissionError:
            return name, None
    else:
        name = f"{getattr(step, '__module__', '?')}:{getattr(step, '__qualname__', step)}"
    return name, getattr(step, "__skfedclust_releases_rows__", None)


def _strict_note(declared):
    if declared is None:
        return ""
    return f" (the step releases rows by design: {declared}; the policy is strict)"


#: Projections of a node's rows, by the id of the array, kept while the array lives
#: (an ndarray is not hashable, so it cannot key a WeakKeyDictionary itself).
_PROJECTIONS = {}


def _forget_projection(key):
    _PROJECTIONS.pop(key, None)


def _projection(data):
    key = id(data)
    cached = _PROJECTIONS.get(key)
    # The same live array, unchanged: read-only (the runtimes' rows are), same shape.
    if (
        cached is not None
        and cached[0]() is data
        and cached[1] == data.shape
        and not data.flags.writeable
    ):
        return cached[2:]
    rows = np.asarray(data, dtype=np.float64)
    spread = rows.max(axis=0) - rows.min(axis=0)
    scale = np.where(spread > 0, spread, np.maximum(np.abs(rows).max(axis=0), 1.0))
    direction = np.random.default_rng(0).standard_normal(rows.shape[1])
    direction /= np.linalg.norm(direction)
    # Projected in units of each feature's scale, so one tolerance fits every feature.
    projected = (rows / scale) @ direction
    order = np.argsort(projected, kind="stable")
    result = (scale, direction, projected[order], order)
    if not data.flags.writeable:
        try:
            reference = weakref.ref(data, lambda _, key=key: _forget_projection(key))
        except TypeError:
            return result
        _PROJECTIONS[key] = (reference, data.shape, *result)
    return result


def raw_row_matches(data, vectors, tolerance):
    """The index of a row of ``data`` within ``tolerance`` of one of ``vectors``, or None.

    Within ``tolerance`` means every feature differs by at most ``tolerance``
    times that feature's spread over ``data``. The rows are projected once on
    a fixed direction and sorted; a vector is compared only with the rows
    whose projection is within reach (O(log n) per vector, plus candidates).
    """
    rows = np.asarray(data, dtype=np.float64)
    scale, direction, sorted_projection, order = _projection(data)
    sent = np.asarray(vectors, dtype=np.float64) / scale
    if not np.all(np.isfinite(sent)):
        sent = np.where(np.isfinite(sent), sent, np.inf)
    reach = tolerance * np.abs(direction).sum()
    centers = sent @ direction
    low = np.searchsorted(sorted_projection, centers - reach, side="left")
    high = np.searchsorted(sorted_projection, centers + reach, side="right")
    for i in np.flatnonzero(high > low):
        candidates = order[low[i] : high[i]]
        close = np.all(np.abs(rows[candidates] / scale - sent[i]) <= tolerance, axis=1)
        if close.any():
            return int(candidates[np.argmax(close)])
    return None
