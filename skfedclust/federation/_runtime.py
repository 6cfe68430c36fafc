"""The protocol runtime: the only way a protocol runs client steps and moves messages.

A federated method is written once, as a *protocol* against a :class:`Runtime`:

* ``runtime.run(step, tag=...)`` runs a client step on every client (or a chosen
  subset). A client step has the signature
  ``step(data, inbox, state, party, **public) -> Reply``: it sees its own data,
  the messages delivered to it, its own private state and its :class:`Party`
  (public index, public seed, private generator), and nothing else. Its
  :class:`Reply` says what it *sends* (to the server, or to other parties),
  what it *keeps* (its private state for later steps) and what it hands its
  own user as *output* (its labels, a predict state).
* what the clients sent comes back as :class:`Received`, built from the
  messages the ledger recorded: it is the only thing a server step gets.
* ``runtime.broadcast`` and ``runtime.send`` deliver the server's messages to the
  clients' inboxes for their next step.

The contract is messages only: no protocol, server step or estimator reads
what a party keeps or outputs. The one place outputs leave a party is
:meth:`Runtime.hand_back`, which the estimator base class calls once for the
labels: the in-process runtime plays every party's user and puts their labels
back in input order; a deployed runtime leaves them on the nodes, each of
which writes its own.

Two implementations share this interface: :class:`InProcessRuntime` (joblib,
here) and the Flower runtime of :mod:`skfedclust.flower`. A third needs no
monkeypatching: :func:`use_runtime` makes estimators fit on it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import gc
import hashlib
import logging
import os
import sys
import threading
import time
import types
import weakref
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from joblib import effective_n_jobs
from joblib._parallel_backends import ThreadingBackend
from joblib.parallel import get_active_backend
from sklearn import config_context, get_config
from sklearn.utils._openmp_helpers import _openmp_effective_n_threads
from sklearn.utils.parallel import Parallel, delayed
from threadpoolctl import ThreadpoolController

from ..node._contract import (  # noqa: F401  (the step contract, re-exported)
    _STEP_PARAMETERS,
    Inbox,
    Reply,
    _check_reply,
    allowed_step_modules,
    client_step_name,
    resolve_client_step,
)
from ..node._declarations import bound_only, releases_rows, sum_only, summand  # noqa: F401
from ..node._gate import serve_step
from ..node._methods import package_method
from ._ledger import SERVER, Ledger, payload_nbytes

__all__ = [
    "Inbox",
    "InProcessRuntime",
    "Party",
    "Received",
    "Reply",
    "Runtime",
    "Session",
    "current_runtime_factory",
    "logger",
    "private_entropy",
    "progress",
    "use_runtime",
]

#: Seconds between two progress lines of one long client step (``verbose=1``).
PROGRESS_SECONDS = 5.0

#: The package logger: progress of every protocol goes here. An estimator's
#: ``verbose`` raises its level for the duration of ``fit``.
logger = logging.getLogger("skfedclust")


@contextlib.contextmanager
def progress(verbose):
    """Raise the package logger to INFO (``verbose=1``) or DEBUG (``>= 2``) and print it.

    Progress goes through the ``skfedclust`` logger; an application that
    configures logging itself sees it at its own levels. ``verbose`` adds a
    handler writing to standard output for the duration of the call.
    """
    if not verbose:
        yield
        return
    level = logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    previous = logger.level
    logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


#: Domain tag mixed into every private stream, so that no public seed drawn
#: from the same ``random_state`` can coincide with one.
_PRIVATE_DOMAIN = 0x5052_4956  # "PRIV"


def private_entropy(random_state):
    """Root entropy of the parties' private generators in a simulation.

    Derived from the state of ``random_state`` without drawing from it, so the
    public draws of a fit (partitions, seeds, server choices) are the same
    whether or not a protocol uses private randomness, and a fit stays
    reproducible. Only the runtime holds it: it reaches client steps as their
    :attr:`Party.rng <skfedclust.federation.Party.rng>`, never a server step or a
    fitted attribute. On a deployment every node draws its own from the operating
    system instead.

    Parameters
    ----------
    random_state : numpy.random.RandomState
        The fit's random state.

    Returns
    -------
    entropy : list of int
        Entropy for :class:`numpy.random.SeedSequence`.
    """
    _, keys, pos, *_ = random_state.get_state(legacy=True)
    # 256 bits digested from the generator's whole state: as unpredictable as
    # the state, and cheap to seed each party's generator from at every step.
    digest = hashlib.sha256(
        np.uint32(_PRIVATE_DOMAIN).tobytes()
        + np.uint32(pos).tobytes()
        + np.asarray(keys, dtype=np.uint32).tobytes()
    ).digest()
    return np.frombuffer(digest, dtype=np.uint32).tolist()


class Party:
    """What a client step knows about the party it runs on.

    Parameters
    ----------
    index : int
        The party's public index: ``0 .. n_clients - 1`` for data-holding
        clients, then the parties without data.
    seed : int or None
        The party's public seed, drawn by the server (``None`` for parties
        without data). It drives public, algorithmic choices (a k-means
        start) that the server could replay.
    entropy : int, sequence of int or None
        Root of the party's private randomness. ``None`` draws it from the
        operating system.
    stream : tuple of int, default=()
        Which private stream of the party this step gets (the runtime passes
        the exchange number, so every step draws fresh values).
    n_threads : int, default=1
        Threads the step may use for its own compiled or block-parallel
        work: the party's share of its machine's cores (all of them when the
        runtime runs the parties one after another, one each when it runs
        them side by side). A step's results must not depend on it.
    policy : NodePolicy, default=None
        What the party agrees to do (its operator's node config on Flower);
        ``None`` gives a simulated party's (``NodePolicy.simulation()``).
        Checks made inside client steps (a secure sum's minimum of
        participants) read it.
    ledger : object, default=None
        The node's privacy ledger of its rows (a ``NodeLedger``), for this fit (its policy's
        ``privacy_ledger``): its accountant starts from every release charged
        on those rows in earlier fits, and its secure sums' record holds
        across fits.
    identities : tuple or None, default=None
        Who holds each slot, as this party knows it (one entry per party,
        ``None`` for a slot it cannot tell): its ledger compares the
        participants of secure sums of different fits by these, since the
        slots may be handed out in another order at every fit. ``None``: no
        slot is known.

    Attributes
    ----------
    rng : numpy.random.Generator
        The party's private generator: secret-sharing noise and
        differential-privacy noise come from here, never from ``seed``.
    policy : NodePolicy
        The party's policy.
    """

    __slots__ = (
        "index",
        "seed",
        "n_threads",
        "policy",
        "ledger",
        "identities",
        "_entropy",
        "_stream",
        "_rng",
        "_secret",
    )

    def __init__(
        self,
        index,
        seed=None,
        entropy=None,
        stream=(),
        n_threads=1,
        policy=None,
        ledger=None,
        identities=None,
    ):
        from ..node._policy import NodePolicy

        self.ledger = ledger
        self.identities = None if identities is None else tuple(identities)
        self.index = int(index)
        self.n_threads = max(1, int(n_threads))
        self.seed = None if seed is None else int(seed)
        self.policy = NodePolicy.simulation() if policy is None else policy
        self._entropy = entropy
        self._stream = tuple(int(s) for s in stream)
        self._rng = None
        self._secret = None

    def secret_bytes(self, n):
        """``n`` bytes of key material from a cryptographic generator (ChaCha20).

        Keyed by SHA-256 of the party's private entropy (the operating
        system's on a node, a stream derived from ``random_state`` in a
        simulation, so that a simulated fit stays reproducible), its index and
        the step's stream. Mask seeds and Shamir coefficients come from here:
        unlike :attr:`rng` (PCG64, a statistical generator), seeing some of
        its output tells nothing of the rest.
        """
        if self._secret is None:
            from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

            entropy = self._entropy
            if entropy is None:
                entropy = np.random.SeedSequence().entropy  # the operating system's
            material = f"secret|{entropy}|{self.index}|{self._stream}".encode()
            key = hashlib.sha256(material).digest()
            self._secret = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
        return self._secret.update(bytes(int(n)))

    @property
    def rng(self):
        """The party's private :class:`numpy.random.Generator`, made on first use."""
        if self._rng is None:
            # numpy's PCG64 from a 128-bit seed: unpredictable to anyone without
            # the entropy, which stays with the party (a node's OS entropy).
            sequence = np.random.SeedSequence(self._entropy, spawn_key=(self.index, *self._stream))
            self._rng = np.random.Generator(np.random.PCG64(sequence))
        return self._rng

    def __reduce__(self):
        # A generator in use cannot be pickled; a copy starts its streams afresh
        # (only before a step's first draw does a party cross a process boundary).
        return (
            Party,
            (
                self.index,
                self.seed,
                self._entropy,
                self._stream,
                self.n_threads,
                self.policy,
                self.ledger,
                self.identities,
            ),
        )

    def __repr__(self):
        return f"Party(index={self.index}, seed={self.seed})"


