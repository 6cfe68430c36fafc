"""The protocols over Flower: the same results as in-process, sealed peer messages, clear errors.

Most tests run the ClientApp in this process through a small Grid (fast, no Ray);
some run Flower's simulation runtime (Ray) and one a real local deployment
(a SuperLink and five SuperNodes on 127.0.0.1, one ``flwr run`` fitting every
method). Those start processes and are marked ``deployment``: CI runs them in a
step of their own, not in the README's test command.
"""

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

from flwr.app import Array, Context, Message, RecordDict  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from skfedclust import (
    # noqa: E402
    FeCA,
    FederatedFuzzyCMeans,
    FederatedKMeans,
    GOLDClustering,
    KFed,
    KumarFederatedKMeans,
    MAvg,
)
from skfedclust.federation import Party, Reply, data_independent, payload_nbytes, summary  # noqa: E402
from skfedclust.flower import (  # noqa: E402
    CodecError,
    FileLoader,
    FileWriter,
    FlowerNodeError,
    FlowerTimeoutError,
    IdentityKey,
    NotSupportedOnFlower,
    SealError,
    fit_on_flower,
    load_trusted_identities,
    make_client_app,
)
from skfedclust.flower import _step_worker as step_worker  # noqa: E402
from skfedclust.flower._codec import decode, encode, from_bytes, to_bytes  # noqa: E402
from skfedclust.flower._crypto import KeyPair, open_sealed, seal  # noqa: E402
from skfedclust.flower._wire import resolve_step, step_name  # noqa: E402
from skfedclust.methods._base import BaseFederatedClustering  # noqa: E402

HERE = __name__
ALLOWED = ("skfedclust", HERE)
EXAMPLE_APP = Path(__file__).resolve().parents[1] / "examples" / "flower_app"


# --------------------------------------------------------------------------- #
# A Grid that runs the ClientApp of every node in this process
# --------------------------------------------------------------------------- #
#: Identity keys and trust files of the test federations (removed at exit).
_KEYS = tempfile.TemporaryDirectory(prefix="skfedclust-identities-")


def _authenticated(node_configs):
    """``node_configs`` with an identity key each and a trust file listing them all.

    A config that already sets ``identity-key``, ``trusted-identities`` or
    ``allow-unauthenticated`` is left as it is: nodes refuse to take part
    without an identity and a trust file unless their operator allows it.
    """
    folder = Path(_KEYS.name) / uuid.uuid4().hex
    folder.mkdir()
    keys = [IdentityKey() for _ in node_configs]
    trust = folder / "trusted_identities.txt"
    trust.write_text(
        "".join(f"node-{i} ed25519:{k.public_bytes.hex()}\n" for i, k in enumerate(keys))
    )
    out = []
    for i, (config, key) in enumerate(zip(node_configs, keys)):
        config = dict(config)
        if not {"identity-key", "trusted-identities", "allow-unauthenticated"} & set(config):
            config["identity-key"] = str(key.save(folder / f"node{i}.pem"))
            config["trusted-identities"] = str(trust)
        out.append(config)
    return out


class LocalGrid(Grid):
    """Every node's ClientApp runs here, on its own Context; ``log`` keeps every message.

    ``silent`` nodes never answer; ``tamper(message)`` may alter a message on
    its way to a node. Nodes get an identity key each and a trust file listing
    all of them (see :func:`_authenticated`), unless ``authenticate=False``.
    """

    def __init__(self, client_app, node_configs, *, silent=(), tamper=None, authenticate=True):
        self.app = client_app
        if authenticate:
            node_configs = _authenticated(node_configs)
        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 0, 0
        self.contexts = {
            100 + i: Context(
                run_id=1, node_id=100 + i, node_config=dict(c), state=RecordDict(), run_config={}
            )
            for i, c in enumerate(node_configs)
        }
        self.silent = set(silent)
        self.tamper = tamper
        self.log = []

    def set_run(self, run):
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        raise NotImplementedError

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            if self.tamper is not None:
                self.tamper(message)
            self.log.append(message)
            if message.metadata.dst_node_id in self.silent:
                continue
            reply = self.app(message, self.contexts[message.metadata.dst_node_id])
            self.log.append(reply)
            replies.append(reply)
        return replies


class Memory:
    """Output writer keeping what each node writes, by node name (picklable)."""

    def __init__(self):
        self.written = {}

    def __call__(self, node_config, key, values):
        self.written[(key, node_config["partition-id"])] = np.array(values)
        return "memory"

    def rows(self, key, n):
        return np.concatenate([self.written[(key, i)] for i in range(n)])


class Clients:
    """Loader handing node ``partition-id`` its block (picklable)."""

    def __init__(self, blocks):
        self.blocks = blocks

    def __call__(self, node_config):
        return self.blocks[node_config["partition-id"]]


def _clients(n=4, seed=0):
    X, _ = make_blobs(n_samples=240, centers=4, cluster_std=0.7, random_state=seed)
    return [X[i::n] for i in range(n)]


@functools.lru_cache
def _standing_identities(n_nodes):
    """Identity keys and a trust file of ``n_nodes`` nodes, the same for every fit.

    A test's repeated fits are fits of the same nodes: a node's ledger
    compares the secure sums of different fits by its peers' identities, and
    refuses a sum of an earlier fit over nodes of other identities.
    """
    return tuple(_authenticated([{} for _ in range(n_nodes)]))


def _local_fit(estimator, clients, private_seeds=None, node_config=None, **grid_kwargs):
    memory = Memory()
    app = make_client_app(Clients(clients), save_output=memory, allowed_modules=ALLOWED)
    configs = [
        {"partition-id": i, **keys, **(node_config or {})}
        for i, keys in enumerate(_standing_identities(len(clients)))
    ]
    if private_seeds is not None:
        configs = [{**c, "private-seed": s} for c, s in zip(configs, private_seeds)]
    grid = LocalGrid(app, configs, **grid_kwargs)
    fit_on_flower(estimator, grid, n_nodes=len(clients), timeout=30, allowed_modules=ALLOWED)
    return estimator, memory, grid


def _simulation_identities(tmp_path, n):
    """``node_defaults`` giving the ``n`` nodes of Flower's simulation (whose config is only
    ``partition-id`` and ``num-partitions``) an identity key each and a trust file."""
    keys = [IdentityKey() for _ in range(n)]
    for i, key in enumerate(keys):
        key.save(tmp_path / f"node{i}.pem")
    trust = tmp_path / "trusted_identities.txt"
    trust.write_text(
        "".join(f"node-{i} ed25519:{k.public_bytes.hex()}\n" for i, k in enumerate(keys))
    )
    return {
        "identity-key": str(tmp_path / "node{partition-id}.pem"),
        "trusted-identities": str(trust),
    }


def _assert_same_communication(a, b):
    assert {k: v for k, v in a.items() if k != "per_client"} == {
        k: v for k, v in b.items() if k != "per_client"
    }
    assert a["per_client"].keys() == b["per_client"].keys()
    for key in a["per_client"]:
        np.testing.assert_array_equal(a["per_client"][key], b["per_client"][key])


# --------------------------------------------------------------------------- #
# Codec and sealing
# --------------------------------------------------------------------------- #
def test_codec_round_trip_keeps_types_values_and_ledger_bytes():
    import scipy.sparse as sp

    payload = {
        "centers": np.arange(6.0).reshape(3, 2),
        "sizes": np.array([1, 2, 3], dtype=np.int32),
        0: (np.float64(0.1), np.int64(-3), 1.5, 7, True, None, "tag", b"\x00\x01"),
        (1, "a"): [np.zeros((0, 2)), np.array(["x", "yz"]), float("inf"), np.bool_(True)],
        "sparse": sp.random(4, 5, density=0.3, format="csr", random_state=0),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    }
    for back in (decode(*encode(payload)), from_bytes(to_bytes(payload))):
        assert payload_nbytes(back) == payload_nbytes(payload)
        assert back.keys() == payload.keys()
        np.testing.assert_array_equal(back["centers"], payload["centers"])
        assert back["sizes"].dtype == np.int32
        assert back[0] == payload[0]
        assert [type(v) for v in back[0]] == [type(v) for v in payload[0]]
        assert back[(1, "a")][0].shape == (0, 2) and back[(1, "a")][2] == float("inf")
        assert isinstance(back[(1, "a")][3], np.bool_)
        assert (back["sparse"] != payload["sparse"]).nnz == 0
        np.testing.assert_array_equal(back["fortran"], payload["fortran"])


@pytest.mark.parametrize(
    "payload",
    [np.array([object()]), {"model": object()}, [1, {2, 3}]],
    # Stable ids: every xdist worker must collect the same test names.
    ids=["object-array", "object-in-dict", "set-in-list"],
)
def test_codec_refuses_what_cannot_travel(payload):
    with pytest.raises(CodecError, match="cannot be sent"):
        encode(payload)


def test_codec_refuses_forged_structures():
    skeleton, arrays = encode({"a": np.ones(2)})
    with pytest.raises(CodecError, match="not named"):
        decode(skeleton, arrays + [np.zeros(1)])
    with pytest.raises(CodecError, match="not sent"):
        decode('{"a":3}', arrays)
    with pytest.raises(CodecError, match="unexpected structure"):
        decode('{"o":0}', [])
    blob = to_bytes(np.ones(2))
    with pytest.raises(CodecError):
        from_bytes(blob[:-3])
    forged = blob.replace(b"<f8", b"|O8")
    with pytest.raises(CodecError, match="cannot be sent"):
        from_bytes(forged)


def test_seal_opens_only_for_the_pair_and_the_exchange():
    a, b, server = KeyPair(), KeyPair(), KeyPair()
    key_ab = a.pair_key(b.public_bytes, salt="s", parties=(0, 1))
    assert key_ab == b.pair_key(a.public_bytes, salt="s", parties=(1, 0))
    where = dict(session="s", exchange=3, tag="share", sender=0, recipient=1)
    sealed = seal(key_ab, b"secret share", **where)
    assert open_sealed(key_ab, sealed, **where) == b"secret share"
    assert b"secret share" not in sealed
    # The server holds only public keys: its own pair keys with either party do not open it.
    for guess in (
        server.pair_key(a.public_bytes, salt="s", parties=(0, 1)),
        server.pair_key(b.public_bytes, salt="s", parties=(0, 1)),
    ):
        with pytest.raises(SealError):
            open_sealed(guess, sealed, **where)
    # Nor can it pass the message off as another exchange's, tag's or recipient's.
    for change in ({"exchange": 4}, {"tag": "other"}, {"recipient": 2}, {"sender": 2}):
        with pytest.raises(SealError, match="does not open"):
            open_sealed(key_ab, sealed, **{**where, **change})
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(SealError):
        open_sealed(key_ab, tampered, **where)


def test_nodes_run_only_allow_listed_client_steps():
    from skfedclust.methods._kfed import kfed_local_centers

    assert resolve_step(step_name(kfed_local_centers)) is kfed_local_centers
    with pytest.raises(PermissionError, match="outside the packages"):
        resolve_step("os:system")
    with pytest.raises(PermissionError, match="not a function"):
        resolve_step("skfedclust.methods._kfed:KFed")
    with pytest.raises(PermissionError, match="not a client step"):
        resolve_step("skfedclust.methods._kfed:farthest_point_seeds")
    with pytest.raises(PermissionError, match="does not exist"):
        resolve_step("skfedclust.methods._kfed:no_such_step")

    def local_step(data, inbox, state, party):
        return Reply()

    with pytest.raises(TypeError, match="module-level"):
        step_name(local_step)


