"""A lying coordinator against the nodes' roster check, fail-closed authentication and
refusals inside exchanges that tolerate dropouts.

The coordinator assigns party slots after the handshake and sends every node the
roster (each slot's per-fit key, identity, signature and nonce) with its first
step. Each node checks the whole roster before it seals or opens anything; these
tests forge rosters, both at the node's handlers (fast, one rule at a time) and
through a whole fit whose relay rewrites what the server sends.
"""

import json
import uuid

import numpy as np
import pytest
from sklearn.datasets import make_blobs

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

from flwr.app import Context, Error, Message, RecordDict  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from skfedclust import KFed  # noqa: E402
from skfedclust.federation import (
    Reply,  # noqa: E402
    data_independent,
    summary,
)
from skfedclust.flower import (  # noqa: E402
    FlowerNodeError,
    IdentityKey,
    fit_on_flower,
    make_client_app,
)
from skfedclust.flower._crypto import (  # noqa: E402
    KeyPair,
    RosterError,
    new_nonce,
    verify_roster,
)
from skfedclust.flower._wire import (  # noqa: E402
    ERROR_REFUSED,
    HELLO,
    STEP,
    from_content,
    to_content,
)
from skfedclust.methods._base import BaseFederatedClustering  # noqa: E402

ALLOWED = ("skfedclust", __name__)


# --------------------------------------------------------------------------- #
# Nodes driven by hand: handshake, then a first step with a roster of our making
# --------------------------------------------------------------------------- #
@data_independent
def report_party(data, inbox, state, party):
    """A client step sending what the node knows of itself: its slot and policy."""
    return Reply(send=np.array([party.index, party.policy.min_sum_participants]))


class Blocks:
    def __init__(self, blocks):
        self.blocks = blocks

    def __call__(self, node_config):
        return self.blocks[int(node_config["partition-id"])]


def _blocks(n):
    X, _ = make_blobs(n_samples=40 * n, centers=3, random_state=0)
    return [X[i::n] for i in range(n)]


def _federation(tmp_path, n, trusted=None):
    """Identity key files for ``n`` nodes and a trust file listing ``trusted`` (all)."""
    keys = [IdentityKey() for _ in range(n)]
    trust = tmp_path / "trusted_identities.txt"
    listed = keys if trusted is None else trusted
    trust.write_text(
        "".join(f"n{i} ed25519:{k.public_bytes.hex()}\n" for i, k in enumerate(listed))
    )
    configs = [
        {
            "partition-id": i,
            "identity-key": str(key.save(tmp_path / f"node{i}.pem")),
            "trusted-identities": str(trust),
        }
        for i, key in enumerate(keys)
    ]
    return keys, configs


def _message(content, node_id, message_type):
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 0, 0
    message = Message(content, dst_node_id=node_id, message_type=message_type)
    message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return message


class Nodes:
    """``n`` nodes' ClientApps, called directly: what a coordinator sends, what they answer."""

    def __init__(self, configs, method="KFed"):
        self.app = make_client_app(Blocks(_blocks(len(configs))), allowed_modules=ALLOWED)
        self.contexts = [
            Context(
                run_id=1, node_id=100 + i, node_config=dict(c), state=RecordDict(), run_config={}
            )
            for i, c in enumerate(configs)
        ]
        self.session = uuid.uuid4().hex
        self.method = method

    def hello(self, i, method=None):
        """Node ``i``'s handshake reply: its control record, or the Error it sent."""
        control = {"session": self.session, "method": method or self.method}
        reply = self.app(_message(to_content(control), 100 + i, HELLO), self.contexts[i])
        if reply.has_error():
            return reply.error
        return from_content(reply.content)[0]

    def hellos(self, methods=None):
        methods = methods or [None] * len(self.contexts)
        self.replies = [self.hello(i, m) for i, m in enumerate(methods)]
        return self.replies

    def roster(self):
        """The honest roster, from the handshake replies."""
        return [
            {
                "key": h["public_key"],
                "identity": h["identity"],
                "signature": h["key_signature"],
                "nonce": h["nonce"],
            }
            for h in self.replies
        ]

    def begin(self, party, roster=None, **changes):
        roster = self.roster() if roster is None else roster
        n = len(self.contexts)
        begin = {"party": party, "n_parties": n, "n_clients": n, "seed": 7, "roster": roster}
        return {**begin, **changes}

    def step(self, party, begin, step=f"{__name__}:report_party", public=None):
        """Node ``party``'s answer to its first step: the payload it sends, or the Error."""
        control = {
            "session": self.session,
            "step": step,
            "tag": "t",
            "exchange": 0,
            "party": party,
            "begin": begin,
        }
        content = to_content(control, {"public": public or {}, "events": []})
        reply = self.app(_message(content, 100 + party, STEP), self.contexts[party])
        if reply.has_error():
            return reply.error
        return from_content(reply.content)[1]