class Received(Mapping):
    """Messages one exchange delivered to the server, by sending client.

    A read-only mapping ``{client: payload}`` in client order, holding exactly
    the payloads the ledger recorded. Server steps take these (and public
    constants) and nothing else.
    """

    def __init__(self, tag, payloads):
        self.tag = tag
        self._payloads = dict(sorted(payloads.items()))

    def __getitem__(self, client):
        return self._payloads[client]

    def __iter__(self):
        return iter(self._payloads)

    def __len__(self):
        return len(self._payloads)

    def __repr__(self):
        return f"Received({self.tag!r}, clients={list(self._payloads)})"

    def list(self):
        """The payloads, in client order."""
        return list(self._payloads.values())


def side_by_side(step):
    """Mark a client step whose work is one sequential thread that releases the GIL.

    When the in-process runtime runs steps in turn (``n_jobs=None`` or 1), a
    step may use the cores for work of its own (``party.n_threads``); a step
    that cannot split its work (GOLD's online competition pass visits the rows
    one after another) would leave all but one idle. The runtime instead runs
    such steps side by side on threads, one thread each, as many as a step
    in turn would get. Each party computes what it computes alone, so the
    result is the same; a Flower node runs its own step either way.
    """
    step.__skfedclust_side_by_side__ = True
    return step