# --------------------------------------------------------------------------- #
# Identical to in-process
# --------------------------------------------------------------------------- #
ESTIMATORS = {
    "KFed": lambda: KFed(n_clusters=4, random_state=0),
    "FeCA": lambda: FeCA(n_clusters=4, random_state=1),
    "FeCA-lloyd": lambda: FeCA(n_clusters=4, final_lloyd_step=True, random_state=2),
    "MAvg": lambda: MAvg(n_clusters=4, random_state=3),
    # The coordinator's v1 rounds (the blind default's start is the nodes' draw).
    "FFCM": lambda: FederatedFuzzyCMeans(n_clusters=4, coordinator="sees-totals", random_state=4),
    # v1 on the nodes from an array start: the same rounds as in process.
    "FFCM-blind": lambda: FederatedFuzzyCMeans(
        n_clusters=4, init=np.vstack(_clients())[:4] + 0.1, coordinator="blind", random_state=4
    ),
    "Kumar": lambda: KumarFederatedKMeans(n_clusters=4, random_state=5),
    "GOLD": lambda: GOLDClustering(n_clusters=4, random_state=6),
    # The coordinator's Lloyd (the blind default's own start is the nodes' draw:
    # tests/test_flower_every_method.py compares it with matching private seeds).
    "FederatedKMeans": lambda: FederatedKMeans(
        n_clusters=4, coordinator="sees-totals", random_state=7
    ),
    # A start with a center far from every row: its cluster is empty in the first
    # iteration, and the nodes are asked for the clusters' inertia.
    "FederatedKMeans-empty": lambda: FederatedKMeans(
        n_clusters=5,
        init=np.vstack([np.vstack(_clients())[:4], [[1e3, 1e3]]]),
        coordinator="sees-totals",
        random_state=7,
    ),
    # Lloyd on the nodes: statistics to peers only, sealed; the same start as in
    # process (the k-FED start's seed comes from the nodes' own nonces).
    "FederatedKMeans-blind": lambda: FederatedKMeans(
        n_clusters=4, init=np.vstack(_clients())[:4], coordinator="blind", random_state=7
    ),
    # The coordinator adds, the nodes verify its totals and move the centers.
    "FederatedKMeans-verified": lambda: FederatedKMeans(
        n_clusters=4, init=np.vstack(_clients())[:4], coordinator="verified", random_state=7
    ),
}


#: Centers the coordinator chose (its Lloyd, an array start) run where the
#: operator allows them.
COORDINATOR_CENTERS = {"allow-coordinator-centers": "FederatedKMeans,FederatedFuzzyCMeans"}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_flower_fit_is_the_in_process_fit(name):
    clients = _clients()
    reference = ESTIMATORS[name]().fit(clients)
    config = COORDINATOR_CENTERS if name.startswith(("FederatedKMeans", "FFCM")) else None
    estimator, memory, _ = _local_fit(ESTIMATORS[name](), clients, node_config=config)
    np.testing.assert_array_equal(estimator.cluster_centers_, reference.cluster_centers_)
    _assert_same_communication(estimator.communication_, reference.communication_)
    np.testing.assert_array_equal(memory.rows("labels", 4), reference.labels_)
    # The server learns no labels; the nodes report how many rows they wrote.
    assert not hasattr(estimator, "labels_")
    np.testing.assert_array_equal(estimator.client_outputs_["labels"], [60] * 4)
    assert estimator.n_features_in_ == 2 and estimator.n_clients_ == 4
    for attribute in ("n_iter_", "n_removed_", "inertia_"):
        if hasattr(reference, attribute):
            np.testing.assert_array_equal(
                getattr(estimator, attribute), getattr(reference, attribute)
            )
    np.testing.assert_array_equal(
        estimator.predict(np.vstack(clients)), reference.predict(np.vstack(clients))
    )
    # Records carry more than the ledger counts (.npy headers, structure, public
    # constants, handshake): reported apart, never mixed into communication_.
    assert estimator.transport_["bytes_total"] > estimator.communication_["bytes_total"]


def test_a_sampled_fit_on_flower_draws_its_samples_from_the_nodes_nonces():
    # The samples come from nonces the nodes draw from their own generators: a
    # node's private seed fixes them (as it fixes masks and noise), the server's
    # random_state does not.
    from sklearn.metrics import adjusted_rand_score

    clients = _clients()

    def sampled():
        return FederatedKMeans(n_clusters=4, client_fraction=0.75, random_state=8)

    seeds = [2000 + i for i in range(4)]
    # Sampling runs the coordinator's Lloyd: nodes whose operator allows it.
    a, b = (
        _local_fit(sampled(), clients, private_seeds=seeds, node_config=COORDINATOR_CENTERS)[0]
        for _ in range(2)
    )
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.communication_["rounds"] == b.communication_["rounds"]
    X = np.vstack(clients)
    reference = sampled().fit(clients)
    assert adjusted_rand_score(reference.predict(X), a.predict(X)) > 0.9


def test_ledger_counts_payload_bytes_and_transport_the_records():
    clients = _clients()
    estimator, _, grid = _local_fit(
        KFed(n_clusters=4, random_state=0, compute_inertia=True), clients
    )
    # k-FED: every client uploads k x d float64 centers and its local iteration
    # count (int64), and downloads the k x d global centers; the labels stay on
    # the clients. Then the secure sums of inertia_ (compute_inertia=True).
    from skfedclust.methods._centroid_steps import secure_inertia_communication

    inertia = secure_inertia_communication(4)
    k, d = 4, 2
    assert estimator.communication_["bytes_up"] == 4 * (k * d * 8 + 8) + inertia["bytes_up"]
    assert estimator.communication_["bytes_down"] == 4 * k * d * 8 + inertia["bytes_down"]
    transport = estimator.transport_
    carried = sum(
        sum(record.count_bytes() for record in m.content.values())
        for m in grid.log
        if m.has_content()
    )
    assert transport["bytes_total"] == carried
    # Every array carries its .npy header: the local centers' upload alone is
    # larger than their payload.
    assert transport["by_kind"]["step"]["from_nodes"] > estimator.communication_["bytes_up"]


# --------------------------------------------------------------------------- #
# Peer messages: sealed end to end, relayed by the server
# --------------------------------------------------------------------------- #
def _masks(party, n_clients, d):
    """One mask for every other client, from the party's private generator."""
    return {p: party.rng.normal(size=d) for p in range(n_clients) if p != party.index}


@data_independent
def mask_shares(data, inbox, state, party, *, n_clients):
    """Each client sends every other client a random mask (a share)."""
    masks = _masks(party, n_clients, data.shape[1])
    return Reply(to_peers=masks, keep={"masks": masks})


@summary
def masked_sum(data, inbox, state, party):
    """Send the column sums plus the masks sent minus the masks received."""
    out = data.sum(axis=0) + sum(state["masks"].values())
    out = out - sum(inbox["mask"][sender] for sender in sorted(inbox["mask"]))
    return Reply(send=out, output={"labels": np.zeros(len(data), dtype=np.intp)})


def add_up(received):
    return np.sum(received.list(), axis=0)


class MaskedMean(BaseFederatedClustering):
    """Secure-sum toy protocol: masks travel between clients, only sums reach the server."""

    def __init__(self, *, partition=None, n_jobs=None, random_state=0, verbose=0):
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _run_protocol(self, runtime, random_state):
        runtime.run(mask_shares, tag="mask", n_clients=runtime.n_clients)
        sums = runtime.run(masked_sum, tag="masked sums")
        self.cluster_centers_ = runtime.server(add_up, sums)[None, :] / runtime.client_sizes.sum()
        self.uploads_ = sums.list()


@data_independent
def report_server_tags(data, inbox, state, party):
    """Send which inbox tags the node takes for the server's (sorted, as an int mask)."""
    tags = ["per client", "mask"]
    return Reply(send=np.array([t in inbox.server_tags for t in tags], dtype=np.int64))


class TellsServerTags(MaskedMean):
    """A server message shaped like peer messages ({int: payload}), then peer messages."""

    def _run_protocol(self, runtime, random_state):
        runtime.run(mask_shares, tag="mask", n_clients=runtime.n_clients)
        runtime.broadcast({0: np.zeros(2), 1: np.ones(2)}, tag="per client")
        self.told_ = runtime.run(report_server_tags, tag="tags").list()
        self.cluster_centers_ = np.zeros((1, runtime.n_features))


def test_a_node_knows_the_servers_messages_from_the_relays_events():
    # A node keys a secure sum's statistic on the server's messages it reads: which
    # ones are the server's comes from the relay's events, never from their shape.
    clients = _clients()
    estimator, _, _ = _local_fit(TellsServerTags(), clients)
    assert [list(t) for t in estimator.told_] == [[1, 0]] * 4
    assert [list(t) for t in TellsServerTags().fit(clients).told_] == [[1, 0]] * 4


def _all_bytes(messages):
    """Every byte the server handled: array buffers and config values of every message."""
    chunks = []
    for m in messages:
        if not m.has_content():
            continue
        for record in m.content.array_records.values():
            chunks.extend(array.data for array in record.values())
        for record in m.content.config_records.values():
            chunks.extend(v if isinstance(v, bytes) else str(v).encode() for v in record.values())
    return b"".join(chunks)


def test_peer_messages_are_relayed_sealed_and_the_server_cannot_read_them():
    clients = _clients()
    reference = MaskedMean().fit(clients)
    private_seeds = [1000 + i for i in range(4)]
    estimator, _, grid = _local_fit(MaskedMean(), clients, private_seeds=private_seeds)
    np.testing.assert_allclose(estimator.cluster_centers_, reference.cluster_centers_)
    np.testing.assert_allclose(estimator.cluster_centers_[0], np.vstack(clients).mean(axis=0))
    _assert_same_communication(estimator.communication_, reference.communication_)
    # 4 clients x 3 masks of 2 float64: the ledger counts each share once, as peer bytes.
    assert estimator.communication_["bytes_peer"] == 4 * 3 * 2 * 8
    # On the wire each share travels twice (to the server, then to its recipient),
    # sealed: a header, the nonce and the authentication tag come on top.
    relay = estimator.transport_["by_kind"]["relay"]
    assert relay["from_nodes"] == relay["to_nodes"] > estimator.communication_["bytes_peer"]

    # The node's private seed fixes its masks (a test's knowledge; the server has none).
    parties = [Party(p, None, s, stream=(0,)) for p, s in enumerate(private_seeds)]
    shares = [m for party in parties for m in _masks(party, 4, 2).values()]
    seen = _all_bytes(grid.log)
    for share in shares:
        assert share.tobytes() not in seen
        assert share[:1].tobytes() not in seen
    # What the server relays is ciphertext; with every public key it cannot open it.
    sealed = [
        (m.metadata.dst_node_id, key, value)
        for m in grid.log
        if m.has_content() and m.metadata.message_type.endswith("step")
        for key, value in m.content.config_records["skfedclust"].items()
        if key.startswith("sealed.")
    ]
    assert len(sealed) == 2 * 12  # sender to server, then server to recipient
    controls = [
        json.loads(m.content.config_records["skfedclust"]["control"])
        for m in grid.log
        if m.has_content() and m.metadata.message_type.endswith("hello")
    ]
    public = [bytes.fromhex(c["public_key"]) for c in controls if "public_key" in c]
    assert len(public) == 4
    server = KeyPair()
    for _, _, blob in sealed:
        for key in public:
            guess = server.pair_key(key, salt="x", parties=(0, 1))
            with pytest.raises(SealError):
                open_sealed(guess, blob, session="x", exchange=0, tag="mask", sender=0, recipient=1)


def test_a_tampered_relay_is_detected_by_the_recipient():
    def flip(message):
        if message.metadata.message_type.endswith("step"):
            config = message.content.config_records["skfedclust"]
            for key in list(config.keys()):
                if key.startswith("sealed.") and json.loads(config["control"])["party"] == 2:
                    blob = config[key]
                    config[key] = blob[:-1] + bytes([blob[-1] ^ 1])

    with pytest.raises(
        FlowerNodeError,
        match=r"party 2 \(node 102\) refused.*could not open the sealed message from party",
    ):
        _local_fit(MaskedMean(), _clients(), tamper=flip)


