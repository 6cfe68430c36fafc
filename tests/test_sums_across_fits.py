"""A malicious coordinator repeating a secure sum in a later fit: the node's ledger refuses.

A node's rules for its secure sums live for one fit in its state; across fits
its privacy ledger (on by default for a deployed node) remembers the sums it
joined, who took part and who survived. The sum over everyone in one fit and
over everyone but one in the next would give away that one's vector.
"""

import json

import numpy as np
import pytest
from test_secure_sum_attacks import Coordinator, refused

from skfedclust.federation import Federation, InProcessRuntime
from skfedclust.node._ledger import NodeLedger
from skfedclust.node._policy import NodePolicy, default_ledger_directory
from skfedclust.node._sum_guard import SumRefusal
from skfedclust.secure import SecureAggregator
from skfedclust.secure._moments import moments_raw

EVERYONE = list(range(6))


def refused_upload():
    """The refusal of an upload: a recorded key over other participants."""
    return pytest.raises(SumRefusal, match="one-sum-per-input.*added .* over other clients")


def _data():
    X = np.random.default_rng(0).uniform(-1, 1, size=(120, 3))
    return X, [np.arange(20 * c, 20 * (c + 1)) for c in range(6)]


def _fit(X, rows, policy=None):
    """A new fit (a new runtime: a new handshake) of default deployed nodes on ``rows``."""
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(0))
    return InProcessRuntime(federation, policy=NodePolicy() if policy is None else policy)


def _column_sums(runtime, clients=None, tag="sum"):
    (sums, _), _ = SecureAggregator(runtime, seed=3).sum(
        moments_raw, tag=tag, clients=clients, bounds=[64.0, None]
    )
    return sums


def test_the_sum_over_all_but_one_in_a_later_fit_is_refused():
    X, rows = _data()
    _column_sums(_fit(X, rows), tag="fit 1")
    with refused("one-sum-per-input") as refusal:
        _column_sums(_fit(X, rows), clients=EVERYONE[:-1], tag="fit 2")
    message = str(refusal.value)
    # Refused at the upload (before anything of the sum leaves the node), not
    # only at the unmasking.
    assert "an earlier fit on this node's rows added" in message
    # The node names its ledger: a file of the default per-user directory.
    assert str(default_ledger_directory()) in message


def test_a_later_fit_announcing_one_client_dropped_is_refused():
    # Over the same participants, with client 5 announced as dropped: the
    # survivors' sum differs from the earlier fit's by client 5's vector.
    X, rows = _data()
    Coordinator(_fit(X, rows)).complete_sum(EVERYONE)
    coordinator = Coordinator(_fit(X, rows))
    survivors = EVERYONE[:-1]
    coordinator.upload(EVERYONE, run_on=survivors)
    coordinator.announce(survivors, [5], survivors)
    coordinator.attest(survivors)
    with refused("one-sum-per-input"):
        coordinator.unmask(survivors)


def test_an_honest_refit_over_the_same_clients_is_accepted():
    X, rows = _data()
    first = _column_sums(_fit(X, rows), tag="fit 1")
    again = _column_sums(_fit(X, rows), tag="fit 2")
    np.testing.assert_allclose(again, first)


def test_the_same_dropout_in_a_later_fit_is_accepted():
    # The same survivors as the earlier fit's: the sums are the same.
    X, rows = _data()
    survivors = EVERYONE[1:]
    for _ in range(2):
        coordinator = Coordinator(_fit(X, rows))
        coordinator.upload(EVERYONE, run_on=survivors)
        coordinator.announce(survivors, [0], survivors)
        coordinator.attest(survivors)
        coordinator.unmask(survivors)


def test_the_same_nodes_in_other_slots_are_the_same_participants():
    # The coordinator may hand out the slots in another order at every fit:
    # participants are compared by who holds the slot, not by its number.
    X, rows = _data()
    first = _column_sums(_fit(X, rows), clients=EVERYONE[:-1], tag="fit 1")
    # Clients 0..4 again, now in slots 5..1.
    again = _column_sums(_fit(X, rows[::-1]), clients=EVERYONE[1:], tag="fit 2")
    np.testing.assert_allclose(again, first)
    # Slots 0..4 as in the first fit, now holding clients 5..1: other participants.
    with refused_upload():
        _column_sums(_fit(X, rows[::-1]), clients=EVERYONE[:-1], tag="fit 3")


def test_another_node_in_a_slot_makes_other_participants():
    # Client 5 replaced by a node the coordinator controls (other rows): the
    # difference of the two sums is client 5's vector minus a known one.
    X, rows = _data()
    _column_sums(_fit(X, rows), tag="fit 1")
    impostor = np.random.default_rng(1).uniform(-1, 1, size=(20, 3))
    with refused_upload():
        _column_sums(_fit(np.vstack([X, impostor]), [*rows[:5], np.arange(120, 140)]))


def test_a_node_without_a_ledger_forgets_its_sums_across_fits():
    # The weaker opt-out the Security page warns about: the attack goes through.
    X, rows = _data()
    policy = NodePolicy(privacy_ledger=False)
    everyone = _column_sums(_fit(X, rows, policy), tag="fit 1")
    five = _column_sums(_fit(X, rows, policy), clients=EVERYONE[:-1], tag="fit 2")
    np.testing.assert_allclose(everyone - five, X[rows[5]].sum(0))


