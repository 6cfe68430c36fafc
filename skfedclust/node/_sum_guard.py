"""What a node checks before it takes part in a secure sum, and what it remembers of it.

The coordinator of a secure sum may be malicious (Bonawitz et al., CCS 2017,
active model): it chooses who takes part, the communication graph, the
threshold, the public inputs of the summed step, and it announces who
uploaded. None of these is taken on trust. Each node derives its neighbours
and the threshold floor from the sum's public parameters itself, refuses a
sum that breaks one of its rules, and keeps, for the whole fit, a typed
record of the sums it took part in: which sum is open, at which stage, which
announcement it attested, and the inputs of every sum it joined. A refusal is
a ``SumRefusal`` (a :class:`PermissionError`) naming its rule.

The rules (each has a test in ``tests/test_secure_sum_attacks.py``):

``min-sum-participants``
    A sum adds at least the node policy's minimum of clients (3 by default).
``threshold-floor``
    The self-mask threshold ``t`` is at least ``min-sum-participants - 1`` and
    a strict majority of the node's participating neighbours, and the node has
    at least ``t`` participating neighbours (it never shares its self mask
    with a lower threshold than asked).
``fresh-sum``
    Sum ids strictly increase over the fit: a mask key is never used twice.
``one-sum-per-input``
    A node adds one statistic over sets of clients from which the server
    cannot isolate fewer than ``min-sum-participants`` clients. The statistic
    is keyed twice: by what the step computes from (its name, its constants
    but a fixed-point shift it declares, :func:`fixed_point`, and the
    messages it reads), and by what it reveals, the decoded real values of
    every array of real values the node adds (:func:`value_keys`: integer
    fixed point decoded at its declared shift, floats of any width as they
    are, rounded to a canonical precision), so that the same values asked at
    another shift, scale, dtype or under another step are the same statistic.
    Counts (integers not declared fixed point) are keyed by their step and
    inputs only. Two sums of one statistic over ``S`` and ``S'`` give the
    server the sum over ``S - S'`` minus the one over ``S' - S``; with more
    sums, a sum over any group of clients that are in exactly the same sums.
    The node refuses a sum with which such a group holds between 1 and
    ``min-sum-participants - 1`` clients (:func:`isolated_clients`): one new
    member alone, or everyone but one, is refused; three new together are
    not, with the default minimum of 3. The participants are compared at the
    upload, the survivors at the unmasking (a repeat announced with one
    client dropped is a second sum over other clients). With a privacy ledger
    (a deployed node's default) the rule holds across fits too: the ledger
    keeps the keys, participants (by identity) and survivors of every sum the
    node joined (:mod:`skfedclust.node._ledger`).
``stage``
    Unmasking follows the node's own upload of that sum, once; announcing
    dropouts needs the attestation round first, and the announcement unmasked
    is the one attested.
``noise-share``
    A node that added ``1 / t`` of a release's noise unmasks no sum announced
    with fewer than ``t`` survivors (:mod:`skfedclust.secure._node_dp`).
``consistent-view``
    Pair keys (for clients announced as dropped) are revealed only when at
    least ``t`` surviving neighbours attested the same announcement through
    sealed peer messages, which the server cannot forge.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import numbers

import numpy as np

from ._refusal import NodeRefusal

__all__ = [
    "CANONICAL_BITS",
    "OpenSum",
    "SumRecord",
    "SumRefusal",
    "fixed_point",
    "harary_neighbours_of",
    "isolated_clients",
    "keyed_by_inputs",
    "public_digest",
    "value_keys",
]

#: Where a node keeps its record in its private state.
RECORD = "secure sum: record"


class SumRefusal(NodeRefusal):
    """A node refuses a secure-sum request that breaks one of its rules.

    Attributes
    ----------
    rule : str
        The name of the rule (see the module docstring).
    """


@dataclasses.dataclass(frozen=True)
class OpenSum:
    """The sum a node has uploaded to and not yet unmasked."""

    sum_id: int
    key_digest: bytes
    participants: tuple
    neighbours: tuple
    threshold: int
    graph_seed: int
    stage: str = "uploaded"
    shares: tuple = ()
    announcement: bytes = b""
    survivors: tuple = ()
    dropped: tuple = ()
    statistic: bytes = b""
    min_survivors: int = 0
    #: Keys of the values the node added (:func:`value_keys`; one-sum-per-input on values).
    plaintexts: tuple = ()
    #: The graph's degree and roster size, with ``graph_seed`` its public parameters:
    #: a node derives a neighbour's neighbours from them (whose pair keys it holds
    #: shares of).
    graph_degree: int = 0
    graph_size: int = 0

    def neighbours_of(self, client, active=None):
        """``client``'s neighbours among the participants, in the order of its shares.

        ``active`` is the set of the participants, for callers that ask for many
        clients' neighbours (building it is linear in the participants).
        """
        active = self.participants if active is None else active
        graph = (self.graph_size, self.graph_degree, self.graph_seed)
        return _participating_neighbours(int(client), active, graph)


@dataclasses.dataclass(frozen=True)
class SumRecord:
    """A node's record of its secure sums over one fit (kept in its private state)."""

    last_id: int = -1
    open: OpenSum | None = None
    #: {key: ((participants, survivors or None), ...)} of every sum joined: one
    #: entry per set of clients a statistic (or a value) was added over.
    statistics: dict = dataclasses.field(default_factory=dict)
    inputs: bytes = b""

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