def _refused(reply, pattern):
    assert isinstance(reply, Error), f"the node did not refuse: it answered {reply!r}"
    assert reply.code == ERROR_REFUSED, reply.reason
    assert pattern in reply.reason, reply.reason
    return reply.reason


@pytest.fixture
def nodes(tmp_path):
    _, configs = _federation(tmp_path, 4)
    nodes = Nodes(configs)
    nodes.hellos()
    return nodes


def test_an_honest_roster_is_accepted_and_the_node_policy_reaches_its_steps(tmp_path):
    _, configs = _federation(tmp_path, 4)
    configs[2]["min-sum-participants"] = 5
    nodes = Nodes(configs)
    hellos = nodes.hellos()
    assert all(len(bytes.fromhex(h["nonce"])) == 32 for h in hellos)
    assert len({h["nonce"] for h in hellos}) == 4
    assert hellos[2]["policy"] == {
        "allowed_methods": None,
        "min_rows_per_vector": 2,
        "refuse_raw_rows": True,
        "min_sum_participants": 5,
        "allow_clear_sums": False,
        "dp_epsilon": None,
        "privacy_ledger": True,
        # The finite default, and this node's first fit on its ledger.
        "max_fits": 100,
        "ledger": {"fits_used": 1, "fits_left": 99, "epsilon_spent": 0.0, "epsilon_left": None},
        "max_bound_queries": 8,
        "dp_trusted_shares": 1,
        "allow_row_release": [],
        "allow_coordinator_centers": [],
        "trusted_identities": True,
        "allow_unauthenticated": False,
    }
    for party in range(4):
        sent = nodes.step(party, nodes.begin(party))
        assert not isinstance(sent, Error), sent.reason
        # The step's Party carries the node's own policy, from its node config.
        assert sent.tolist() == [party, 5 if party == 2 else 3]


def test_an_insiders_key_in_two_other_slots_is_refused_naming_the_rule(nodes):
    # Party 3 is a trusted insider working with the coordinator: its genuine,
    # signed slot is put into the slots of parties 1 and 2, so that it could
    # open what the others seal for them.
    honest = nodes.roster()
    forged = [honest[0], honest[3], honest[3], honest[3]]
    # Sent as is, the victims find someone else in their own slot.
    for victim in (1, 2):
        _refused(nodes.step(victim, nodes.begin(victim, forged)), f"own-slot: slot {victim}:")
    # Each victim shown its own slot untouched still sees the insider's key twice.
    for victim, other in ((1, 2), (2, 1)):
        view = list(honest)
        view[other] = honest[3]
        reason = _refused(
            nodes.step(victim, nodes.begin(victim, view)), "roster rule distinct-keys"
        )
        assert "slot 3" in reason
    # And the other honest party refuses it too.
    _refused(nodes.step(0, nodes.begin(0, forged)), "roster rule distinct-keys: slot 2")