def test_a_simulation_keeps_no_ledger():
    X, rows = _data()
    _column_sums(_fit(X, rows, NodePolicy.simulation()))
    assert not default_ledger_directory().exists()


def test_the_ledger_is_written_before_the_upload_leaves_the_node(tmp_path):
    # The upload is recorded at the upload step: a fit that ends before its
    # unmasking still refuses a later fit's sum over other clients.
    X, rows = _data()
    policy = NodePolicy(privacy_ledger=tmp_path)
    Coordinator(_fit(X, rows, policy)).upload(EVERYONE)
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
    assert len(records) == 6
    assert all(r["version"] == 3 and r["sums"] for r in records)
    assert all(e[2] is None for r in records for entries in r["sums"].values() for e in entries)
    with refused("one-sum-per-input"):
        Coordinator(_fit(X, rows, policy)).upload(EVERYONE[:-1])


def test_a_ledger_of_version_1_is_read_and_upgraded(tmp_path):
    # A file of version 1 at the node's ledger's own name is read as it is.
    ledger = NodeLedger(tmp_path, "abc", "fit 2")
    ledger.path.write_text(
        json.dumps({"version": 1, "fits": ["fit 1"], "releases": [["fit 1", "x", 1.0, 2.0, 1]]})
    )
    assert ledger.n_fits == 1 and ledger.releases() == [("x", 1.0, 2.0, 1)]
    ledger.join_sum([b"\x01"], ["a", "b", "c"])
    record = json.loads(ledger.path.read_text())
    assert record["version"] == 3 and record["fits"] == ["fit 1"]
    assert record["sums"] == {"01": [["fit 2", 0, None]]}


def test_a_ledger_of_version_2_keeps_its_sums(tmp_path):
    # Version 2 kept one sum per key; version 3 a list of them. A sum of
    # version 2 still refuses a repeat over everyone but one in a later fit.
    ledger = NodeLedger(tmp_path, "abc", "fit 2")
    everyone = ["a", "b", "c", "d"]
    ledger.path.write_text(
        json.dumps(
            {
                "version": 2,
                "fits": ["fit 1"],
                "releases": [],
                "client_sets": [everyone],
                "sums": {"01": ["fit 1", 0, 0]},
            }
        )
    )
    with refused("one-sum-per-input"):
        ledger.join_sum([b"\x01"], everyone[:-1])
    ledger.join_sum([b"\x01"], everyone)
    record = json.loads(ledger.path.read_text())
    assert record["version"] == 3
    assert record["sums"]["01"] == [["fit 1", 0, 0], ["fit 2", 0, None]]


def test_an_unauthenticated_slot_is_of_one_fit_alone(tmp_path):
    # A slot whose identity the node does not know is never the same as a
    # slot of another fit: a repeat over it is refused (the node fails closed).
    class Unknown:
        identities = None

    first, second = NodeLedger(tmp_path, "abc", "1"), NodeLedger(tmp_path, "abc", "2")
    first.join_sum([b"\x01"], first.identities(Unknown, [0, 1, 2]))
    second.join_sum([b"\x02"], second.identities(Unknown, [0, 1, 2]))
    with refused("one-sum-per-input"):
        second.join_sum([b"\x01"], second.identities(Unknown, [0, 1, 2]))


def test_edited_rows_keep_the_nodes_sums_record():
    # Every node's rows change a little between two fits (a day's churn): the
    # same nodes (their identities), the same record. The sum over all but
    # one in the second fit repeats the first fit's statistic over other
    # clients, and is refused; a ledger keyed by the rows would have started
    # afresh and let it through.
    X, rows = _data()
    names = [f"org-{c}" for c in range(6)]

    def fit(X):
        federation = Federation(X, rows)
        federation.spawn_seeds(np.random.RandomState(0))
        return InProcessRuntime(federation, policy=NodePolicy(), node_identities=names)

    _column_sums(fit(X), tag="fit 1")
    with refused_upload():
        _column_sums(fit(X + 1e-3), clients=EVERYONE[:-1], tag="fit 2")


def test_a_later_fit_that_would_isolate_a_shared_client_is_refused(tmp_path):
    # Fit 1 sums over a, b, c and x; fit 2 over x, d, e and f. Each differs from
    # the other by three, but a third sum over all seven (any later fit) would
    # give x's vector: the node refuses the second already. The union of both
    # makes groups of four and three: accepted; the refused set after it is not.
    first = NodeLedger(tmp_path, "abc", "fit 1")
    first.join_sum([b"\x01"], ["a", "b", "c", "x"])
    second = NodeLedger(tmp_path, "abc", "fit 2")
    with refused("one-sum-per-input"):
        second.join_sum([b"\x01"], ["x", "d", "e", "f"])
    second.join_sum([b"\x01"], ["a", "b", "c", "d", "e", "f", "x"])
    with refused("one-sum-per-input"):
        NodeLedger(tmp_path, "abc", "fit 3").join_sum([b"\x01"], ["x", "d", "e", "f"])