class ClientSet:
    """The clients of a sum: a roster ``0 .. size - 1`` less those ``absent``.

    What a node needs of a sum's participants (or survivors) is who is in it,
    to find its participating neighbours and to compare the sum with earlier
    ones (rule ``one-sum-per-input``); a list of everyone costs every node
    ``O(n)`` bytes and work at every sum. The usual sum leaves out no client
    or a few (those who dropped), so it is kept, sent and digested as the
    roster's size and the clients left out: ``O(1 + absent)``. Immutable and
    hashable; equal client sets are equal objects whatever list they came from.
    """

    __slots__ = ("size", "absent", "_absent_set", "_hash")

    def __init__(self, size, absent=()):
        self.size = int(size)
        self.absent = tuple(sorted({int(c) for c in absent}))
        if self.absent and (self.absent[0] < 0 or self.absent[-1] >= self.size):
            raise SumRefusal("well-formed", f"clients outside the roster of {self.size}")
        self._absent_set = frozenset(self.absent)
        self._hash = hash((self.size, self.absent))

    @classmethod
    def of(cls, clients, size):
        """The set of the distinct clients ``clients`` of a roster of ``size``."""
        if isinstance(clients, ClientSet):
            return clients
        present = np.zeros(int(size), dtype=bool)
        clients = np.asarray(list(clients), dtype=np.int64)
        present[clients] = True
        return cls(size, np.flatnonzero(~present).tolist())

    def __contains__(self, client):
        return 0 <= client < self.size and client not in self._absent_set

    def __len__(self):
        return self.size - len(self.absent)

    def __iter__(self):
        absent = self._absent_set
        return (c for c in range(self.size) if c not in absent)

    def __eq__(self, other):
        if isinstance(other, ClientSet):
            return self.size == other.size and self.absent == other.absent
        return NotImplemented

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"ClientSet(size={self.size}, absent={list(self.absent)})"

    def without(self, clients):
        """This set less ``clients``."""
        return ClientSet(self.size, (*self.absent, *(int(c) for c in clients)))

    def wire(self):
        """The set as a message: the roster's size and who is left out."""
        return {"roster": self.size, "absent": np.array(self.absent, dtype=np.int64)}


def client_set(clients, size, what="the participants"):
    """A :class:`ClientSet` from a message: ``{"roster", "absent"}`` or a sorted list."""
    if isinstance(clients, ClientSet):
        return clients
    if isinstance(clients, dict):
        if set(clients) != {"roster", "absent"} or int(clients["roster"]) != int(size):
            raise SumRefusal("well-formed", f"{what} are not a set of the roster of {size}")
        absent = _int_list(clients["absent"], what)
        if sorted(set(absent)) != absent:
            raise SumRefusal(
                "well-formed", f"{what}: the clients left out are not distinct and sorted"
            )
        return ClientSet(size, absent)
    members = _int_list(clients, what)
    if sorted(set(members)) != members:
        raise SumRefusal("well-formed", f"{what} are not distinct and sorted")
    if members and (members[0] < 0 or members[-1] >= int(size)):
        raise SumRefusal("well-formed", f"{what} outside the roster of {size} clients")
    return ClientSet.of(members, size)