@pytest.mark.parametrize(
    "forge, rule",
    [
        # one slot too few, or one more than the parties announced
        (lambda r: ({"roster": r[:3]}), "slot-count"),
        (lambda r: ({"roster": r + [r[1]]}), "slot-count"),
        (lambda r: ({"n_parties": 5, "n_clients": 5}), "slot-count"),
        # the same identity in two slots, each with a key of its own
        (lambda r: ({"roster": r[:3] + [{**r[3], "identity": r[2]["identity"]}]}), "distinct-id"),
        # a key swapped for the coordinator's own
        (
            lambda r: ({"roster": r[:2] + [{**r[2], "key": KeyPair().public_bytes.hex()}, r[3]]}),
            "signed-key: slot 2",
        ),
        # two parties' keys swapped with each other
        (
            lambda r: (
                {"roster": [r[0], {**r[1], "key": r[2]["key"]}, {**r[2], "key": r[1]["key"]}, r[3]]}
            ),
            "signed-key: slot 1",
        ),
        # a slot without its signature, without its identity
        (lambda r: ({"roster": r[:3] + [{**r[3], "signature": None}]}), "signed-key: slot 3"),
        (
            lambda r: ({"roster": r[:3] + [{**r[3], "identity": None, "signature": None}]}),
            "signed-key: slot 3",
        ),
        # a genuine key with another nonce than the one its owner signed
        (lambda r: ({"roster": r[:3] + [{**r[3], "nonce": new_nonce().hex()}]}), "signed-key"),
        # someone else in the node's own slot
        (lambda r: ({"roster": [{**r[0], "key": r[1]["key"]}] + r[1:]}), "own-slot: slot 0"),
        (lambda r: ({"roster": [{**r[0], "nonce": r[1]["nonce"]}] + r[1:]}), "own-slot: slot 0"),
        # not a roster at all
        (lambda r: ({"roster": r[:3] + [{"key": "zz"}]}), "roster-format: slot 3"),
    ],
)
def test_forged_rosters_are_refused_naming_the_rule_and_the_slot(nodes, forge, rule):
    begin = nodes.begin(0, **forge(nodes.roster()))
    _refused(nodes.step(0, begin), f"roster rule {rule}")
    # Nothing of the forged roster stays: the honest one is accepted after it.
    assert not isinstance(nodes.step(0, nodes.begin(0)), Error)


def test_a_slot_signed_for_another_fit_or_method_is_refused(tmp_path):
    _, configs = _federation(tmp_path, 4)
    # The coordinator names another method to node 3 than to the others.
    nodes = Nodes(configs)
    nodes.hellos(methods=[None, None, None, "FeCA"])
    _refused(nodes.step(0, nodes.begin(0)), "roster rule signed-key: slot 3")
    # A genuine slot of an earlier fit (its key, identity, signature, nonce).
    earlier = Nodes(configs)
    earlier.hellos()
    nodes = Nodes(configs)
    nodes.hellos()
    roster = nodes.roster()
    roster[1] = earlier.roster()[1]
    _refused(nodes.step(0, nodes.begin(0, roster)), "roster rule signed-key: slot 1")


def test_peers_outside_the_trust_file_are_refused(tmp_path):
    keys, configs = _federation(tmp_path, 4)
    outsider = IdentityKey()
    configs[3]["identity-key"] = str(outsider.save(tmp_path / "outsider.pem"))
    nodes = Nodes(configs)
    nodes.hellos()
    reason = _refused(nodes.step(0, nodes.begin(0)), "roster rule signed-key: slot 3")
    assert outsider.fingerprint in reason and "not in this node's trusted identities" in reason