@summary
def split_sum(data, inbox, state, party, *, holders):
    """Split the column sums into additive shares, one per share holder."""
    total = data.sum(axis=0)
    share = party.rng.normal(size=total.shape)
    return Reply(to_peers={holders[0]: share, holders[1]: total - share})


@data_independent
def add_shares(data, inbox, state, party):
    """A share holder (no data, no seed) adds the shares it received."""
    assert data is None and party.seed is None
    return Reply(send=sum(inbox["shares"][sender] for sender in sorted(inbox["shares"])))


class ShareHolders(BaseFederatedClustering):
    """Clients secret-share their sums with two parties that hold no data."""

    def __init__(self, *, partition=None, n_jobs=None, random_state=0, verbose=0):
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _n_parties(self, federation):
        return federation.n_clients + 2

    def _run_protocol(self, runtime, random_state):
        holders = [runtime.n_clients, runtime.n_clients + 1]
        runtime.run(split_sum, tag="shares", holders=holders)
        partial = runtime.run(add_shares, tag="partial sums", clients=holders)
        self.cluster_centers_ = runtime.server(add_up, partial)[None, :]
        return None


def test_parties_without_data_are_nodes_whose_loader_returns_none():
    clients = _clients()
    reference = ShareHolders().fit(clients)
    estimator, _, _ = _local_fit(ShareHolders(), clients + [None, None])
    np.testing.assert_allclose(estimator.cluster_centers_, reference.cluster_centers_)
    np.testing.assert_allclose(estimator.cluster_centers_[0], np.vstack(clients).sum(axis=0))
    _assert_same_communication(estimator.communication_, reference.communication_)
    assert estimator.n_clients_ == 4 and len(estimator.client_nodes_) == 6
    # Without the two share holders, the federation is refused before any step.
    with pytest.raises(ValueError, match="needs 6 parties"):
        _local_fit(ShareHolders(), clients)


# --------------------------------------------------------------------------- #
# Failures named on the server
# --------------------------------------------------------------------------- #
@summary
def fail_on_second(data, inbox, state, party, *, seeds):
    if seeds.index(party.seed) == 1:
        raise ValueError("this client cannot go on")
    return Reply(send=data.sum())


class Scripted(BaseFederatedClustering):
    """Runs one of a few protocols that fail on Flower."""

    def __init__(self, script="fail", *, partition=None, n_jobs=None, random_state=0, verbose=0):
        self.script = script
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _run_protocol(self, runtime, random_state):
        if self.script == "fail":
            runtime.run(fail_on_second, tag="sums", seeds=[int(s) for s in runtime.seeds])
        elif self.script == "read the federation":
            return runtime._federation.client_rows
        return None


def test_a_failing_node_is_named_with_its_step():
    with pytest.raises(
        FlowerNodeError,
        match=r"party 1 \(node 101\) failed in step test_flower:fail_on_second.*"
        r"ValueError: this client cannot go on",
    ) as info:
        _local_fit(Scripted("fail"), _clients())
    assert (info.value.party, info.value.node_id) == (1, 101)


def test_a_silent_node_is_reported_after_the_timeout():
    clients = _clients()
    app = make_client_app(Clients(clients), allowed_modules=ALLOWED)
    grid = LocalGrid(app, [{"partition-id": i} for i in range(4)], silent={103})
    with pytest.raises(FlowerTimeoutError, match=r"node 103 did not answer the handshake"):
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=4, timeout=1)


def test_wrong_replies_are_refused():
    clients = _clients()
    app = make_client_app(Clients(clients), allowed_modules=ALLOWED)

    def tampering_app(message, context):
        reply = app(message, context)
        if message.metadata.message_type.endswith("step") and context.node_id == 102:
            record = reply.content.array_records["skfedclust.arrays"]
            good = record["0"].numpy()
            # Declares float64 centers but carries int32 values.
            record["0"] = Array(
                dtype=str(good.dtype),
                shape=tuple(good.shape),
                stype=record["0"].stype,
                data=Array(good.astype(np.int32)).data,
            )
        return reply

    grid = LocalGrid(tampering_app, [{"partition-id": i} for i in range(4)])
    with pytest.raises(FlowerNodeError, match=r"party 2 \(node 102\).*declares dtype float64"):
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=4, timeout=10)

    def other_party(message, context):
        reply = app(message, context)
        if message.metadata.message_type.endswith("step") and context.node_id == 101:
            config = reply.content.config_records["skfedclust"]
            control = json.loads(config["control"])
            config["control"] = json.dumps({**control, "party": 3})
        return reply

    grid = LocalGrid(other_party, [{"partition-id": i} for i in range(4)])
    with pytest.raises(FlowerNodeError, match=r"party 1 \(node 101\).*speaks as party 3"):
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=4, timeout=10)


def test_what_only_a_simulation_can_do_is_refused_clearly():
    with pytest.raises(NotSupportedOnFlower, match="simulated Federation"):
        _local_fit(Scripted("read the federation"), _clients())


def test_nodes_draw_private_randomness_the_server_cannot_replay():
    clients = _clients()
    first, _, _ = _local_fit(MaskedMean(random_state=0), clients)
    second, _, _ = _local_fit(MaskedMean(random_state=0), clients)
    # Same random_state, same public seeds: yet each node drew fresh masks from
    # its operating system, so every masked upload differs, while the sum
    # (what the protocol computes) is the same.
    for a, b in zip(first.uploads_, second.uploads_):
        assert not np.allclose(a, b)
    np.testing.assert_allclose(first.cluster_centers_, second.cluster_centers_)
    # A node's private-seed (tests only) fixes its draws.
    seeds = [7, 8, 9, 10]
    fixed = [_local_fit(MaskedMean(), clients, private_seeds=seeds)[0] for _ in range(2)]
    for a, b in zip(fixed[0].uploads_, fixed[1].uploads_):
        np.testing.assert_array_equal(a, b)


def test_declared_outputs_are_written_on_the_nodes_and_never_reach_the_server():
    clients = _clients()
    estimator, memory, grid = _local_fit(MaskedMean(), clients)
    np.testing.assert_array_equal(memory.rows("labels", 4), np.zeros(240, dtype=np.intp))
    assert not hasattr(estimator, "labels_")
    assert estimator.client_outputs_["labels"].tolist() == [60] * 4


def test_estimators_without_a_protocol_and_misconfigured_nodes_are_refused():
    class Legacy(BaseFederatedClustering):
        def __init__(self, *, partition=None, n_jobs=None, random_state=0, verbose=0):
            self.partition, self.n_jobs = partition, n_jobs
            self.random_state, self.verbose = random_state, verbose

    grid = LocalGrid(make_client_app(Clients(_clients())), [{"partition-id": i} for i in range(4)])
    with pytest.raises(NotSupportedOnFlower, match="Legacy has no protocol on the runtime"):
        fit_on_flower(Legacy(), grid, n_nodes=4)
    # A node without data (no data-path) where the method has no party for it.
    app = make_client_app(FileLoader("{data-path}"))
    grid = LocalGrid(app, [{"partition-id": 0}])
    with pytest.raises(ValueError, match="no node holds data"):
        fit_on_flower(KFed(n_clusters=2), grid, n_nodes=1)
    blocks = _clients()
    blocks[3] = blocks[3][:, :1]
    grid = LocalGrid(make_client_app(Clients(blocks)), [{"partition-id": i} for i in range(4)])
    with pytest.raises(ValueError, match="share the same features"):
        fit_on_flower(KFed(n_clusters=2), grid, n_nodes=4)


def test_nodes_without_a_party_are_left_out_and_outputs_prefixed_on_request():
    # One federation for several methods: two share-holding nodes without data.
    clients = _clients()
    memory = Memory()
    blocks = Clients(clients + [None] * 2)
    app = make_client_app(blocks, save_output=memory, allowed_modules=ALLOWED)
    grid = LocalGrid(app, [{"partition-id": i} for i in range(6)])
    with pytest.raises(ValueError, match=r"nodes \[104, 105\] hold no data.*'leave out'"):
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=6, allowed_modules=ALLOWED)
    with pytest.raises(ValueError, match="idle_nodes must be"):
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=6, idle_nodes="ignore")
    estimator = fit_on_flower(
        KFed(n_clusters=4, random_state=0),
        grid,
        n_nodes=6,
        allowed_modules=ALLOWED,
        idle_nodes="leave out",
        output_prefix="kfed-",
    )
    reference = KFed(n_clusters=4, random_state=0).fit(clients)
    assert estimator.client_nodes_.tolist() == [100, 101, 102, 103]
    _assert_same_communication(estimator.communication_, reference.communication_)
    np.testing.assert_array_equal(memory.rows("kfed-labels", 4), reference.labels_)
    assert {key for key, _ in memory.written} == {"kfed-labels"}


def test_file_loader_and_writer_follow_the_node_config(tmp_path):
    X = np.arange(12.0).reshape(6, 2)
    np.save(tmp_path / "a.npy", X)
    np.savetxt(tmp_path / "b.csv", X, delimiter=",")
    np.testing.assert_array_equal(FileLoader()({"data-path": str(tmp_path / "a.npy")}), X)
    pattern = FileLoader(str(tmp_path / "{name}.csv"))
    np.testing.assert_array_equal(pattern({"name": "b"}), X)
    assert FileLoader()({}) is None
    labels = np.array([0, 1, 1, 0, 2, 2])
    assert FileWriter()({}, "labels", labels) is None
    where = FileWriter()({"labels-path": str(tmp_path / "out" / "l.csv")}, "labels", labels)
    np.testing.assert_array_equal(np.loadtxt(where, dtype=int), labels)
    where = FileWriter(str(tmp_path / "{key}_{partition-id}.npy"))(
        {"partition-id": 3}, "labels", labels
    )
    assert where.endswith("labels_3.npy")
    np.testing.assert_array_equal(np.load(where), labels)


# --------------------------------------------------------------------------- #
# Flower's simulation runtime (Ray)
# --------------------------------------------------------------------------- #
#: Each fit under Flower's simulation runtime starts Ray and its worker processes: 28 to
#: 40 s a test on two busy cores, over half a minute of the README's test command on two
#: workers. The node code they run is the in-process Grid's, which the tests above check
#: fit by fit; what only these add (Ray's processes, closures sent by value, node
#: configs) runs with the deployment tests, in CI's step of its own.
RAY_SIMULATION = pytest.mark.deployment


@RAY_SIMULATION
def test_simulation_runtime_matches_in_process_and_names_a_failing_node(tmp_path):
    from flwr.simulation import run_simulation

    clients = _clients()
    for i, block in enumerate(clients):  # the fifth node's file is missing
        np.save(tmp_path / f"client_{i}.npy", block)
    # FFCM with the coordinator's rounds (its blind default starts from the nodes'
    # own draws), which these nodes' operators allow.
    client_app = make_client_app(
        FileLoader(str(tmp_path / "client_{partition-id}.npy")),
        save_output=FileWriter(str(tmp_path / "{key}_{partition-id}.npy")),
        node_defaults={
            **_simulation_identities(tmp_path, 5),
            "allow-coordinator-centers": "FederatedFuzzyCMeans",
        },
    )
    estimators = [ESTIMATORS[name]() for name in ("KFed", "FeCA-lloyd", "FFCM")]
    results = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context):
        try:
            # Timeouts are upper bounds: Ray's nodes start slowly on a busy machine.
            fit_on_flower(KFed(n_clusters=4), grid, n_nodes=5, timeout=180)
        except FlowerNodeError as exc:
            results["error"] = exc
        good = [n for n in grid.get_node_ids() if n != results["error"].node_id]
        for estimator in estimators:
            fit_on_flower(estimator, grid, node_ids=good, timeout=180)
            labels = [np.load(tmp_path / f"labels_{i}.npy") for i in range(4)]
            results[type(estimator).__name__, len(results)] = np.concatenate(labels)

    run_simulation(
        server_app,
        client_app,
        num_supernodes=5,
        backend_config={
            "client_resources": {"num_cpus": 1},
            "init_args": {"num_cpus": 2, "include_dashboard": False},
        },
    )
    assert "handshake" in str(results["error"])
    assert "FileNotFoundError" in str(results["error"]) and "client_4.npy" in str(results["error"])
    labels = [v for k, v in results.items() if k != "error"]
    assert len(labels) == len(estimators)
    for estimator, rows in zip(estimators, labels):
        reference = type(estimator)(**estimator.get_params()).fit(clients)
        np.testing.assert_array_equal(estimator.cluster_centers_, reference.cluster_centers_)
        _assert_same_communication(estimator.communication_, reference.communication_)
        np.testing.assert_array_equal(rows, reference.labels_)