def record_of(state):
    record = state.get(RECORD)
    return SumRecord() if record is None else record


# --------------------------------------------------------------------------- #
# Digests of public values
# --------------------------------------------------------------------------- #
def _feed(h, obj):
    # Exact built-in types first (participants, ids, shifts, names, digests),
    # and a list of plain ints in one update: the same bytes as the general
    # cases below, without their abstract-class checks.
    kind = type(obj)
    if kind is int:
        h.update(b"s%d" % obj)
        return
    if kind is bytes or kind is str:
        h.update(b"s" + repr(obj).encode())
        return
    if (kind is list or kind is tuple) and all([type(item) is int for item in obj]):
        h.update(b"l%d" % len(obj) + b"".join([b"s%d" % item for item in obj]))
        return
    if kind is ClientSet:
        # The roster and who is left out: O(absent), not O(roster).
        h.update(b"c%d|" % obj.size + b"l%d" % len(obj.absent))
        h.update(b"".join([b"s%d" % item for item in obj.absent]))
        return
    if kind is np.ndarray or isinstance(obj, (np.ndarray, np.generic)):
        array = np.ascontiguousarray(obj)
        if array.dtype.kind in "fc":
            array = array + 0.0  # -0.0 and 0.0 are one value: one digest
        h.update(b"a" + array.dtype.str.encode() + repr(array.shape).encode())
        h.update(array.tobytes())
    elif isinstance(obj, dict):
        h.update(b"d%d" % len(obj))
        for key in sorted(obj, key=repr):
            _feed(h, key)
            _feed(h, obj[key])
    elif isinstance(obj, (list, tuple)):
        h.update(b"l%d" % len(obj))
        for item in obj:
            _feed(h, item)
    elif isinstance(obj, float):
        h.update(b"s" + repr(obj + 0.0).encode())
    elif obj is None or isinstance(obj, (bool, numbers.Number, str, bytes)):
        h.update(b"s" + repr(obj).encode())
    else:
        raise TypeError(f"a secure sum's public input of type {type(obj).__name__} has no digest")


def public_digest(*objects):
    """SHA-256 of public values (arrays, numbers, strings, lists and dicts of them)."""
    h = hashlib.sha256(b"skfedclust secure sum")
    for obj in objects:
        _feed(h, obj)
    return h.digest()


# --------------------------------------------------------------------------- #
# What a summed value reveals
# --------------------------------------------------------------------------- #
#: Binary orders of a plaintext's canonical form below its largest entry: the
#: precision at which two encodings of one statistic are the same values.
CANONICAL_BITS = 16
#: Grids of that precision, offset from each other by a fraction of a cell.
_GRIDS = 3


def fixed_point(shift):
    """Declare a summand whose integers are real values in fixed point at a public scale.

    The step sends ``rint(x * 2**-public[shift])`` (integers, summed exactly);
    ``public[shift]`` is how finely the values are encoded, not what they are.
    The node's secure sum decodes the integers (``ldexp(v, public[shift])``)
    before it keys them (:func:`value_keys`), and leaves ``shift`` out of the
    statistic's key: the same column sums asked at another shift are the same
    statistic (rule ``one-sum-per-input``).

    Parameters
    ----------
    shift : str
        The public constant of the step that holds the binary exponent.
    """

    def mark(step):
        step.__skfedclust_fixed_point__ = str(shift)
        return step

    return mark


def keyed_by_inputs(reason):
    """Declare a summand whose values are keyed by its inputs only, not by :func:`value_keys`.

    For one-hot histograms of a binary order (a bound agreement): every
    client sends the same few one-hots for unrelated quantities, so keying
    them by value would refuse honest sums; what they reveal is counted by
    their own rule (``bound-queries``). ``reason`` says why, in the node's code.
    """

    def mark(step):
        step.__skfedclust_keyed_by_inputs__ = str(reason)
        return step

    return mark


def ldexp_exponents(shift):
    """Binary exponents for ``np.ldexp`` as C ints, clipped to ``±4096``.

    ``np.ldexp`` takes C-int exponents ten times faster than int64 ones; a
    float64 scaled by ``2**4096`` (or ``2**-4096``) is already infinite (or
    0), so the clip changes no result.
    """
    return np.clip(np.asarray(shift, dtype=np.int64), -4096, 4096).astype(np.intc)