def test_a_node_without_a_trust_file_refuses_unless_its_operator_allows_it(tmp_path, caplog):
    _, configs = _federation(tmp_path, 4)
    bare = [{"partition-id": i} for i in range(4)]
    nodes = Nodes(bare)
    error = nodes.hello(0)
    reason = _refused(error, "no identity-key and no trusted-identities")
    assert "keygen" in reason and "allow-unauthenticated=true" in reason
    # A trust file without an identity of its own: its peers could not check it.
    nodes = Nodes([{k: v for k, v in configs[0].items() if k != "identity-key"}])
    _refused(nodes.hello(0), "no identity-key in its node config")
    # The operator allows it: the node warns, and still checks the roster but for
    # the signatures.
    nodes = Nodes([{**c, "allow-unauthenticated": "true"} for c in bare])
    hellos = nodes.hellos()
    assert "allow-unauthenticated=true" in caplog.text
    assert hellos[0]["identity"] is None and hellos[0]["policy"]["allow_unauthenticated"]
    assert not isinstance(nodes.step(0, nodes.begin(0)), Error)
    roster = nodes.roster()
    _refused(nodes.step(1, nodes.begin(1, [roster[0], roster[0], *roster[2:]])), "own-slot: slot 1")
    _refused(
        nodes.step(0, nodes.begin(0, [roster[0], roster[2], *roster[2:]])), "distinct-keys: slot 2"
    )
    with pytest.raises(FlowerNodeError, match="refused the handshake.*allow-unauthenticated"):
        fit_on_flower(KFed(n_clusters=3), _Grid(Nodes(bare)), n_nodes=4, timeout=10)


def test_verify_roster_checks_each_rule(tmp_path):
    session, method = "s", "KFed"
    identities = [IdentityKey() for _ in range(3)]
    keys = [KeyPair() for _ in range(3)]
    nonces = [new_nonce() for _ in range(3)]
    trusted = {k.fingerprint: None for k in identities}
    roster = [
        {
            "key": kp.public_bytes.hex(),
            "identity": ik.public_bytes.hex(),
            "signature": ik.sign_fit_key(
                kp.public_bytes, session=session, nonce=nonce, method=method
            ).hex(),
            "nonce": nonce.hex(),
        }
        for ik, kp, nonce in zip(identities, keys, nonces)
    ]
    own = {"key": keys[0].public_bytes, "identity": identities[0].public_bytes, "nonce": nonces[0]}
    kwargs = dict(party=0, n_parties=3, own=own, session=session, method=method, trusted=trusted)
    assert verify_roster(roster, **kwargs) == [k.fingerprint for k in identities]
    with pytest.raises(RosterError) as info:
        verify_roster(roster, **{**kwargs, "session": "other"})
    assert (info.value.rule, info.value.slot) == ("signed-key", 1)
    assert isinstance(info.value, PermissionError)
    with pytest.raises(RosterError, match="slot-count"):
        verify_roster(roster, **{**kwargs, "n_parties": 2})
    with pytest.raises(RosterError, match="slot-count: slot 3"):
        verify_roster(roster, **{**kwargs, "party": 3})
    with pytest.raises(RosterError, match="distinct-identities: slot 2"):
        verify_roster(roster[:2] + [{**roster[2], "identity": roster[1]["identity"]}], **kwargs)


# --------------------------------------------------------------------------- #
# A whole fit through a lying relay
# --------------------------------------------------------------------------- #
class _Grid(Grid):
    """A grid over :class:`Nodes`: ``tamper(message)`` may rewrite what the server sends;
    ``drop(message)`` may lose a node's reply (a node that does not answer); ``log``
    keeps every reply."""

    def __init__(self, nodes, tamper=None, drop=None):
        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 0, 0
        self.nodes, self.tamper, self.drop = nodes, tamper, drop
        self.replies = []

    def set_run(self, run):
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        raise NotImplementedError

    def get_node_ids(self):
        return [100 + i for i in range(len(self.nodes.contexts))]

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
            node = message.metadata.dst_node_id
            reply = self.nodes.app(message, self.nodes.contexts[node - 100])
            self.replies.append((node, message, reply))
            if self.drop is not None and self.drop(message):
                continue
            replies.append(reply)
        return replies