# --------------------------------------------------------------------------- #
# FedSC: the received coefficients, private noise drawn on the nodes
# --------------------------------------------------------------------------- #
def _fedsc(**kw):
    from skfedclust import FedSpectralClustering

    return FedSpectralClustering(4, n_rounds=3, kmeans_n_init=5, random_state=0, **kw)


def _differ(a, b):
    return a.shape != b.shape or not np.allclose(a, b)


FEDSC_NOISE = {
    "factors": dict(privacy="factors", noise_ratio=0.1),
    # A fixed dictionary size: the energy rule on perturbed rows would make the bytes random.
    "data": dict(privacy="data", epsilon=0.5, delta=1e-5, clip_norm=20.0, n_components=8),
}


def test_fedsc_on_flower_is_the_in_process_fit_and_its_noise_is_the_nodes():
    clients = _clients()
    reference = _fedsc().fit(clients)
    estimator, memory, _ = _local_fit(_fedsc(), clients)
    # The server stacks what it received client by client: the in-process fit exactly.
    np.testing.assert_array_equal(estimator.coef_, reference.coef_)
    np.testing.assert_array_equal(estimator.stacked_labels_, reference.labels_)
    np.testing.assert_array_equal(estimator.objective_history_, reference.objective_history_)
    _assert_same_communication(estimator.communication_, reference.communication_)
    np.testing.assert_array_equal(memory.rows("labels", 4), reference.labels_)
    assert not hasattr(estimator, "labels_")
    X = np.vstack(clients)
    np.testing.assert_array_equal(estimator.predict(X), reference.predict(X))
    for kw in FEDSC_NOISE.values():
        reference = _fedsc(**kw).fit(clients)
        first, _, _ = _local_fit(_fedsc(**kw), clients)
        second, _, _ = _local_fit(_fedsc(**kw), clients)
        # Same random_state, yet every node drew its noise from its operating
        # system: the coefficients the server received differ; the bytes do not.
        assert _differ(first.coef_, second.coef_)
        for fit in (first, second):
            assert _differ(fit.coef_, reference.coef_)
            _assert_same_communication(fit.communication_, reference.communication_)
            assert fit.noise_scales_.keys() == reference.noise_scales_.keys()
        # A node's private-seed (tests only) fixes its noise.
        seeds = [11, 12, 13, 14]
        fixed = [_local_fit(_fedsc(**kw), clients, private_seeds=seeds)[0] for _ in range(2)]
        np.testing.assert_array_equal(fixed[0].coef_, fixed[1].coef_)


def test_private_federated_kmeans_on_flower_draws_its_noise_on_the_nodes():
    clients = _clients()

    def dp():
        return FederatedKMeans(
            n_clusters=4,
            init="sphere-packing",
            privacy="dp",
            epsilon=2.0,
            bounds=(-20.0, 20.0),
            random_state=3,
        )

    reference = dp().fit(clients)
    first, memory, _ = _local_fit(dp(), clients)
    second, _, _ = _local_fit(dp(), clients)
    # Same random_state, same public start; each node drew its noise from its
    # operating system: other centers, the same budget and bytes.
    assert _differ(first.cluster_centers_, second.cluster_centers_)
    for fit in (first, second):
        assert fit.privacy_spent_ == reference.privacy_spent_
        assert fit.noise_scales_ == reference.noise_scales_
        _assert_same_communication(fit.communication_, reference.communication_)
    # Each node labels its own rows by the final centers.
    np.testing.assert_array_equal(memory.rows("labels", 4), first.predict(np.vstack(clients)))
    # A node's private-seed (tests only) fixes its noise.
    seeds = [21, 22, 23, 24]
    fixed = [_local_fit(dp(), clients, private_seeds=seeds)[0] for _ in range(2)]
    np.testing.assert_array_equal(fixed[0].cluster_centers_, fixed[1].cluster_centers_)


@RAY_SIMULATION
def test_fedsc_under_the_simulation_runtime(tmp_path):
    from flwr.simulation import run_simulation

    clients = _clients()
    for i, block in enumerate(clients):
        np.save(tmp_path / f"client_{i}.npy", block)
    client_app = make_client_app(
        FileLoader(str(tmp_path / "client_{partition-id}.npy")),
        save_output=FileWriter(str(tmp_path / "{key}_{partition-id}.npy")),
        node_defaults=_simulation_identities(tmp_path, 4),
    )
    estimators = [_fedsc(), _fedsc(**FEDSC_NOISE["factors"]), _fedsc(**FEDSC_NOISE["factors"])]
    labels = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context):
        for estimator in estimators:
            fit_on_flower(estimator, grid, n_nodes=4, timeout=120)
            labels.append(np.concatenate([np.load(tmp_path / f"labels_{i}.npy") for i in range(4)]))

    run_simulation(
        server_app,
        client_app,
        num_supernodes=4,
        backend_config={
            "client_resources": {"num_cpus": 1},
            "init_args": {"num_cpus": 2, "include_dashboard": False},
        },
    )
    assert len(labels) == 3
    # Without noise: the in-process labels, written on the nodes, and the same bytes.
    reference = _fedsc().fit(clients)
    np.testing.assert_array_equal(labels[0], reference.labels_)
    np.testing.assert_array_equal(estimators[0].coef_, reference.coef_)
    _assert_same_communication(estimators[0].communication_, reference.communication_)
    # With noise: the same bytes, but each fit's nodes drew their own noise.
    noisy = _fedsc(**FEDSC_NOISE["factors"]).fit(clients)
    for estimator, rows in zip(estimators[1:], labels[1:]):
        _assert_same_communication(estimator.communication_, noisy.communication_)
        assert _differ(estimator.coef_, noisy.coef_)
        assert rows.shape == (240,)
    assert _differ(estimators[1].coef_, estimators[2].coef_)


# --------------------------------------------------------------------------- #
# Vertical and hybrid federations: DC-Clustering on a grid of nodes
# --------------------------------------------------------------------------- #
class GridLayout:
    """Node ``partition-id`` as party (i, j) of a row-group-major grid (picklable)."""

    def __init__(self, blocks):
        self.blocks = blocks

    def __call__(self, node_config):
        i = node_config["partition-id"]
        group, block = divmod(i, len(self.blocks))
        return group, ",".join(str(c) for c in self.blocks[block])


def _hybrid_grid(seed=0):
    """Two row groups x two feature blocks (features 0-2 and 3-4), as a grid and node blocks."""
    X, _ = make_blobs(200, n_features=5, centers=3, random_state=seed)
    grid = [[X[:90, :3], X[:90, 3:]], [X[90:, :3], X[90:, 3:]]]
    return grid, [block for group in grid for block in group], [[0, 1, 2], [3, 4]]


#: The node-config field a node needs to run DC, whose messages are its rows
#: through the party's private map.
DC_NODE = {"allow-row-release": "DCClustering"}


def _private_runtime(entropy):
    """In-process runtimes whose parties draw from ``entropy``, as nodes with that private-seed."""
    from skfedclust.federation import InProcessRuntime

    def factory(federation, **kwargs):
        return InProcessRuntime(federation, **{**kwargs, "private_entropy": entropy})

    return factory