def per_client_inputs(*tags):
    """Declare the server messages a client step reads that differ from client to client.

    A secure sum binds every server message its step reads into the masks'
    keys, so that a server that sends one client other inputs than the rest
    (other centers) gets noise. A message meant to differ between clients (a
    client's own labels) is declared here, in the node's own code, not by the
    server.
    """

    def mark(step):
        step.__skfedclust_per_client__ = frozenset(tags)
        return step

    return mark


def reads(*tags):
    """Declare the only messages a client step takes from its party's inbox.

    A step takes the messages delivered to its party since the party's last
    step. A step declared with ``reads`` takes only those of ``tags`` (server
    and peer messages alike); the others wait in the inbox for the party's
    next step. A set-up step declared ``reads()`` therefore leaves alone the
    centers the server sent before it, so protocols need not order their
    set-up around their messages.

    Parameters
    ----------
    *tags : str
        The tags of the messages the step takes.

    Returns
    -------
    mark : callable
        The decorator.

    Examples
    --------
    >>> from skfedclust.federation import Reply, data_independent, reads
    >>> @data_independent
    ... @reads("global centers")
    ... def my_step(data, inbox, state, party):
    ...     return Reply(send=inbox["global centers"].sum())
    >>> sorted(my_step.__skfedclust_reads__)
    ['global centers']
    """

    def mark(step):
        step.__skfedclust_reads__ = frozenset(tags)
        return step

    return mark


def step_reads(step):
    """The tags a step takes from its inbox (``None``: every message waiting)."""
    return getattr(step, "__skfedclust_reads__", None)


@functools.lru_cache(maxsize=1)
def _thread_controller():
    # Scanning the loaded BLAS and OpenMP libraries costs tens of milliseconds;
    # once per process is enough (the libraries are loaded by the time a
    # protocol runs), as scikit-learn does.
    return ThreadpoolController()


def single_threaded():
    """Context manager limiting every BLAS and OpenMP pool to one thread."""
    return _thread_controller().limit(limits=1)


#: Threads inside a runtime's own limit around its map of client steps. Steps
#: run in turn on such a thread need not set it again (tens of microseconds
#: each); other threads and processes set their own, since some pools
#: (OpenMP, some BLAS builds) keep their limit per thread.
_LIMITED_THREADS = set()


def _this_thread():
    # With the process: a forked worker may reuse its parent's thread ident.
    return os.getpid(), threading.get_ident()


@contextlib.contextmanager
def _limited_map():
    me = _this_thread()
    with single_threaded():
        if me in _LIMITED_THREADS:
            yield
            return
        _LIMITED_THREADS.add(me)
        try:
            yield
        finally:
            _LIMITED_THREADS.discard(me)