def _rewrite_roster(change):
    """A relay applying ``change(party, roster)`` to the roster each party receives."""

    def tamper(message):
        if not message.metadata.message_type.endswith("step"):
            return
        config = message.content.config_records["skfedclust"]
        control = json.loads(config["control"])
        if control.get("begin"):
            change(control["begin"]["party"], control["begin"]["roster"])
            config["control"] = json.dumps(control)

    return tamper


@data_independent
def mask_peers(data, inbox, state, party):
    """Seal a vector for every other client (as a secure sum's pairwise seeds)."""
    n = 4
    return Reply(to_peers={p: np.full(2, float(party.index)) for p in range(n) if p != party.index})


@summary
def sum_with_masks(data, inbox, state, party):
    received = sum(inbox["masks"].values())
    return Reply(send=data.sum(axis=0) + received - received)


@summary
def refuse_on_one(data, inbox, state, party):
    if party.index == 1:
        raise PermissionError("this node's policy forbids it")
    return Reply(send=data.sum(axis=0))


class Dropping(BaseFederatedClustering):
    """Sealed peer messages, then an exchange that tolerates dropouts."""

    def __init__(self, script="masks", *, partition=None, n_jobs=None, random_state=0, verbose=0):
        self.script = script
        self.partition = partition
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _run_protocol(self, runtime, random_state):
        if self.script == "refuse":
            received = runtime.run(refuse_on_one, tag="sums", may_drop=True)
        else:
            runtime.run(mask_peers, tag="masks")
            received = runtime.run(sum_with_masks, tag="sums", may_drop=True)
        self.survivors_ = sorted(received)
        self.cluster_centers_ = np.atleast_2d(sum(p for _, p in received.items()))
        self.n_clusters_ = 1
        return None


def _fit(nodes, estimator, **grid):
    return fit_on_flower(
        estimator, _Grid(nodes, **grid), n_nodes=len(nodes.contexts), allowed_modules=ALLOWED
    )


def test_an_insider_in_two_slots_ends_the_fit_before_anything_is_sealed(tmp_path):
    _, configs = _federation(tmp_path, 4)
    nodes = Nodes(configs, method="Dropping")

    def insider_everywhere(party, roster):
        for victim in (1, 2):
            if victim != party:
                roster[victim] = dict(roster[3])

    grid = _Grid(nodes, tamper=_rewrite_roster(insider_everywhere))
    with pytest.raises(FlowerNodeError, match="refused step .*roster rule") as info:
        fit_on_flower(Dropping(), grid, n_nodes=4, allowed_modules=ALLOWED)
    assert info.value.refused
    # Every honest party refused its first step, naming the rule; none sealed anything.
    reasons = {node - 100: reply.error.reason for node, _, reply in grid.replies[4:]}
    assert "distinct-keys" in reasons[0]
    assert "distinct-keys" in reasons[1] and "distinct-keys" in reasons[2]
    assert all(reply.has_error() for node, _, reply in grid.replies[4:] if node != 103)


def test_a_refusal_inside_a_may_drop_exchange_is_a_refusal_not_a_dropout(tmp_path):
    _, configs = _federation(tmp_path, 4)
    with pytest.raises(
        FlowerNodeError, match=r"party 1 \(node 101\) refused.*policy forbids"
    ) as info:
        _fit(Nodes(configs, method="Dropping"), Dropping("refuse"))
    assert info.value.refused and info.value.party == 1