@pytest.mark.parametrize("clusterer", ["kmeans", "spectral"])
def test_dc_on_a_hybrid_grid_of_nodes_is_the_in_process_fit(clusterer):
    from skfedclust import DCClustering
    from skfedclust.federation import use_runtime

    grid, blocks, columns = _hybrid_grid()
    params = dict(n_clusters=3, clusterer=clusterer, random_state=0)
    # Every node's private-seed is 5, and so is the reference's private entropy:
    # the parties draw the same anchors, so the fits agree exactly.
    with use_runtime(_private_runtime(5)):
        reference = DCClustering(**params).fit(grid)
    memory = Memory()
    app = make_client_app(Clients(blocks), save_output=memory, allowed_modules=ALLOWED)
    # DC sends every row through the party's private map: the nodes' operators
    # allow it by name.
    configs = [
        {**DC_NODE, "partition-id": i, "private-seed": 5, "row-group": i // 2, "columns": "0,1,2"}
        if i % 2 == 0
        else {
            **DC_NODE,
            "partition-id": i,
            "private-seed": 5,
            "row-group": i // 2,
            "columns": "3,4",
        }
        for i in range(4)
    ]
    estimator = fit_on_flower(
        DCClustering(**params), LocalGrid(app, configs), n_nodes=4, allowed_modules=ALLOWED
    )
    assert estimator.row_groups_ == [[0, 1], [2, 3]]
    assert [b.tolist() for b in estimator.feature_blocks_] == columns
    assert estimator.n_features_in_ == 5
    _assert_same_communication(estimator.communication_, reference.communication_)
    np.testing.assert_allclose(estimator.cluster_centers_, reference.cluster_centers_, atol=1e-12)
    np.testing.assert_allclose(
        estimator.collaborative_representation_,
        reference.collaborative_representation_,
        atol=1e-12,
    )
    # The first party of each row group writes its row group's labels.
    np.testing.assert_array_equal(estimator.client_outputs_["labels"], [90, 0, 110, 0])
    labels = np.concatenate([memory.written[("labels", i)] for i in (0, 2)])
    np.testing.assert_array_equal(labels, reference.labels_)
    assert not hasattr(estimator, "labels_")
    # The nodes keep nothing after the fit: predict refuses, naming why.
    with pytest.raises(RuntimeError, match="nodes keep nothing after the fit"):
        estimator.predict(np.hstack(grid[0]))


def test_dc_predicts_the_nodes_new_rows_with_the_parties_of_the_fit():
    from skfedclust import DCClustering
    from skfedclust.federation import use_runtime
    from skfedclust.flower import predict_on_flower

    grid, blocks, _ = _hybrid_grid()
    new_grid, new_blocks, _ = _hybrid_grid(seed=1)
    with use_runtime(_private_runtime(5)):
        reference = DCClustering(n_clusters=3, random_state=0).fit(grid)
    memory = Memory()
    app = make_client_app(
        Clients(blocks),
        save_output=memory,
        allowed_modules=ALLOWED,
        load_new_data=Clients(new_blocks),
    )
    configs = [
        {**DC_NODE, "partition-id": i, "private-seed": 5, "row-group": i // 2, "columns": cols}
        for i, cols in enumerate(["0,1,2", "3,4", "0,1,2", "3,4"])
    ]
    flower_grid = LocalGrid(app, configs)
    estimator = fit_on_flower(
        DCClustering(n_clusters=3, random_state=0),
        flower_grid,
        n_nodes=4,
        allowed_modules=ALLOWED,
        keep_for_predict=True,
    )
    assert estimator.flower_session_.open
    result = predict_on_flower(estimator, flower_grid, keep_for_predict=True)
    # Each row group's first party writes the labels of its new rows: those the
    # in-process model, whose parties hold the same private maps, predicts.
    for i in range(2):
        expected = reference.predict(np.hstack(new_grid[i]), row_group=i)
        np.testing.assert_array_equal(memory.written[("predicted-labels", 2 * i)], expected)
        np.testing.assert_array_equal(result["labels"][2 * i], expected)
    np.testing.assert_array_equal(result["written"]["predicted-labels"], [90, 0, 110, 0])
    assert result["communication"]["bytes_up"] > 0
    # The training labels written at the fit are left as they were.
    np.testing.assert_array_equal(memory.written[("labels", 0)], reference.labels_[:90])
    # A second run; then, without keep_for_predict, the nodes drop their state.
    predict_on_flower(estimator, flower_grid)
    assert not estimator.flower_session_.open
    with pytest.raises(RuntimeError, match="keep_for_predict"):
        predict_on_flower(estimator, flower_grid)
    for context in flower_grid.contexts.values():
        assert not any(k.startswith("skfedclust.") for k in context.state.config_records.keys())


def test_predict_on_flower_is_for_the_estimators_whose_parties_keep_state():
    from skfedclust.flower import predict_on_flower

    estimator, _, grid = _local_fit(KFed(n_clusters=4, random_state=0), _clients())
    with pytest.raises(NotSupportedOnFlower, match="estimator.predict"):
        predict_on_flower(estimator, grid)
    from skfedclust import DCClustering

    fitted, _, grid = _local_fit(
        DCClustering(n_clusters=4, random_state=0), _clients(), node_config=DC_NODE
    )
    with pytest.raises(RuntimeError, match="keep_for_predict=True"):
        predict_on_flower(fitted, grid)
    # A model fitted on Flower holds no parties: it pickles without any session.
    import pickle

    assert fitted.session_ is None
    loaded = pickle.loads(pickle.dumps(fitted))
    assert loaded.session_ is None
    np.testing.assert_array_equal(loaded.cluster_centers_, fitted.cluster_centers_)
    with pytest.raises(RuntimeError, match="deployed federation"):
        loaded.predict(np.vstack(_clients()))


def test_layouts_the_nodes_declare_are_checked():
    from skfedclust import DCClustering

    _, blocks, _ = _hybrid_grid()
    base = [{"partition-id": i, "row-group": i // 2} for i in range(4)]
    cols = ["0,1,2", "3,4", "0,1,2", "3,4"]

    def fit(estimator, configs, data=blocks):
        app = make_client_app(Clients(data), allowed_modules=ALLOWED)
        return fit_on_flower(estimator, LocalGrid(app, configs), n_nodes=4, allowed_modules=ALLOWED)

    good = [{**c, "columns": v} for c, v in zip(base, cols)]
    with pytest.raises(ValueError, match="KFed supports horizontal federations only"):
        fit(KFed(n_clusters=3), good)
    partial = [dict(c) for c in good]
    del partial[3]["row-group"], partial[3]["columns"]
    with pytest.raises(ValueError, match=r"nodes \[103\] declare no row group"):
        fit(DCClustering(3), partial)
    one_field = [dict(c) for c in good]
    del one_field[1]["columns"]
    with pytest.raises(FlowerNodeError, match="sets only one of 'row-group' and 'columns'"):
        fit(DCClustering(3), one_field)
    wrong_width = [{**c, "columns": "0,1"} if i == 0 else c for i, c in enumerate(good)]
    with pytest.raises(FlowerNodeError, match="columns names 2 features but the node's data has 3"):
        fit(DCClustering(3), wrong_width)
    overlap = [{**c, "columns": "2,3"} if i == 3 else c for i, c in enumerate(good)]
    with pytest.raises(ValueError, match="row group 1 hold features .* exactly once"):
        fit(DCClustering(3), overlap)
    ragged = list(blocks)
    ragged[1] = ragged[1][:-1]
    with pytest.raises(ValueError, match=r"row group 0 must hold the same samples.*\[90, 89\]"):
        fit(DCClustering(3), good, data=ragged)


@RAY_SIMULATION
def test_dc_on_a_hybrid_grid_under_the_simulation_runtime(tmp_path):
    from flwr.simulation import run_simulation
    from sklearn.metrics import adjusted_rand_score

    from skfedclust import DCClustering

    grid, blocks, columns = _hybrid_grid(1)
    client_app = make_client_app(
        Clients(blocks),
        save_output=FileWriter(str(tmp_path / "{key}_{partition-id}.npy")),
        layout=GridLayout(columns),
        node_defaults={**_simulation_identities(tmp_path, len(blocks)), **DC_NODE},
    )
    estimator = DCClustering(n_clusters=3, random_state=0)
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context):
        # Ray's simulated nodes answer their first message slowly on a loaded machine.
        fit_on_flower(estimator, grid, n_nodes=4, timeout=300)

    run_simulation(
        server_app,
        client_app,
        num_supernodes=4,
        backend_config={
            "client_resources": {"num_cpus": 1},
            "init_args": {"num_cpus": 2, "include_dashboard": False},
        },
    )
    reference = DCClustering(n_clusters=3, random_state=0).fit(grid)
    _assert_same_communication(estimator.communication_, reference.communication_)
    assert not (tmp_path / "labels_1.npy").exists() and not (tmp_path / "labels_3.npy").exists()
    labels = np.concatenate([np.load(tmp_path / f"labels_{i}.npy") for i in (0, 2)])
    # Each node drew its private randomness (the anchors) from its operating
    # system: the same clustering as in-process, up to the names of the clusters.
    assert adjusted_rand_score(labels, reference.labels_) == 1.0
    assert adjusted_rand_score(estimator.analyst_labels_, reference.labels_) == 1.0


# --------------------------------------------------------------------------- #
# A real deployment: SuperLink, three SuperNodes, flwr run
# --------------------------------------------------------------------------- #
def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _wait_for_port(port, process, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the SuperLink did not listen on port {port} within {timeout} s")


def _stop(processes):
    """Stop the processes this test started, and the processes they started, by pid."""
    import psutil

    tree = []
    for p in processes:
        try:
            tree.extend(psutil.Process(p.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    for p in processes:
        if p.poll() is None:
            p.terminate()
    for child in tree:
        try:
            child.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=10)
    for child in alive:
        child.kill()
    for p in processes:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


FLWR_TOOLS = pytest.mark.skipif(
    shutil.which("flower-superlink", path=str(Path(sys.executable).parent)) is None,
    reason="Flower's command-line tools are not installed next to this Python",
)
#: Real processes (SuperLink, SuperNodes, ``flwr run``): CI runs these in a step of
#: their own (``pytest -m deployment``), not in the README's test command.
DEPLOYMENT = pytest.mark.deployment

#: The connection block of the guide and of examples/flower_app/RUNNING.md.
GUIDE_CONNECTION = '[superlink.local-deployment]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'


def _demo_blocks(n_nodes):
    sys.path.insert(0, str(EXAMPLE_APP))
    try:
        from skfedclust_app.demo import demo_share
    finally:
        sys.path.remove(str(EXAMPLE_APP))
    return [demo_share(i, n_nodes) for i in range(n_nodes)]


def _demo_reference(n_nodes, **params):
    blocks = _demo_blocks(n_nodes)
    return blocks, KFed(n_clusters=3, random_state=0, **params).fit(blocks)


def _flwr_env(tmp_path):
    bin_dir = Path(sys.executable).parent
    home = tmp_path / "flwr-home"
    home.mkdir()
    return home, {
        **os.environ,
        "FLWR_HOME": str(home),
        "HOME": str(tmp_path / "home"),
        # The nodes' default privacy ledgers: in the test's directory, not the user's.
        "SKFEDCLUST_STATE_DIR": str(tmp_path / "state"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        # The settings the guide recommends for short rounds.
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    }


def _fail_with_logs(message, run, logs):
    tails = "\n".join(f"--- {p.name}\n" + p.read_text()[-1500:] for p in logs if p.exists())
    pytest.fail(f"{message}:\n{run.stdout[-2500:]}{run.stderr[-2500:]}\n{tails}")


class _Deployment:
    """Flower's command-line tools in a home of the test's own: ``flwr`` commands, and
    processes started as RUNNING.md says (a log each)."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.bin_dir = Path(sys.executable).parent
        self.home, self.env = _flwr_env(tmp_path)
        # The nodes' step workers listen on Unix sockets under TMPDIR: a short path
        # of the test's own (a socket's path holds at most 108 bytes).
        self.tmpdir = tempfile.mkdtemp(prefix="fd", dir="/tmp")
        self.env["TMPDIR"] = self.tmpdir
        self.processes, self.logs = [], []

    def stop(self):
        """Stop what the test started, and the nodes' step workers (their own sessions)."""
        import psutil

        _stop(self.processes)
        for process in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(process.info["cmdline"] or [])
            if "skfedclust.flower._step_worker" in cmdline and self.tmpdir in cmdline:
                process.kill()
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def start(self, name, args):
        log = self.tmp_path / f"{name}.log"
        self.logs.append(log)
        with open(log, "w") as out:
            self.processes.append(
                subprocess.Popen(
                    [str(self.bin_dir / args[0]), *args[1:]],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=EXAMPLE_APP,
                )
            )
        return self.processes[-1]

    def flwr(self, *args, timeout):
        return subprocess.run(
            [str(self.bin_dir / "flwr"), *args],
            env=self.env,
            cwd=EXAMPLE_APP,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture
def local_deployment(tmp_path):
    """A SuperLink on a free port and its connection ``local-deployment`` in flwr's config.

    Whatever the test starts with ``start`` is stopped at the end, with the
    processes it started.
    """
    deployment = _Deployment(tmp_path)
    (deployment.port,) = _free_ports(1)
    # As the guide says: 'flwr config list' writes flwr's default config (with its
    # own 'local' connection) on a fresh machine; the guide's block is appended.
    assert not (deployment.home / "config.toml").exists()
    listed = deployment.flwr("config", "list", timeout=60)
    assert listed.returncode == 0 and (deployment.home / "config.toml").exists(), listed.stderr
    with open(deployment.home / "config.toml", "a") as config:
        config.write("\n" + GUIDE_CONNECTION.format(port=deployment.port))
    try:
        superlink = deployment.start(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--port",
                str(deployment.port),
                "--disable-runtime-dependency-installation",
            ],
        )
        _wait_for_port(deployment.port, superlink)
        yield deployment
    finally:
        deployment.stop()


#: One ``flwr run`` fits every method of the example app. Each exchange costs
#: several seconds on a deployment (a SuperNode polls every 3 s when idle and
#: starts a process per message): the iterative methods run few rounds, and
#: the secure sums are those every method shares (its inertia's, OmniFC's
#: offset), about 80 exchanges in all. OmniFC with one segment and two
#: colluders decodes from 5 parties: the three organisations and two
#: share-holding nodes without data. GOLD keeps its local CPL updates (no
#: exchanges): cut short, a micro-centroid can still sit on a row, which the
#: nodes' refuse-raw-rows policy refuses. FederatedKMeans and FedSC run their
#: secure sums (the nodes' default policy sends a statistic made to be added
#: only inside one); FederatedKMeans two iterations, FFCM two rounds, both run
#: by the nodes (their default: the nodes refuse the coordinator's centers).
DEPLOYMENT_PARAMS = {
    "ffcm": {"n_rounds": 2},
    "kumar": {"n_rounds": 2},
    "gold": {"standardize": False},
    "fedsc": {"n_rounds": 2, "n_components": 3},
    "omnifc": {"n_parties": 5, "n_segments": 1, "n_colluders": 2},
    "fedkmeans": {"max_iter": 2},
    "fedkmeans-blind": {"max_iter": 2},
}


def test_running_md_runs_the_deployment_tests_parameters():
    """RUNNING.md's ``flwr run`` command fits with the parameters the deployment test checks."""
    import shlex

    text = (EXAMPLE_APP / "RUNNING.md").read_text()
    (command,) = [line for line in text.splitlines() if "method='all' n-nodes=5 params=" in line]
    config = shlex.split(shlex.split(command)[-1])
    params = dict(item.split("=", 1) for item in config)["params"]
    assert json.loads(params) == DEPLOYMENT_PARAMS


@DEPLOYMENT
@FLWR_TOOLS
def test_local_deployment_fits_every_method_with_one_flwr_run(
    tmp_path, local_deployment, monkeypatch
):
    """The commands of RUNNING.md: a SuperLink, three organisations and two share
    holders as SuperNodes, one ``flwr run`` fitting every method."""
    import shlex

    import joblib

    from skfedclust.federation import use_runtime

    sys.path.insert(0, str(EXAMPLE_APP))
    try:
        from skfedclust_app.server_app import make_estimators
    finally:
        sys.path.remove(str(EXAMPLE_APP))
    printed = subprocess.run(
        [sys.executable, "prepare_data.py", str(tmp_path / "data"), "3"]
        + [str(local_deployment.port), "2"],
        cwd=EXAMPLE_APP,
        env=local_deployment.env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert len(printed) == 5
    supernodes = []
    for i, (command, port) in enumerate(zip(printed, _free_ports(5))):
        args = shlex.split(command)
        # The printed ports (9101...) may be taken on a shared machine.
        args[args.index("--port") + 1] = str(port)
        # A fixed private seed (tests only) gives DC's parties the private
        # anchors of the in-process reference below.
        args[args.index("--node-config") + 1] += " private-seed=5"
        supernodes.append(local_deployment.start(f"supernode_{i}", args))
    config = {"method": "all", "n-clusters": 3, "random-state": 0}
    params = json.dumps(DEPLOYMENT_PARAMS)
    # RUNNING.md's all-methods command, its results written in the test's folder.
    from test_running_guide import GUIDE, guide_blocks

    (block,) = [b for b in guide_blocks(GUIDE.read_text()) if b.id == "run-all"]
    (command,) = [line for line in block.text.splitlines() if line.startswith("flwr run ")]
    args = shlex.split(command)[1:]
    assert args[-2] == "--run-config", args
    args[-1] += f" output-dir='{tmp_path / 'out'}'"
    started = time.monotonic()
    run = local_deployment.flwr(*args, timeout=2400)
    seconds = time.monotonic() - started
    # Each node ran its messages in its long-lived step worker (prepare_data sets
    # step-worker=true): one per SuperNode, which ends with it.
    monkeypatch.setattr(tempfile, "tempdir", local_deployment.tmpdir)
    workers = step_worker.list_workers()
    assert len(workers) == 5 and all(w.running for w in workers), (workers, run.stdout[-2000:])
    assert {w.node_pid for w in workers} == {node.pid for node in supernodes}
    data, out = tmp_path / "data", tmp_path / "out"
    blocks = _demo_blocks(3)
    sizes = [len(b) for b in blocks]
    checked = []
    for method, reference in make_estimators({**config, "params": params}):
        if not (out / f"{method}-summary.json").exists():
            _fail_with_logs(
                f"flwr run did not finish {method} ({seconds:.0f} s)", run, local_deployment.logs
            )
        with use_runtime(_private_runtime(5)):
            reference.fit(blocks)
        summary = json.loads((out / f"{method}-summary.json").read_text())
        assert summary["method"] == type(reference).__name__
        if hasattr(reference, "cluster_centers_"):
            np.testing.assert_array_equal(summary["cluster_centers"], reference.cluster_centers_)
        else:
            assert summary["cluster_centers"] is None
        # What the server holds after the fit (FedSC's coefficients, the
        # iteration counts), as the in-process fit has it.
        fitted = joblib.load(out / f"{method}-estimator.joblib")
        for attribute in ("cluster_centers_", "coef_", "n_iter_", "inertia_"):
            if hasattr(reference, attribute):
                np.testing.assert_array_equal(
                    getattr(fitted, attribute),
                    getattr(reference, attribute),
                    err_msg=f"{method}: {attribute}",
                )
        _assert_same_communication(
            {**summary["communication"], "per_client": {}},
            {**reference.communication_, "per_client": {}},
        )
        for key, values in reference.communication_["per_client"].items():
            np.testing.assert_array_equal(summary["communication"]["per_client"][key], values)
        labels = [np.load(data / f"{method}-org_{i}_labels.npy") for i in range(3)]
        np.testing.assert_array_equal(np.concatenate(labels), reference.labels_)
        n_parties = 5 if method == "omnifc" else 3
        written = summary["rows_written_by_each_node"][f"{method}-labels"]
        assert written == sizes + [0] * (n_parties - 3)
        assert len(summary["nodes"]) == n_parties
        # Every node was authenticated and guarded by the policy prepare_data gave it.
        assert all(identity is not None for identity in summary["identities"])
        for policy in summary["policies"]:
            assert policy["trusted_identities"] and not policy["allow_unauthenticated"]
            assert policy["min_sum_participants"] == 3 and policy["refuse_raw_rows"] is True
            assert policy["allow_clear_sums"] is False
            assert policy["min_rows_per_vector"] == 2 and len(policy["allowed_methods"]) == 10
        checked.append(method)
    assert len(checked) == 11
    # A SuperNode stopped, its worker ends and removes its folder.
    for node in supernodes:
        node.terminate()
    workers_directory = Path(local_deployment.tmpdir) / f"skfedclust-{os.getuid()}"
    deadline = time.monotonic() + 60
    # A worker unlists itself a moment before its folder is gone: wait for both.
    while (step_worker.list_workers() or any(workers_directory.iterdir())) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert step_worker.list_workers() == []
    left = {f.name: sorted(p.name for p in f.iterdir()) for f in workers_directory.iterdir()}
    assert not left, f"step-worker folders left behind: {left}"
    # One method's run leaves the plain labels-path alone; nothing of the run
    # lands in the app folder, which the next run would bundle.
    assert not (data / "org_0_labels.npy").exists()
    assert not (EXAMPLE_APP / "out").exists() and not (EXAMPLE_APP / "data").exists()


def _stop_local_superlink(port):
    """Stop the SuperLink flwr started in the background for this test (its port is ours)."""
    import psutil

    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any("flower-superlink" in part for part in cmdline) and str(port) in cmdline:
            children = process.children(recursive=True)
            for p in [process, *children]:
                try:
                    p.terminate()
                except psutil.NoSuchProcess:
                    pass
            _, alive = psutil.wait_procs([process, *children], timeout=10)
            for p in alive:
                p.kill()


def test_the_example_app_checks_its_run_config_before_contacting_nodes():
    sys.path.insert(0, str(EXAMPLE_APP))
    try:
        from skfedclust_app import server_app
    finally:
        sys.path.remove(str(EXAMPLE_APP))
    config = {"method": "kfed", "n-clusters": 3, "random-state": 0, "params": "{}"}
    names = {
        *("kfed", "feca", "mavg", "ffcm", "kumar", "gold", "fedsc", "dc", "omnifc"),
        *("fedkmeans", "fedkmeans-blind"),
    }
    assert set(server_app.METHODS) == names
    blind = server_app.make_estimator({**config, "method": "fedkmeans-blind"})
    assert blind.coordinator == "blind"
    for method in names:
        estimator = server_app.make_estimator({**config, "method": method})
        assert hasattr(estimator, "_run_protocol")
    with pytest.raises(ValueError, match="unknown method 'kmeans'.*kfed, feca, mavg"):
        server_app.make_estimator({**config, "method": "kmeans"})
    with pytest.raises(ValueError, match="params must be a JSON object"):
        server_app.make_estimator({**config, "params": "max_iter=3"})
    with pytest.raises(ValueError, match="does not take these params"):
        server_app.make_estimator({**config, "params": '{"no_such": 1}'})
    gold = server_app.make_estimator({**config, "method": "GOLD", "params": '{"max_iter": 5}'})
    assert type(gold).__name__ == "GOLDClustering" and gold.max_iter == 5
    # Several methods, one after the other: parameters keyed by method name.
    every = server_app.make_estimators({**config, "method": "all"})
    assert [method for method, _ in every] == list(server_app.METHODS)
    keyed = '{"gold": {"max_iter": 5}, "omnifc": {"n_parties": 5}}'
    two = server_app.make_estimators({**config, "method": "gold, kfed", "params": keyed})
    assert [method for method, _ in two] == ["gold", "kfed"] and two[0][1].max_iter == 5
    assert server_app.make_estimator({**config, "method": "omnifc", "params": keyed}).n_parties == 5
    with pytest.raises(ValueError, match="unknown method 'kfed,kmeans'"):
        server_app.make_estimators({**config, "method": "kfed,kmeans"})
    with pytest.raises(ValueError, match="names a method twice"):
        server_app.make_estimators({**config, "method": "kfed,kfed"})
    with pytest.raises(ValueError, match="keyed by method name"):
        server_app.make_estimators({**config, "method": "all", "params": '{"max_iter": 5}'})
    with pytest.raises(ValueError, match="KumarFederatedKMeans does not take"):
        server_app.make_estimators({**config, "method": "all", "params": '{"kumar": {"x": 1}}'})
    with pytest.raises(ValueError, match="names 2 methods, not one"):
        server_app.make_estimator({**config, "method": "kfed,gold"})
    assert server_app.node_ids({"node-ids": "12, 34,56"}) == [12, 34, 56]
    assert server_app.node_ids({"node-ids": ""}) is None


# --------------------------------------------------------------------------- #
# Failures reported early and with Flower's reason
# --------------------------------------------------------------------------- #
class _PushPullGrid(LocalGrid):
    """A LocalGrid with Flower's push / pull interface; ``dead`` nodes get the
    SuperLink's "node unavailable" error reply, ``hung`` nodes none."""

    def __init__(self, *args, dead=(), hung=(), nodes=None, **kw):
        super().__init__(*args, **kw)
        self.dead, self.hung, self.pulls = set(dead), set(hung), 0
        self.node_lists = nodes
        self._outbox = {}

    def get_node_ids(self):
        if self.node_lists:
            return self.node_lists.pop(0) if len(self.node_lists) > 1 else self.node_lists[0]
        return super().get_node_ids()

    def push_messages(self, messages):
        from flwr.app import Error

        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            node = message.metadata.dst_node_id
            if node in self.dead:
                reply = Message(
                    Error(5, "Error: Node Unavailable - no heartbeat"), reply_to=message
                )
                reply.metadata.__dict__["_src_node_id"] = 1
            elif node in self.hung:
                reply = None
            else:
                reply = self.app(message, self.contexts[node])
            self._outbox[message.metadata.message_id] = reply
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        self.pulls += 1
        return [r for i in message_ids if (r := self._outbox.get(i)) is not None]


def test_a_dead_node_is_named_with_the_superlinks_reason_at_once():
    clients = _clients()
    app = make_client_app(Clients(clients), allowed_modules=ALLOWED)
    grid = _PushPullGrid(app, [{"partition-id": i} for i in range(4)], dead={102})
    started = time.monotonic()
    with pytest.raises(FlowerNodeError, match=r"node 102 is unavailable.*Node Unavailable") as info:
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=4, timeout=300)
    assert time.monotonic() - started < 10
    assert info.value.node_id == 102 and info.value.code == 5
    # Without the error reply (a hung node), the timeout names it.
    grid = _PushPullGrid(app, [{"partition-id": i} for i in range(4)], hung={101})
    with pytest.raises(FlowerTimeoutError, match=r"node 101 did not answer the handshake"):
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=4, timeout=0.5, poll_interval=0.05)
    # Replies are pulled every poll_interval, not every 3 s.
    grid = _PushPullGrid(app, [{"partition-id": i} for i in range(4)])
    started = time.monotonic()
    fit_on_flower(KFed(n_clusters=4, random_state=0), grid, n_nodes=4, timeout=10)
    assert time.monotonic() - started < 5


def test_a_restarted_node_is_waited_out_and_otherwise_explained():
    clients = _clients()
    app = make_client_app(Clients(clients), allowed_modules=ALLOWED)
    configs = [{"partition-id": i} for i in range(4)]
    # Five nodes listed (a restarted node's old twin), then four: the fit goes on.
    grid = _PushPullGrid(
        app, configs, nodes=[[100, 101, 102, 103, 99]] * 3 + [[100, 101, 102, 103]]
    )
    fit_on_flower(KFed(n_clusters=4, random_state=0), grid, n_nodes=4, timeout=10)
    grid = _PushPullGrid(app, configs, nodes=[[99, 100, 101, 102, 103]])
    with pytest.raises(ValueError, match=r"5 nodes are connected.*restarted.*node_ids"):
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=4, connect_timeout=0.5)
    grid = _PushPullGrid(app, configs, nodes=[[100, 101]])
    with pytest.raises(FlowerTimeoutError, match=r"only 2 of 4 nodes connected within 0.5 s"):
        fit_on_flower(KFed(n_clusters=4), grid, n_nodes=4, connect_timeout=0.5)


def test_unsupported_requests_are_refused_before_any_node_is_contacted():
    app = make_client_app(Clients(_clients()), allowed_modules=ALLOWED)
    grid = LocalGrid(app, [{"partition-id": i} for i in range(4)])

    class NotOnFlower(KFed):
        def _check_flower_support(self):
            raise NotSupportedOnFlower("this setting needs the simulation")

    for estimator, kwargs, error, match in [
        (NotOnFlower(n_clusters=2), {"n_nodes": 4}, NotSupportedOnFlower, "needs the simulation"),
        (KFed(n_clusters=-1), {"n_nodes": 4}, ValueError, "n_clusters"),
        (KFed(n_clusters=2), {"n_nodes": 0}, ValueError, "n_nodes must be a positive"),
        (KFed(n_clusters=2), {"node_ids": [100, 100]}, ValueError, "distinct"),
        (KFed(n_clusters=2), {"n_nodes": 4, "timeout": 0}, ValueError, "timeout must be"),
        (KFed(n_clusters=2), {"n_nodes": 4, "node_ids": [100]}, ValueError, "exactly one"),
    ]:
        with pytest.raises(error, match=match):
            fit_on_flower(estimator, grid, **kwargs)
    assert grid.log == []


def test_feature_names_come_from_the_nodes_dataframes():
    pd = pytest.importorskip("pandas")
    frames = [pd.DataFrame(block, columns=["x", "y"]) for block in _clients()]
    reference = KFed(n_clusters=4, random_state=0).fit(frames)
    estimator, _, _ = _local_fit(KFed(n_clusters=4, random_state=0), frames)
    np.testing.assert_array_equal(estimator.feature_names_in_, reference.feature_names_in_)
    np.testing.assert_array_equal(estimator.cluster_centers_, reference.cluster_centers_)
    frames[2] = frames[2].rename(columns={"y": "z"})
    with pytest.raises(ValueError, match="different feature names"):
        _local_fit(KFed(n_clusters=4, random_state=0), frames)


# --------------------------------------------------------------------------- #
# Authenticated peer keys
# --------------------------------------------------------------------------- #
def _identities(tmp_path, n, trusted=None):
    """Identity key files for ``n`` nodes and one trusted-identities file listing ``trusted``."""
    keys = [IdentityKey() for _ in range(n)]
    paths = []
    for i, key in enumerate(keys):
        paths.append(str(key.save(tmp_path / f"node{i}.pem")))
    listed = keys if trusted is None else trusted
    trust = tmp_path / "trusted.txt"
    trust.write_text(
        "# the federation's nodes\n"
        + "".join(f"node-{i} ed25519:{k.public_bytes.hex()}\n" for i, k in enumerate(listed))
    )
    configs = [
        {"partition-id": i, "identity-key": p, "trusted-identities": str(trust)}
        for i, p in enumerate(paths)
    ]
    return keys, configs


def _fit_with_configs(estimator, clients, configs, tamper=None):
    app = make_client_app(Clients(clients), save_output=Memory(), allowed_modules=ALLOWED)
    grid = LocalGrid(app, configs, tamper=tamper)
    fit_on_flower(estimator, grid, n_nodes=len(configs), timeout=30, allowed_modules=ALLOWED)
    return estimator, grid


def _swap_key_of(party, new_key_hex, signature_hex=None, identity_hex=None):
    """A man in the middle replacing ``party``'s per-fit key in the rosters of the others."""

    def swap(message):
        if not message.metadata.message_type.endswith("step"):
            return
        config = message.content.config_records["skfedclust"]
        control = json.loads(config["control"])
        begin = control.get("begin")
        if not begin or begin["party"] == party:
            return
        begin["roster"][party]["key"] = new_key_hex
        if identity_hex is not None:
            begin["roster"][party]["identity"] = identity_hex
            begin["roster"][party]["signature"] = signature_hex
        config["control"] = json.dumps(control)

    return swap


def test_authenticated_fit_prints_and_reports_every_identity(tmp_path):
    clients = _clients()
    keys, configs = _identities(tmp_path, 4)
    estimator, _ = _fit_with_configs(MaskedMean(), clients, configs)
    np.testing.assert_allclose(estimator.cluster_centers_[0], np.vstack(clients).mean(axis=0))
    assert estimator.client_identities_ == [k.fingerprint for k in keys]


def test_a_key_swapped_in_transit_is_refused_naming_the_peer(tmp_path):
    clients = _clients()
    _, configs = _identities(tmp_path, 4)
    attacker = KeyPair()
    # The relay hands every other party its own key for party 1, keeping party
    # 1's signature: the signature does not match the swapped key.
    with pytest.raises(
        FlowerNodeError, match=r"RosterError: roster rule signed-key: slot 1: party 1's per-fit"
    ):
        _fit_with_configs(
            MaskedMean(), clients, configs, tamper=_swap_key_of(1, attacker.public_bytes.hex())
        )
    # It signs the swapped key with an identity of its own: not a trusted one.
    rogue = IdentityKey()
    swap = _swap_key_of(
        1,
        attacker.public_bytes.hex(),
        signature_hex=rogue.sign_fit_key(attacker.public_bytes, session="any", nonce=b"n").hex(),
        identity_hex=rogue.public_bytes.hex(),
    )
    with pytest.raises(FlowerNodeError, match=r"party 1 signs with identity sha256:.* not in"):
        _fit_with_configs(MaskedMean(), clients, configs, tamper=swap)


def test_a_node_refuses_peers_outside_its_trusted_identities(tmp_path):
    clients = _clients()
    keys = [IdentityKey() for _ in range(4)]
    # Node 3 is not in the trust file the others hold.
    _, configs = _identities(tmp_path, 4, trusted=keys[:3])
    configs[3]["identity-key"] = str(keys[3].save(tmp_path / "outsider.pem"))
    for i, c in enumerate(configs[:3]):
        c["identity-key"] = str(keys[i].save(tmp_path / f"member{i}.pem"))
    with pytest.raises(FlowerNodeError, match=r"party 3 signs with identity .* not in"):
        _fit_with_configs(MaskedMean(), clients, configs)


def test_without_a_trust_file_a_swapped_key_goes_unnoticed():
    # The honest limit the docs state: a node that allows unauthenticated peers
    # cannot tell a swapped key from a genuine one. Here the swap only breaks
    # the pair keys, so the recipient fails to open (a refusal naming the
    # sender); an attacker who swapped every key and re-sealed would read the
    # messages instead.
    clients = _clients()
    attacker = KeyPair()
    app = make_client_app(Clients(clients), save_output=Memory(), allowed_modules=ALLOWED)
    configs = [{"partition-id": i, "allow-unauthenticated": "true"} for i in range(4)]
    grid = LocalGrid(app, configs, tamper=_swap_key_of(1, attacker.public_bytes.hex()))
    with pytest.raises(
        FlowerNodeError, match="refused.*could not open the sealed message from party"
    ) as info:
        fit_on_flower(MaskedMean(), grid, n_nodes=4, timeout=30, allowed_modules=ALLOWED)
    assert info.value.refused


def test_trusted_identities_file_is_checked(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("node-0 ed25519:1234\n")
    with pytest.raises(ValueError, match="line 1: expected 'ed25519:<64 hex digits>'"):
        load_trusted_identities(bad)
    key = IdentityKey()
    good = tmp_path / "good.txt"
    good.write_text(f"# comment\n\nalice {key.fingerprint}\nbob ed25519:{key.public_bytes.hex()}\n")
    assert load_trusted_identities(good) == {key.fingerprint: "bob"}


def test_keygen_writes_a_private_key_and_prints_a_trust_line(tmp_path, capsys):
    from skfedclust.flower.__main__ import main

    path = tmp_path / "node.pem"
    assert main(["keygen", str(path), "--name", "hospital-a"]) == 0
    printed = capsys.readouterr().out
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    key = IdentityKey.load(path)
    assert f"hospital-a ed25519:{key.public_bytes.hex()}" in printed
    assert key.fingerprint in printed
    # What it prints is a valid trusted-identities file.
    trust = tmp_path / "trusted.txt"
    trust.write_text(printed)
    assert load_trusted_identities(trust) == {key.fingerprint: "hospital-a"}
    with pytest.raises(SystemExit):
        main(["keygen", str(path)])
    # show prints the same trust line from the key file.
    assert main(["show", str(path), "--name", "hospital-a"]) == 0
    assert capsys.readouterr().out == printed


# --------------------------------------------------------------------------- #
# Node policies
# --------------------------------------------------------------------------- #
def _fit_with_policy(estimator, clients, **policy):
    configs = [{"partition-id": i, **policy} for i in range(len(clients))]
    return _fit_with_configs(estimator, clients, configs)


def test_a_node_refuses_to_upload_its_rows_as_fuzzy_cmeans_seeds():
    # The paper's FFCM seeds are rows: with n_clusters = a node's row count,
    # the seed client would upload every row it holds. A default node refuses
    # the step (its method releases rows by design), naming the field to set.
    clients = _clients()

    def harvest(init="k-means++-rows"):
        return FederatedFuzzyCMeans(n_clusters=60, init=init, random_state=0)

    with pytest.raises(
        FlowerNodeError, match=r"row-release.*allow-row-release = \"FederatedFuzzyCMeans\""
    ):
        _fit_with_policy(harvest(), clients)
    # The default start shares local centers among the nodes, then the result of
    # 60 clusters over 60 rows is refused: too few rows, or clients, per cluster.
    with pytest.raises(FlowerNodeError, match=r"min-rows-per-vector|min-sum-participants"):
        _fit_with_policy(harvest("local-centers"), clients)
    # A node that allows FFCM's release by name still refuses it when strict.
    allowed = {"allow-row-release": "FederatedFuzzyCMeans", "refuse-raw-rows": "strict"}
    with pytest.raises(FlowerNodeError, match=r"refused.*would send a vector within .* row"):
        _fit_with_policy(harvest(), clients, **{**allowed, "min-rows-per-vector": 0})
    with pytest.raises(FlowerNodeError, match=r"would send 60 vectors .* 60 rows"):
        _fit_with_policy(harvest(), clients, **{**allowed, "min-rows-per-vector": 5})
    # The same policies let a summarising method through.
    estimator, _ = _fit_with_policy(
        KFed(n_clusters=4, random_state=0),
        clients,
        **{"refuse-raw-rows": "strict", "min-rows-per-vector": 5},
    )
    assert estimator.cluster_centers_.shape == (4, 2)
    # Every node's policy and authentication, as its handshake said them.
    assert (
        estimator.client_policies_
        == [
            {
                "allowed_methods": None,
                "min_rows_per_vector": 5,
                "refuse_raw_rows": "strict",
                "min_sum_participants": 3,
                "allow_clear_sums": False,
                "dp_epsilon": None,
                "privacy_ledger": True,
                # The finite default, and the node's first fit on its ledger.
                "max_fits": 100,
                "ledger": {
                    "fits_used": 1,
                    "fits_left": 99,
                    "epsilon_spent": 0.0,
                    "epsilon_left": None,
                },
                "max_bound_queries": 8,
                "dp_trusted_shares": 1,
                "allow_row_release": [],
                "allow_coordinator_centers": [],
                "trusted_identities": True,
                "allow_unauthenticated": False,
            }
        ]
        * 4
    )


def test_a_node_refuses_a_method_its_policy_does_not_allow_at_the_handshake():
    clients = _clients()
    with pytest.raises(FlowerNodeError, match=r"handshake.*allows the methods KFed, FeCA"):
        _fit_with_policy(MAvg(n_clusters=4), clients, **{"allowed-methods": "KFed, FeCA"})
    estimator, _ = _fit_with_policy(
        FeCA(n_clusters=4, random_state=0), clients, **{"allowed-methods": "KFed, FeCA"}
    )
    assert estimator.n_clusters_ == 4


def test_node_policy_fields_are_checked():
    from skfedclust.flower._policy import NodePolicy

    with pytest.raises(ValueError, match="allowed-methods names 'KMeans'"):
        NodePolicy.from_node_config({"allowed-methods": "KMeans"})
    with pytest.raises(ValueError, match="refuse-raw-rows='maybe'"):
        NodePolicy.from_node_config({"refuse-raw-rows": "maybe"})
    with pytest.raises(ValueError, match="min-rows-per-vector=-1: expected an integer >= 0"):
        NodePolicy.from_node_config({"min-rows-per-vector": -1})
    policy = NodePolicy.from_node_config({"allowed-methods": "KFed"})
    policy.check_step("skfedclust.methods._centroid_steps:label_by_nearest_center")
    with pytest.raises(PermissionError, match="belongs to none of them"):
        policy.check_step("skfedclust.methods._ffcm:ffcm_seed_centers")


# --------------------------------------------------------------------------- #
# OmniFC: share-holding nodes without data, streamed encoded distances
# --------------------------------------------------------------------------- #
def test_omnifc_over_flower_with_data_less_share_holders():
    from skfedclust import OmniFCClustering

    clients = _clients()
    reference = OmniFCClustering(4, n_parties=7, random_state=0, keep_dissimilarity=True).fit(
        clients
    )
    # parties 4..6 are nodes whose loader returns None: they hold shares, no rows
    estimator, memory, _ = _local_fit(
        OmniFCClustering(4, n_parties=7, random_state=0, keep_dissimilarity=True),
        clients + [None] * 3,
    )
    np.testing.assert_array_equal(memory.rows("labels", 4), reference.labels_)
    _assert_same_communication(estimator.communication_, reference.communication_)
    np.testing.assert_array_equal(estimator.dissimilarity_matrix_, reference.dissimilarity_matrix_)
    assert not hasattr(estimator, "labels_") and estimator.n_parties_ == 7
    # the nodes dropped their shares at the end of the fit: predict is refused clearly
    with pytest.raises(RuntimeError, match="deployed federation whose nodes keep nothing"):
        estimator.predict(np.vstack(clients))


def test_omnifc_predicts_the_new_rows_of_querying_nodes_with_the_parties_of_the_fit():
    from skfedclust import OmniFCClustering
    from skfedclust.flower import predict_on_flower

    clients = _clients()
    X_new, _ = make_blobs(n_samples=30, centers=4, cluster_std=0.7, random_state=0)
    params = dict(n_clusters=4, n_parties=7, random_state=0)
    reference = OmniFCClustering(**params).fit(clients)
    # Nodes 0 and 2 hold new rows; share holders (4..6) and nodes 1, 3 none.
    new = [X_new[:12], None, X_new[12:], None, None, None, None]
    memory = Memory()
    app = make_client_app(
        Clients(clients + [None] * 3),
        save_output=memory,
        allowed_modules=ALLOWED,
        load_new_data=Clients(new),
    )
    grid = LocalGrid(app, [{"partition-id": i} for i in range(7)])
    estimator = fit_on_flower(
        OmniFCClustering(**params), grid, n_nodes=7, allowed_modules=ALLOWED, keep_for_predict=True
    )
    result = predict_on_flower(estimator, grid)
    # D is exact: each querier's labels are those of the in-process predict.
    for c, rows in ((0, X_new[:12]), (2, X_new[12:])):
        np.testing.assert_array_equal(
            memory.written[("predicted-labels", c)], reference.predict(rows)
        )
        np.testing.assert_array_equal(result["labels"][c], memory.written[("predicted-labels", c)])
    np.testing.assert_array_equal(result["written"]["predicted-labels"], [12, 0, 18, 0, 0, 0, 0])
    # The new rows crossed no party boundary in plaintext: no message held them.
    for message in grid.log:
        for array in message.content.array_records.values():
            for value in array.values():
                values = value.numpy()
                if values.dtype.kind == "f" and values.size >= 2:
                    assert not np.isin(values.ravel(), X_new.ravel()).any()


def test_a_querying_node_with_rows_beyond_the_public_bounds_refuses():
    from skfedclust import OmniFCClustering
    from skfedclust.flower import predict_on_flower

    clients = _clients()
    new = [np.full((3, 2), 1e9)] + [None] * 6
    app = make_client_app(
        Clients(clients + [None] * 3), allowed_modules=ALLOWED, load_new_data=Clients(new)
    )
    grid = LocalGrid(app, [{"partition-id": i} for i in range(7)])
    estimator = fit_on_flower(
        OmniFCClustering(4, n_parties=7, random_state=0),
        grid,
        n_nodes=7,
        allowed_modules=ALLOWED,
        keep_for_predict=True,
    )
    with pytest.raises(FlowerNodeError, match="exceed the public bounds"):
        predict_on_flower(estimator, grid)


@RAY_SIMULATION
def test_omnifc_under_the_simulation_runtime_uses_the_nodes_own_noise(tmp_path, monkeypatch):
    from flwr.simulation import run_simulation

    from skfedclust import OmniFCClustering
    from skfedclust.secure import _lcc

    clients = _clients()
    blocks = clients + [None] * 3

    def load(node_config):
        # a closure travels by value to the simulation's workers
        return blocks[int(node_config["partition-id"])]

    client_app = make_client_app(
        load,
        save_output=FileWriter(str(tmp_path / "{key}_{partition-id}.npy")),
        node_defaults=_simulation_identities(tmp_path, len(blocks)),
    )
    # what the server receives of the encoded distances, per fit
    uploads = []
    decode = _lcc.lcc_decode_tiles_step

    def recording_decode(received, **kwargs):
        uploads.append(received[4][0].copy())
        return decode(received, **kwargs)

    monkeypatch.setattr(_lcc, "lcc_decode_tiles_step", recording_decode)
    results = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context):
        for _ in range(2):
            estimator = OmniFCClustering(4, n_parties=7, random_state=0, keep_dissimilarity=True)
            fit_on_flower(estimator, grid, n_nodes=7, timeout=120)
            labels = np.concatenate([np.load(tmp_path / f"labels_{i}.npy") for i in range(4)])
            results.append((estimator, labels, len(uploads)))

    run_simulation(
        server_app,
        client_app,
        num_supernodes=7,
        backend_config={
            "client_resources": {"num_cpus": 1},
            "init_args": {"num_cpus": 2, "include_dashboard": False},
        },
    )
    monkeypatch.setattr(_lcc, "lcc_decode_tiles_step", decode)
    reference = OmniFCClustering(4, n_parties=7, random_state=0, keep_dissimilarity=True).fit(
        clients
    )
    assert len(results) == 2
    for estimator, labels, _ in results:
        np.testing.assert_array_equal(labels, reference.labels_)
        _assert_same_communication(estimator.communication_, reference.communication_)
        np.testing.assert_array_equal(
            estimator.dissimilarity_matrix_, reference.dissimilarity_matrix_
        )
    # one random_state, two fits: the nodes drew their noise from the operating
    # system, so a data-less party's encoded distances differ, and D does not
    first, second = uploads[0], uploads[results[0][2]]
    assert first.shape == second.shape and not np.array_equal(first, second)


def test_a_node_gives_its_steps_its_cores_or_its_n_threads():
    from skfedclust.federation._runtime import threads_per_step
    from skfedclust.flower._client import node_threads

    assert node_threads({}) == threads_per_step(None) >= 1
    assert node_threads({"n-threads": 3}) == 3
    with pytest.raises(ValueError, match="n-threads=0: expected an integer >= 1"):
        node_threads({"n-threads": 0})


def test_the_flower_pages_transport_table_is_what_the_records_carry():
    """The guide's table of k-FED's bytes on Flower is the code's, kind by kind."""
    import re

    page = (Path(__file__).resolve().parents[1] / "doc" / "user_guide" / "flower.rst").read_text()
    table = page[page.index(".. list-table:: k-FED, three nodes of 200 rows, bytes") :]
    table = table[: table.index("\n\n", table.index("* - Messages"))]
    rows = {}
    for name, *cells in re.findall(r"\* - (.+)\n\s+- (.+)\n\s+- (.+)\n\s+- (.+)", table):
        rows[name.strip()] = [c.strip().replace(",", "") for c in cells]
    X, _ = make_blobs(n_samples=600, centers=3, cluster_std=0.8, random_state=0)
    est, _, _ = _local_fit(KFed(n_clusters=3, random_state=0), [X[:200], X[200:400], X[400:]])
    by_kind = est.transport_["by_kind"]
    ledger = est.communication_["bytes_up"] + est.communication_["bytes_down"]
    expected = {
        "handshake": [by_kind["handshake"]["to_nodes"], by_kind["handshake"]["from_nodes"]],
        "protocol steps": [by_kind["step"]["to_nodes"], by_kind["step"]["from_nodes"], ledger],
        "end of the fit": [by_kind["finish"]["to_nodes"], by_kind["finish"]["from_nodes"]],
    }
    assert set(rows) == {"Messages", *expected}
    for name, values in expected.items():
        stated = [int(c) for c in rows[name] if c != "not counted"]
        assert stated == values, name
    # Nothing else travelled: no relay, no separate diagnostics.
    assert by_kind["relay"] == by_kind["outputs"] == {"to_nodes": 0, "from_nodes": 0}


def test_a_callable_init_is_refused_on_flower_before_any_exchange():
    def first_rows(rows, n_clusters, random_state):
        return rows[:n_clusters]

    with pytest.raises(ValueError, match="a deployed node runs only the package's client steps"):
        _local_fit(FederatedKMeans(4, init=first_rows, random_state=0), _clients())


def test_a_blind_federated_kmeans_on_flower_starts_from_the_nodes_own_nonces():
    # The nodes' nonces come from their operating system's entropy: the start
    # is theirs alone, and every node released the same result (the server
    # checks it), with nothing sent down to them but the protocol's steps.
    clients = _clients()
    estimator, memory, _ = _local_fit(FederatedKMeans(4, coordinator="blind"), clients)
    reference = KMeans(4, n_init=10, random_state=0).fit(np.vstack(clients))
    labels = memory.rows("labels", 4)
    assert adjusted_rand_score(reference.labels_, labels) > 0.99
    assert estimator.communication_["bytes_down"] == 0
    assert estimator.n_iter_ >= 1


def test_a_blind_fit_whose_nodes_have_the_simulations_private_seed_is_the_in_process_fit():
    # The start's seed comes from the nodes' nonces: nodes that draw from the
    # private seed a simulation gives its parties draw the same, and the fit is
    # the in-process one (the deployment test relies on it).
    from skfedclust.federation import use_runtime

    clients = _clients()
    with use_runtime(_private_runtime(5)):
        reference = FederatedKMeans(4, coordinator="blind", random_state=0).fit(clients)
    estimator, memory, _ = _local_fit(
        FederatedKMeans(4, coordinator="blind", random_state=0), clients, private_seeds=[5] * 4
    )
    np.testing.assert_array_equal(estimator.cluster_centers_, reference.cluster_centers_)
    np.testing.assert_array_equal(memory.rows("labels", 4), reference.labels_)
    _assert_same_communication(estimator.communication_, reference.communication_)