@contextlib.contextmanager
def _collector_paused():
    """Pause Python's cyclic garbage collector while the runtime maps a client step.

    The parties' kept state is thousands of long-lived objects; a collection
    triggered every few hundred allocations scans them all, about a sixth of
    a secure sum's time at a thousand clients. Reference counting still frees
    every acyclic object a step drops; cycles wait for the next collection
    after the map. A collector the caller disabled stays disabled.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _call_step_limited(step, data, inbox, state, party, public):
    # Client work runs on one thread in every pool (BLAS and OpenMP): results
    # are then identical whatever n_jobs and backend are, and parallel clients
    # do not oversubscribe the cores. Parallelism comes from running clients
    # side by side.
    if _this_thread() in _LIMITED_THREADS:
        return step(data, inbox, types.MappingProxyType(state), party, **public)
    with single_threaded():
        return step(data, inbox, types.MappingProxyType(state), party, **public)


def _run_step(step, data, inbox, state, party, public, method=None):
    # Through the node's one gate, as a Flower node serves it: admitted, run,
    # and its reply checked before the runtime delivers anything of it.
    return serve_step(
        step, data, inbox, state, party, public, method=method, run=_call_step_limited
    )


def threads_per_step(n_jobs):
    """Threads a client step may use when a runtime runs steps with ``n_jobs``.

    Steps run one after another (one worker) get the cores OpenMP would use
    (``OMP_NUM_THREADS`` and threadpoolctl limits included); steps run side by
    side share them, at least one thread each.
    """
    workers = effective_n_jobs(n_jobs)
    return max(1, _openmp_effective_n_threads() // max(1, workers))


@functools.cache
def thread_pool(n_workers, purpose=""):
    """A long-lived pool of ``n_workers`` threads, one per size and purpose.

    Why not joblib's threading backend: it takes about 10 ms per map of ten
    tasks (its result polling), which dwarfs a client step of a millisecond
    when a protocol runs hundreds of small rounds. Client steps and the block
    work inside them get pools of their own (``purpose``), so that a step
    waiting for its blocks never holds a thread its blocks need.
    """
    prefix = "skfedclust" + (f"-{purpose}" if purpose else "")
    return ThreadPoolExecutor(n_workers, thread_name_prefix=prefix)


def _run_step_with_config(config, arguments):
    # scikit-learn's configuration is per thread: hand the caller's to the worker.
    with config_context(**config):
        return _run_step(*arguments)


def _map_steps(arguments, n_jobs):
    """Run client steps side by side: an iterable of the replies in the order of ``arguments``.

    With joblib's threading backend active (the default a protocol asks for
    with ``prefer="threads"``, or the user's choice), the steps go to a
    persistent thread pool; any other backend the user chose (processes, a
    cluster) is used through joblib as it is.
    """
    backend, _ = get_active_backend()
    if not isinstance(backend, ThreadingBackend):
        return Parallel(n_jobs=n_jobs)(delayed(_run_step)(*a) for a in arguments)
    pool = thread_pool(effective_n_jobs(n_jobs), "client")
    # As they finish, in order: the caller reports progress on a long step.
    return pool.map(functools.partial(_run_step_with_config, get_config()), arguments)


class Runtime:
    """The interface a protocol is written against.

    Attributes
    ----------
    n_clients : int
        Number of data-holding clients, ``0 .. n_clients - 1``.
    n_parties : int
        Number of parties; parties ``n_clients ..`` hold no data (e.g. the
        share-holding parties of secret sharing).
    client_sizes : ndarray of int
        Rows held by each client (public metadata of the federation).
    client_widths : ndarray of int
        Features held by each client.
    row_groups : list of list of int or None
        For vertical and hybrid federations, the clients of each row group.
    client_columns : list of ndarray of int or None
        For vertical and hybrid federations, the global feature indices each
        client holds (the public schema; the values stay private). ``None``
        when every client holds every feature.
    seeds : ndarray of int
        One public seed per client, drawn up front by the server.
    ledger : Ledger
        Every message of the run.
    """

    def run(
        self,
        step,
        *,
        tag,
        clients=None,
        setup=False,
        same_round=False,
        may_drop=False,
        per_client=None,
        **public,
    ):
        """Run ``step`` on ``clients`` and return what they sent to the server."""
        raise NotImplementedError

    def broadcast(self, payload, *, tag, clients=None):
        """Send the same message from the server to every client in ``clients``."""
        self.send({c: payload for c in self._targets(clients)}, tag=tag)

    def send(self, payloads, *, tag):
        """Send ``payloads[c]`` from the server to client ``c``."""
        raise NotImplementedError

    def server(self, step, *received, **public):
        """Run a server step on received messages and public constants.

        Every positional argument must be a :class:`~skfedclust.federation.Received` this runtime
        produced (its ``run`` registers them in ``_delivered``), so a server
        step can be fed only what the ledger recorded as sent. The registry
        holds them weakly: a streamed upload is freed once its block is
        decoded.
        """
        for r in received:
            if not isinstance(r, Received) or self._delivered.get(id(r)) is not r:
                raise TypeError(
                    f"server step {step.__name__} must receive messages delivered by this "
                    f"runtime (Received), got {type(r).__name__}"
                )
        self.trace.append((self.ledger._phase, step.__name__, "server step", step.__name__, None))
        return step(*received, **public)

    def hand_back(self, key):
        """What the parties declared as output ``key``, for the user who fitted.

        The one place a party's output leaves it. The in-process runtime plays
        every party's user and returns the outputs in the order of the input
        rows; a deployed runtime returns ``None``: each node hands its own
        output to its own user (writes it). The estimator base class calls it
        once, for ``"labels"``. A protocol may call it only for public
        metadata its user sets before the protocol and that a deployment
        agrees otherwise when it gets ``None`` (OmniFC's row numbering: the
        order of the user's input rows, else client by client); never for
        anything a server step could not know.
        """
        raise NotImplementedError

    def party_session(self):
        """The parties of this run for a later run, or ``None`` (a deployed runtime).

        A deployed federation keeps nothing after the fit: each node drops its
        state when the fit ends.
        """
        return None

    def evaluation(self):
        """Context in which exchanges count as evaluation rounds, not protocol rounds.

        For diagnostics an estimator computes from its result after the
        protocol proper (its inertia): their bytes are counted as any other,
        their rounds in ``communication_["evaluation_rounds"]``.
        """
        return self.ledger.evaluating()

    def stage(self, message):
        """Log the start of a protocol stage."""
        elapsed = time.perf_counter() - self._t0
        logger.info("[%s] %s (%.2fs)", self.name, message, elapsed)

    def _targets(self, clients):
        if clients is None:
            return list(range(self.n_clients))
        return [int(c) for c in clients]


class InProcessRuntime(Runtime):
    """Runs a protocol in this process; clients run in parallel with joblib.

    Any joblib backend works (loky, threading, or dask through
    :func:`joblib.parallel_config`); results do not depend on ``n_jobs`` or
    the backend.

    Parameters
    ----------
    federation : Federation
        Who holds what. Protocol code never sees it.
    n_parties : int, default=None
        Total number of parties; ``None`` means the clients only.
    n_jobs : int, default=None
        Number of joblib workers for client steps.
    name : str, default=""
        Name used in progress messages.
    private_entropy : sequence of int, default=None
        Root of the parties' private generators (:func:`private_entropy`);
        ``None`` draws it from the operating system (a fit that uses private
        randomness is then not reproducible).
    session : Session, default=None
        The parties of an earlier run (:meth:`party_session`), which continue here
        with what they kept, on the rows of ``federation`` (new rows to
        predict). Their public seeds, private entropy and number of parties
        come from the session.
    policy : NodePolicy, default=None
        The policy of every simulated party (``None``:
        ``NodePolicy.simulation()``; ``NodePolicy()`` is a deployed node's
        default). Each party checks what it sends against it after every
        step, as a Flower node does.
    node_identities : sequence of str, default=None
        The identity of each client's simulated node (a name, as a deployed
        node's identity key is): its privacy ledger's key and who it is to
        the others' ledgers. ``None``: each client is its rows (their
        fingerprint), so a simulation of edited rows is of other nodes.
    method : str, default=None
        The estimator class name of the fit the parties take part in (what a
        Flower node agrees to at its handshake): a party's policy checks the
        steps that release rows by design against it (``allow-row-release``).
        ``None``: the session's method, else unknown.
    """

    def __init__(
        self,
        federation,
        *,
        n_parties=None,
        n_jobs=None,
        name="",
        private_entropy=None,
        session=None,
        policy=None,
        node_identities=None,
        method=None,
    ):
        from ..node._policy import NodePolicy

        self.policy = NodePolicy.simulation() if policy is None else policy
        if node_identities is not None:
            node_identities = tuple(str(i) for i in node_identities)
            if len(node_identities) != federation.n_clients or len(set(node_identities)) != len(
                node_identities
            ):
                raise ValueError(
                    f"node_identities must name the {federation.n_clients} clients, each once; "
                    f"got {node_identities!r}"
                )
        self._node_identities = node_identities
        if method is None and session is not None:
            method = getattr(session, "_method", None)
        if method is None and name:
            # The estimator class ("DCClustering.predict" is a run of DCClustering's
            # steps); a runtime named otherwise runs a protocol of no known method.
            candidate = str(name).partition(".")[0]
            method = candidate if package_method(candidate) is not None else None
        #: The method the parties agreed to (``None``: unknown, a user's own protocol).
        self.method = None if method is None else str(method)
        self._federation = federation
        self.n_clients = federation.n_clients
        self.n_parties = max(self.n_clients, n_parties or 0)
        self.client_sizes = federation.client_sizes
        self.client_widths = federation.client_widths
        self.n_features = federation.n_features
        self.row_groups = federation.row_groups
        self.client_columns = federation.client_cols
        self.seeds = federation.seeds
        self.n_jobs = n_jobs
        self.name = name
        if session is not None:
            self.n_parties = session._n_parties
            self.seeds = session._seeds
            private_entropy = session._entropy
        self.ledger = Ledger(self.n_parties)
        if private_entropy is None:
            private_entropy = np.random.SeedSequence().entropy
        self._private_entropy = private_entropy
        self._exchange = -1 if session is None else session._exchange
        # A later run works on copies: what it keeps does not change the session.
        self._states = (
            [{} for _ in range(self.n_parties)]
            if session is None
            else [dict(s) for s in session._states]
        )
        self._outputs = [{} for _ in range(self.n_parties)]
        self._inboxes = [{} for _ in range(self.n_parties)]
        self._server_tags = [set() for _ in range(self.n_parties)]
        self._data_blocks = {}
        # A fit on nodes with a privacy ledger is counted once per node; a run
        # continuing an earlier one (predict) is not a fit of its own.
        self._fit_token = None if session is not None else os.urandom(16).hex()
        self._ledgers = {}
        self._slot_identities = None
        self._t0 = time.perf_counter()
        #: One entry per exchange: (phase, tag, kind, step name, senders or None).
        #: It keeps no payload alive.
        self.trace = []
        self._delivered = weakref.WeakValueDictionary()

    # -- client steps ------------------------------------------------------------
    def _targets(self, clients):
        if clients is None:
            return list(range(self.n_clients))
        targets = [int(c) for c in clients]
        for c in targets:
            if not 0 <= c < self.n_parties:
                raise ValueError(f"unknown party {c}: parties are 0..{self.n_parties - 1}")
        return targets

    def _data(self, c):
        if c >= self.n_clients:
            return None
        # Each client's block is cut out of the pooled rows once: a protocol of
        # many rounds (Lloyd iterations) would otherwise copy every client's
        # rows at every step. Read-only, so no step can change what a later
        # step of the same client sees. A contiguous block is a view of the
        # caller's rows (a client array, or a run of pooled rows), never a copy;
        # a view of its own, so that marking it read-only leaves the caller's
        # array as it was.
        block = self._data_blocks.get(c)
        if block is None:
            block = np.ascontiguousarray(self._federation.client_data(c)).view()
            block.flags.writeable = False
            self._data_blocks[c] = block
        return block

    def _party(self, c, n_threads=1):
        seed = int(self.seeds[c]) if c < self.n_clients else None
        ledger = self._ledger(c)
        return Party(
            c,
            seed,
            self._private_entropy,
            stream=(self._exchange,),
            n_threads=n_threads,
            policy=self.policy,
            ledger=ledger,
            identities=None if ledger is None else self._identities(),
        )

    def _identities(self):
        """Each slot's identity: its node's (``node_identities``), else its rows' fingerprint.

        Without names, the rows stand for the node that holds them: a
        simulation of the same data sets in another order is the same nodes
        in other slots. A party without rows is its slot.
        """
        if self._slot_identities is None:
            from ..node._ledger import data_fingerprint

            named = self._node_identities
            self._slot_identities = tuple(
                f"party {c}"
                if c >= self.n_clients
                else named[c]
                if named is not None
                else data_fingerprint(self._data(c))
                for c in range(self.n_parties)
            )
        return self._slot_identities

    def _ledger(self, c):
        """Party ``c``'s privacy ledger for this fit (keyed by its identity), the fit counted
        at its first step."""
        if self._fit_token is None or self.policy.privacy_ledger is None:
            return None
        if c not in self._ledgers:
            ledger = None
            if c < self.n_clients:
                ledger = self.policy.ledger(
                    self._data(c),
                    self._fit_token,
                    node=self._identities()[c],
                    source=f"client {c}",
                    # A ledger of versions 1 and 2 was keyed by these rows.
                    adopt="rows",
                )
            if ledger is not None:
                ledger.enter_fit()
            self._ledgers[c] = ledger
        return self._ledgers[c]

    def run(
        self,
        step,
        *,
        tag,
        clients=None,
        setup=False,
        same_round=False,
        may_drop=False,
        per_client=None,
        **public,
    ):
        """Run a client step and deliver what it sends.

        Parameters
        ----------
        step : callable
            A module-level function ``step(data, inbox, state, party, **public)``
            returning a :class:`~skfedclust.federation.Reply`. ``data`` is the party's own block
            (``None`` for a party without data), ``inbox`` the messages
            delivered to it since its last step (then emptied), ``state`` a
            read-only view of what it kept.
        tag : str
            Name of the exchange in the ledger.
        clients : list of int, default=None
            Parties that run the step; all data-holding clients by default.
        setup : bool, default=False
            Count the exchange as set-up (agreeing on public parameters), not
            as a protocol round.
        same_round : bool, default=False
            Count the exchange in the round of the previous client exchange: a
            message streamed in several exchanges (the blocks of a matrix the
            server asks for in turn) is one round of the protocol.
        may_drop : bool, default=False
            The protocol tolerates clients that do not answer (a dropout-tolerant
            secure sum): their replies are left out of ``Received`` instead of
            failing the run. In-process no client drops, except where a test
            makes ``_lost`` lose a reply.
        per_client : dict, default=None
            Public constants that differ between clients, ``{client: {name:
            value}}`` (a per-round seed drawn by the server, a number of
            centers asked of each client). Like ``public``, they are protocol
            parameters, not data, and are not counted as messages.
        **public
            Public constants passed to every call.

        Returns
        -------
        received : Received
            What the clients sent to the server, as recorded by the ledger.
        """
        if "<locals>" in getattr(step, "__qualname__", "<locals>"):
            raise TypeError(
                f"client step {step!r} must be a module-level function, so that any runtime "
                "(another process, another machine) can run it by name"
            )
        targets = self._targets(clients)
        self._exchange += 1
        # Before the single-thread limit of the map below, which the count reads.
        n_threads = threads_per_step(self.n_jobs)
        in_turn = effective_n_jobs(self.n_jobs) == 1
        side_by_side_threads = 0
        if in_turn and getattr(step, "__skfedclust_side_by_side__", False) and len(targets) > 1:
            side_by_side_threads = min(n_threads, len(targets))
            if side_by_side_threads > 1:
                n_threads = 1
        inboxes = []
        wanted = step_reads(step)
        for c in targets:
            waiting, server_tags = self._inboxes[c], self._server_tags[c]
            if wanted is None:
                taken, kept = waiting, {}
            else:
                # What the step does not read waits for the party's next step.
                taken = {tag: m for tag, m in waiting.items() if tag in wanted}
                kept = {tag: m for tag, m in waiting.items() if tag not in wanted}
            inboxes.append(Inbox(taken, server_tags & set(taken)))
            self._inboxes[c] = kept
            self._server_tags[c] = server_tags & set(kept)
        per_client = per_client or {}
        arguments = (
            (
                step,
                self._data(c),
                inbox,
                self._states[c],
                self._party(c, n_threads),
                {**public, **per_client.get(c, {})},
                self.method,
            )
            for c, inbox in zip(targets, inboxes)
        )
        # The limit is also set around the whole map: threadpoolctl's limits are
        # process-wide, so with the threading backend one worker leaving its
        # context must not lift the limit under another one still running.
        with _limited_map(), _collector_paused():
            if side_by_side_threads > 1:
                pool = thread_pool(side_by_side_threads, "client")
                run = functools.partial(_run_step_with_config, get_config())
                replies = list(self._reporting(pool.map(run, arguments), step, len(targets)))
            elif in_turn:
                # In turn on this thread: joblib's dispatch and scikit-learn's
                # hand-over of its config (already in effect here) would cost
                # about 50 us per step.
                done = (_run_step(*a) for a in arguments)
                replies = list(self._reporting(done, step, len(targets)))
            else:
                mapped = _map_steps(list(arguments), self.n_jobs)
                replies = list(self._reporting(mapped, step, len(targets)))
        phase = self.ledger.open_phase(setup=setup, same_round=same_round)
        sent = {}
        for c, reply in zip(targets, replies):
            if may_drop and self._lost(tag, c):
                continue
            self._states[c].update(reply.keep)
            self._outputs[c].update(reply.output)
            if reply.send is not None:
                self.ledger.record(reply.send, sender=c, receiver=SERVER, tag=tag)
                sent[c] = reply.send
            if reply.to_peers:
                to_peers = dict(sorted(reply.to_peers.items()))
                self.ledger.record_to_peers(to_peers, sender=c, tag=tag)
                for peer, payload in to_peers.items():
                    self._inboxes[peer].setdefault(tag, {})[c] = payload
        received = Received(tag, sent)
        self._delivered[id(received)] = received
        self.trace.append((phase, tag, "client step", step.__name__, tuple(received)))
        return received

    def _reporting(self, replies, step, n_targets):
        """``replies`` as they come, with a progress line every few seconds of a long step.

        With ``verbose=1`` a client step over thousands of clients would
        otherwise print nothing for minutes.
        """
        if not logger.isEnabledFor(logging.INFO):
            yield from replies
            return
        started = last = time.perf_counter()
        for done, reply in enumerate(replies, 1):
            yield reply
            now = time.perf_counter()
            if now - last >= PROGRESS_SECONDS and done < n_targets:
                last = now
                self.stage(
                    f"{step.__name__}: {done:,} of {n_targets:,} clients done "
                    f"in {now - started:.1f}s"
                )

    def _lost(self, tag, party):
        """Whether the reply of ``party`` to exchange ``tag`` is lost (a test hook: never)."""
        return False

    # -- server messages -------------------------------------------------------------
    def send(self, payloads, *, tag):
        phase = self.ledger.open_phase()
        # A broadcast sends one payload to every client: measured once.
        sizes = {}
        for c, payload in payloads.items():
            c = int(c)
            if id(payload) not in sizes:
                sizes[id(payload)] = payload_nbytes(payload)
            self.ledger.record(
                payload, sender=SERVER, receiver=c, tag=tag, nbytes=sizes[id(payload)]
            )
            self._inboxes[c][tag] = payload
            self._server_tags[c].add(tag)
        self.trace.append((phase, tag, "server send", None, None))

    # -- the user's side ------------------------------------------------------------
    def hand_back(self, key):
        """The parties' outputs ``key``, in the order of the input rows.

        The simulation's user plays every party, so it gets every party's own
        output (its labels); nothing here crosses the wire. ``None`` when no
        party declared ``key``.
        """
        parties = [c for c in range(self.n_clients) if key in self._outputs[c]]
        if not parties:
            return None
        values = [self._outputs[c][key] for c in parties]
        return self._federation.gather_rows(values, parties)

    def party_session(self):
        """The parties of this run, with what they kept, for a later run (predict).

        The simulation's user plays every party, so it can keep them after a
        fit and run another protocol with them (each party mapping new rows
        with what it kept). The session is opaque: only a runtime built with
        ``InProcessRuntime(federation, session=...)`` opens it. It holds every
        party's private state.
        """
        return Session(self)

    def private_states(self):
        """Every party's private state, for tests that attack a protocol.

        Not part of the :class:`~skfedclust.federation.Runtime` interface: no protocol, server step
        or estimator may read it.
        """
        return [dict(s) for s in self._states]

    def party_outputs(self):
        """Every party's declared outputs, for tests (not part of the interface)."""
        return [dict(o) for o in self._outputs]