def test_a_sealed_message_that_does_not_open_inside_a_may_drop_exchange_is_a_refusal(tmp_path):
    _, configs = _federation(tmp_path, 4)

    def flip(message):
        config = message.content.config_records["skfedclust"]
        if json.loads(config["control"]).get("party") != 2:
            return
        for key in [k for k in config.keys() if k.startswith("sealed.")]:
            config[key] = config[key][:-1] + bytes([config[key][-1] ^ 1])

    with pytest.raises(
        FlowerNodeError,
        match=r"party 2 \(node 102\) refused step .*sum_with_masks.*could not open the sealed "
        r"message from party \d",
    ) as info:
        _fit(Nodes(configs, method="Dropping"), Dropping(), tamper=flip)
    assert info.value.refused


def test_only_a_node_that_does_not_answer_drops_out(tmp_path):
    _, configs = _federation(tmp_path, 4)

    def lost(message):
        control = json.loads(message.content.config_records["skfedclust"]["control"])
        return control.get("party") == 3 and control.get("tag") == "sums"

    estimator = _fit(Nodes(configs, method="Dropping"), Dropping(), drop=lost)
    assert estimator.survivors_ == [0, 1, 2]


@data_independent
def zero_to_one(data, inbox, state, party):
    """Party 0 seals a vector for party 1; nobody else sends anything."""
    return Reply(to_peers={1: np.ones(2)} if party.index == 0 else {})


@data_independent
def read_it(data, inbox, state, party):
    return Reply(send=np.asarray(inbox["pair"][0]))


class Pair(Dropping):
    def _run_protocol(self, runtime, random_state):
        runtime.run(zero_to_one, tag="pair")
        self.read_ = runtime.run(read_it, tag="read", clients=[1])[1]
        self.cluster_centers_ = np.zeros((1, 2))
        self.n_clusters_ = 1


def test_two_nodes_shown_different_rosters_cannot_read_each_other(tmp_path):
    # Party 0 is shown slots 2 and 3 swapped: every slot is genuine and distinct,
    # so its own check passes; but what it seals is bound to the roster it saw,
    # and party 1, shown the real one, refuses to open it.
    _, configs = _federation(tmp_path, 4)

    def swap_for_zero(party, roster):
        if party == 0:
            roster[2], roster[3] = roster[3], roster[2]

    with pytest.raises(
        FlowerNodeError, match=r"party 1 \(node 101\) refused.*could not open the sealed message"
    ):
        _fit(Nodes(configs, method="Pair"), Pair(), tamper=_rewrite_roster(swap_for_zero))
    estimator = _fit(Nodes(configs, method="Pair"), Pair())
    np.testing.assert_array_equal(estimator.read_, np.ones(2))


@pytest.mark.parametrize(
    "step, public",
    [
        # FFCM's k-means++ seeds are rows of the seed client, by design of FFCM.
        ("skfedclust.methods._ffcm:ffcm_seed_centers", {"n_clusters": 40}),
        # DC's intermediate representation is every row through the party's map.
        ("skfedclust.methods._dc:dc_party_intermediate", {}),
        # a step of FederatedKMeans, another method again
        ("skfedclust.methods._fedkmeans_steps:fedkmeans_far_rows", {}),
    ],
)
def test_a_node_runs_only_the_steps_of_the_method_it_agreed_to(nodes, step, public):
    # Every node agreed to a k-FED fit (and its default policy allows every
    # method): a coordinator asking for another method's step, which would
    # upload rows under that method's exemption, is refused before it runs.
    reason = _refused(nodes.step(0, nodes.begin(0), step=step, public=public), "agreed to")
    assert "KFed" in reason and step in reason
    # The method's own and the shared steps still run.
    assert not isinstance(nodes.step(0, nodes.begin(0)), Error)


def test_an_unknown_method_name_opens_no_method_step(tmp_path):
    _, configs = _federation(tmp_path, 4)
    nodes = Nodes(configs, method="NotAMethodOfThePackage")
    nodes.hellos()
    _refused(
        nodes.step(0, nodes.begin(0), step="skfedclust.methods._ffcm:ffcm_seed_centers"),
        "agreed to a fit of NotAMethodOfThePackage",
    )