def decoded_values(array, shift=None):
    """The real values an array a node adds stands for, as float64.

    Integers declared as fixed point (:func:`fixed_point`) are decoded at
    their shift; other integers and booleans are counts, their own values;
    floats of any width are their values.
    """
    array = np.asarray(array)
    if array.dtype.kind in "iu" and shift is not None:
        shift = ldexp_exponents(shift)
        if shift.ndim:
            shift = np.broadcast_to(shift, array.shape)
        return np.ldexp(array.astype(np.float64), shift)
    return array.astype(np.float64)


def value_keys(values):
    """The keys by which rule ``one-sum-per-input`` knows a plaintext: what it reveals.

    ``values`` are the decoded real values (:func:`decoded_values`), keyed
    whatever their shape, at a canonical precision: each entry on a grid of
    ``2**(E - CANONICAL_BITS)``, ``E`` the binary order of the largest
    ``|value|``, so that two encodings of one statistic (another fixed-point
    shift, float32 for float64, a count as a float) round to the same cells.
    Values near a cell's edge may round apart: the plaintext gets one key on
    each of :data:`_GRIDS` grids offset by a third of a cell from each other,
    and two plaintexts match when any key does. Two encodings then get no
    common key only if entries straddle an edge on every grid, each at
    another entry: with rounding errors ``r`` relative to the largest entry,
    a chance of about ``(n 2**CANONICAL_BITS r)**3`` for ``n`` entries,
    ``1e-26`` for the 52-bit fixed point of the column sums of 20 features,
    and about ``5e-4`` for their float32 copy.

    Differences below the canonical precision are the same statistic to the
    node, and larger ones another: a coordinator that asks for the values
    moved by more (column sums minus a public multiple of the row count, the
    vector inside a larger one, permuted) gets another key, and the
    statistic's key (its step and inputs) is what stands in its way.

    Returns
    -------
    keys : tuple of bytes
        ``()`` for an empty or all-zero plaintext (it tells nothing of the rows).

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.node._sum_guard import decoded_values, value_keys
    >>> sums = np.array([12.3, -3.7, 0.9])
    >>> fixed = np.rint(np.ldexp(sums, 40)).astype(np.int64)  # fixed point at 2**-40
    >>> bool(set(value_keys(sums)) & set(value_keys(decoded_values(fixed, -40))))
    True
    >>> bool(set(value_keys(sums)) & set(value_keys(sums.astype(np.float32))))
    True
    >>> bool(set(value_keys(sums)) & set(value_keys(sums + 0.01)))
    False
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    if not values.size or not np.any(values):
        return ()
    if not np.all(np.isfinite(values)):
        # The encoding refuses it; keyed as it is meanwhile.
        return (public_digest(b"plaintext", values),)
    order = math.frexp(float(np.max(np.abs(values))))[1]
    scaled = np.ldexp(values, CANONICAL_BITS - order)  # exact: a power of two
    # The cells are hashed as int64, as every earlier version of the node did:
    # a privacy ledger keeps these keys across fits, and keys hashed another
    # way would never match the ones it holds.
    return tuple(
        public_digest(b"plaintext value", order, k, np.floor(scaled + k / _GRIDS).astype(np.int64))
        for k in range(_GRIDS)
    )


def server_messages(inbox, own_tags):
    """The server's messages in ``inbox`` (not peer messages, not the sum's own)."""
    server_tags = getattr(inbox, "server_tags", None)
    if server_tags is None:
        # A plain dict: peer messages are {sender: payload} under their tag.
        server_tags = {
            tag
            for tag, value in inbox.items()
            if not (isinstance(value, dict) and value and all(isinstance(k, int) for k in value))
        }
    return {tag: inbox[tag] for tag in sorted(server_tags) if tag not in own_tags and tag in inbox}


# --------------------------------------------------------------------------- #
# The graph, from public parameters
# --------------------------------------------------------------------------- #
def harary_neighbours_of(client, n_clients, degree, seed):
    """The neighbours of one client on the graph of :func:`harary_neighbours`.

    A node computes its own neighbours from the graph's public parameters; it
    needs no list of the whole graph from the server.
    """
    return list(_neighbours_of(int(client), int(n_clients), int(degree), int(seed)))


def _participating_neighbours(client, active, graph):
    """``client``'s neighbours on the graph that are in ``active``, a set of participants.

    The participants are distinct clients of the graph (checked before the
    upload): as many of them as the graph has clients is every client.
    """
    if len(active) == graph[0]:
        return _neighbours_of(client, *graph)
    return tuple(j for j in _neighbours_of(client, *graph) if j in active)


@functools.lru_cache(maxsize=1 << 17)
def _neighbours_of(client, n_clients, degree, seed):
    # Cached: a node derives its neighbours' neighbours at every sum (whose
    # pair keys' shares it holds), and a RandomState costs tens of microseconds.
    if degree >= n_clients - 1:
        return tuple(j for j in range(n_clients) if j != client)
    order, position = _cyclic_order(n_clients, seed)
    p = position[client]
    half = degree // 2
    return tuple(sorted({order[(p + s) % n_clients] for s in range(-half, half + 1) if s}))


@functools.lru_cache(maxsize=64)
def _cyclic_order(n_clients, seed):
    order = [int(v) for v in np.random.RandomState(seed).permutation(n_clients)]
    position = {c: i for i, c in enumerate(order)}
    return order, position


def threshold_floor(n_neighbours, min_participants):
    """The smallest threshold a node accepts with ``n_neighbours`` participating neighbours."""
    return max(int(min_participants) - 1, n_neighbours // 2 + 1)


# --------------------------------------------------------------------------- #
# The node's checks
# --------------------------------------------------------------------------- #
def _int_list(values, what):
    try:
        array = np.asarray(values)
        if array.dtype.kind in "iu":
            # Python ints in one conversion (rosters of thousands of clients).
            return array.ravel().tolist()
        out = [int(v) for v in array.ravel()]
    except (TypeError, ValueError) as exc:
        raise SumRefusal("well-formed", f"{what} is not a list of client numbers") from exc
    return out


def check_upload(record, party, *, sum_id, participants, graph, threshold, n_clients):
    """The node's checks before it uploads to a sum; its participating neighbours.

    ``participants`` is a :class:`ClientSet` on the wire (``{"roster", "absent"}``)
    or a sorted list of clients.

    Returns
    -------
    participants : ClientSet
    neighbours : tuple of int
        The node's neighbours among the participants.
    """
    me = party.index
    minimum = party.policy.min_sum_participants
    n_roster = int(graph["n_clients"])
    participants = client_set(participants, n_roster)
    if not len(participants):
        raise SumRefusal("well-formed", "a sum without participants")
    if me not in participants:
        raise SumRefusal("well-formed", f"client {me} is not among the participants")
    if len(participants) < minimum:
        raise SumRefusal(
            "min-sum-participants",
            f"a sum of {len(participants)} clients; this node's policy adds at least "
            f"{minimum} (min-sum-participants): a smaller sum gives its vector away",
        )
    if int(n_clients) != len(participants):
        raise SumRefusal("well-formed", "the fixed-point encoding is not for the participants")
    if int(sum_id) <= record.last_id:
        raise SumRefusal(
            "fresh-sum",
            f"sum {sum_id} does not follow sum {record.last_id}: a mask key would be reused",
        )
    degree = int(graph["degree"])
    if not 0 < degree < n_roster:
        raise SumRefusal("well-formed", f"graph degree {degree} on {n_roster} clients")
    mine = _participating_neighbours(me, participants, (n_roster, degree, int(graph["seed"])))
    floor = threshold_floor(len(mine), minimum)
    if int(threshold) < floor:
        raise SumRefusal(
            "threshold-floor",
            f"threshold {threshold} with {len(mine)} participating neighbours; this node "
            f"shares its self mask with a threshold of at least {floor}",
        )
    if len(mine) < int(threshold):
        raise SumRefusal(
            "threshold-floor",
            f"client {me} has {len(mine)} participating neighbours, fewer than the threshold "
            f"{threshold}: its vector could not be masked as the sum requires",
        )
    return participants, mine


def _small_atoms(sets, minimum):
    """The regions of ``sets`` of between 1 and ``minimum - 1`` clients, as frozensets.

    Sets given as :class:`ClientSet` of one roster are compared through the
    clients some set leaves out or holds explicitly: every other client of the
    roster is in exactly the client sets, one region whose size is counted, not
    listed (``O(absent)`` work per sum, not ``O(roster)``).
    """
    rosters = [s for s in sets if isinstance(s, ClientSet)]
    if not rosters or len({s.size for s in rosters}) != 1:
        explicit = [s if isinstance(s, frozenset) else frozenset(s) for s in sets]
        return [a for a in _atoms(explicit) if 0 < len(a) < int(minimum)]
    size = rosters[0].size
    special = set()
    for s in sets:
        special.update(s.absent if isinstance(s, ClientSet) else s)
    regions = {}
    for client in special:
        where = tuple(k for k, s in enumerate(sets) if client in s)
        if where:
            regions.setdefault(where, []).append(client)
    # The clients no set singles out: in every client set, in no explicit set.
    common = tuple(k for k, s in enumerate(sets) if isinstance(s, ClientSet))
    n_common = size - sum(1 for c in special if isinstance(c, int) and 0 <= c < size)
    small = []
    for where, clients in regions.items():
        total = len(clients) + (n_common if where == common else 0)
        if 0 < total < int(minimum):
            if where == common:
                clients = clients + [c for c in range(size) if c not in special]
            small.append(frozenset(clients))
    if common not in regions and 0 < n_common < int(minimum):
        small.append(frozenset(c for c in range(size) if c not in special))
    return small


def _atoms(sets):
    """The clients of ``sets`` grouped by the sets they are in (the sets' Venn regions)."""
    membership = {}
    for k, clients in enumerate(sets):
        for client in clients:
            membership.setdefault(client, []).append(k)
    regions = {}
    for client, where in membership.items():
        regions.setdefault(tuple(where), []).append(client)
    return {frozenset(region) for region in regions.values()}


def isolated_clients(earlier, current, minimum):
    """The clients a new sum of a statistic would let the server isolate, if fewer than
    ``minimum``; else ``()``.

    The server holds the sums of one statistic over the client sets
    ``earlier`` and would add one over ``current``. A combination of those
    sums is a sum over the clients it weighs alike, and it weighs alike the
    clients that are in exactly the same sets (a region of the sets' Venn
    diagram): every sum the server can compute is over a union of regions.
    The node refuses the new sum when the sets, with it, have a region of
    between 1 and ``minimum - 1`` clients: the sum over everyone but one (or
    with one new member) after the sum over everyone makes a region of one;
    three new members together make a region of three, a sum of as many
    clients as the node adds in any sum. Two sums over ``S`` and ``S'`` have
    the regions ``S - S'``, ``S' - S`` and their intersection; the last is
    refused too when small, although two sums alone do not open it: a third
    over their union would (the two minus the union is the shared clients'
    sum), and refusing the second errs on the side of the rows. The same set
    again adds nothing and is accepted.

    Parameters
    ----------
    earlier : sequence of collections
        The client sets of the earlier sums of the statistic.
    current : collection
        The clients of the new sum.
    minimum : int
        The node's ``min-sum-participants``.

    Returns
    -------
    clients : tuple
        The smallest region below ``minimum`` with the new sum, sorted; ``()``
        when there is none.

    Examples
    --------
    >>> from skfedclust.node._sum_guard import isolated_clients
    >>> isolated_clients([range(5)], range(6), 3)  # one new member
    (5,)
    >>> isolated_clients([range(5)], range(8), 3)  # three new together
    ()
    >>> isolated_clients([[0, 1, 2, 3]], [3, 4, 5, 6], 3)  # 3 is in both
    (3,)
    """
    earlier = [e if isinstance(e, ClientSet) else frozenset(e) for e in earlier]
    if not isinstance(current, ClientSet):
        current = frozenset(current)
    if not earlier or current in earlier:
        return ()
    # Every region, not only those the new sum splits off: a region of one
    # that two sums left (their shared client) is opened by a third over their
    # union, which splits nothing.
    small = _small_atoms([*earlier, current], minimum)
    return tuple(sorted(min(small, key=len), key=str)) if small else ()


def _hashable(clients):
    return clients if isinstance(clients, ClientSet) else tuple(clients)


def check_statistic(record, statistic, participants, minimum):
    """Refuse a sum of a statistic the node added before over clients that differ too little."""
    earlier = {_hashable(e) for e, _ in record.statistics.get(statistic, ())}
    isolated = isolated_clients(earlier, participants, minimum)
    if isolated:
        raise SumRefusal(
            "one-sum-per-input",
            "this node already added this statistic (these inputs, or these values) in "
            f"this fit over other clients; with the earlier sums this one would give away "
            f"the vector of {len(isolated)} client(s) {list(isolated)}, fewer than its "
            f"min-sum-participants ({minimum})",
        )


def joined(record, statistic, participants, plaintexts=()):
    """The record's statistics with one more sum joined (survivors known at unmasking)."""
    statistics = dict(record.statistics)
    participants = _hashable(participants)
    for key in (statistic, *plaintexts):
        entries = statistics.get(key, ())
        if (participants, None) not in entries:
            statistics[key] = (*entries, (participants, None))
    return statistics


def check_repeat_survivors(record, current, survivors, minimum):
    """A sum's survivors against every earlier sum of its statistic; the updated record.

    The survivors are the clients whose vectors the sum reveals: they are
    compared with the survivors of each earlier sum of the same statistic
    (or value) by :func:`isolated_clients`. The entry this sum opened at its
    upload (its participants, survivors unknown) takes the survivors.
    """
    statistics = dict(record.statistics)
    survivors = _hashable(survivors)
    pending = (_hashable(current.participants), None)
    for key in (current.statistic, *current.plaintexts):
        entries = list(statistics.get(key, ()))
        ended = {_hashable(e) for _, e in entries if e is not None}
        isolated = isolated_clients(ended, survivors, minimum)
        if isolated:
            raise SumRefusal(
                "one-sum-per-input",
                "a repeat of a statistic this node already added, announced with other "
                f"survivors: with the earlier sums it would give away the vector of "
                f"{len(isolated)} client(s) {list(isolated)}, fewer than its "
                f"min-sum-participants ({minimum})",
            )
        done = (pending[0], survivors)
        if pending in entries:
            entries[entries.index(pending)] = done
        if done not in entries:
            entries.append(done)
        statistics[key] = tuple(entries)
    return statistics


def open_sum_of(record, stage_names, what):
    current = record.open
    if current is None:
        raise SumRefusal("stage", f"{what} without an open sum of this node (none, or done)")
    if current.stage not in stage_names:
        raise SumRefusal("stage", f"{what} at stage {current.stage!r} of sum {current.sum_id}")
    return current


def check_announcement(current, me, survivors, dropped, minimum):
    """The announced survivors (a :class:`ClientSet`) and dropped clients, if the node accepts them.

    The announcement names the clients announced as dropped; the survivors are
    the sum's participants less those (``survivors=None``), so it costs
    ``O(dropped)``, not ``O(participants)``. An announcement that lists the
    survivors too must list exactly the others.
    """
    participants = current.participants
    if not isinstance(participants, ClientSet):
        participants = ClientSet.of(participants, max(participants) + 1)
    dropped = _int_list(dropped, "the dropped clients")
    if sorted(set(dropped)) != sorted(dropped):
        raise SumRefusal("well-formed", "the dropped clients are not distinct")
    dropped = sorted(dropped)
    if any(c not in participants for c in dropped):
        raise SumRefusal("well-formed", "the announcement does not cover the sum's participants")
    remaining = participants.without(dropped)
    if survivors is not None:
        listed = set(_int_list(survivors, "the survivors"))
        if listed & set(dropped):
            raise SumRefusal(
                "well-formed",
                f"clients {sorted(listed & set(dropped))} announced as both uploaded and dropped",
            )
        if len(listed) != len(remaining) or any(c not in remaining for c in listed):
            raise SumRefusal(
                "well-formed", "the announcement does not cover the sum's participants"
            )
    survivors = remaining
    if me not in survivors:
        raise SumRefusal("well-formed", f"client {me} is announced as dropped")
    if len(survivors) < minimum:
        raise SumRefusal(
            "min-sum-participants",
            f"{len(survivors)} clients announced as uploaded; this node unmasks sums of at "
            f"least {minimum}",
        )
    if len(survivors) < current.min_survivors:
        raise SumRefusal(
            "noise-share",
            f"{len(survivors)} clients announced as uploaded, but this node added 1/"
            f"{current.min_survivors} of the noise the release needs: a sum of fewer clients "
            "would hold too little noise",
        )
    return survivors, dropped