class Session:
    """The parties of a finished in-process run, kept by the user who played them.

    Built by :meth:`InProcessRuntime.party_session`; a runtime given it as
    ``session`` continues with the parties' kept state, public seeds and
    private entropy. No estimator or server step reads it. It pickles and
    copies with the model that holds it (``session_``): in a simulation its
    user played every party. It is every party's private state; an
    estimator's ``server_model()`` gives the model without it.
    """

    __slots__ = ("_states", "_seeds", "_entropy", "_n_parties", "_exchange", "_method")

    def __init__(self, runtime):
        self._method = runtime.method
        self._states = [dict(s) for s in runtime._states]
        self._seeds = runtime.seeds
        self._entropy = runtime._private_entropy
        self._n_parties = runtime.n_parties
        self._exchange = runtime._exchange

    def __repr__(self):
        return f"Session(n_parties={self._n_parties})"


_RUNTIME_FACTORY = contextvars.ContextVar("skfedclust_runtime_factory", default=InProcessRuntime)


def current_runtime_factory():
    """The runtime class (or factory) estimators fit on: :class:`InProcessRuntime` by default."""
    return _RUNTIME_FACTORY.get()


@contextlib.contextmanager
def use_runtime(factory):
    """Make estimators fit on runtimes built by ``factory`` inside the ``with`` block.

    ``factory(federation, *, n_parties, n_jobs, name, private_entropy, method)`` must
    return a :class:`Runtime`; a subclass of :class:`InProcessRuntime` (one
    that records what its server steps receive, say) is the usual choice.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfedclust import KFed
    >>> from skfedclust.federation import InProcessRuntime, use_runtime
    >>> built = []
    >>> class Counting(InProcessRuntime):
    ...     def __init__(self, *args, **kwargs):
    ...         super().__init__(*args, **kwargs)
    ...         built.append(self)
    >>> X, _ = make_blobs(60, centers=2, random_state=0)
    >>> with use_runtime(Counting):
    ...     _ = KFed(2, random_state=0).fit([X[:30], X[30:]])
    >>> len(built)
    1
    """
    token = _RUNTIME_FACTORY.set(factory)
    try:
        yield factory
    finally:
        _RUNTIME_FACTORY.reset(token)
