"""A node's privacy ledger: its budget and its count of fits hold across the node's fits.

Without a ledger a node's budget is per fit, and a coordinator that starts the
same fit again gets a fresh budget each time; with one, every release charged
on the node's rows, by any fit, counts against ``dp-epsilon``.
"""

import functools
import json

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from skfedclust import FederatedKMeans, KFed
from skfedclust.federation import InProcessRuntime, use_runtime
from skfedclust.node._ledger import NodeLedger, data_fingerprint, ledger_name
from skfedclust.node._policy import NodePolicy
from skfedclust.node._sum_guard import SumRefusal

BOX = (-12.0, 14.0)


def nodes(**policy):
    """Simulated parties with a node's budget and ledger (harvest checks off)."""
    policy = NodePolicy(min_rows_per_vector=None, refuse_raw_rows=False, **policy)
    return use_runtime(functools.partial(InProcessRuntime, policy=policy))


def refused(rule):
    return pytest.raises(SumRefusal, match=f"refused by rule '{rule}'")


def _clients(seed=0):
    X, _ = make_blobs(500, centers=3, random_state=seed)
    return np.array_split(X, 5)


def _dp_fit(epsilon=0.5):
    return FederatedKMeans(3, privacy="dp", epsilon=epsilon, bounds=BOX, random_state=0)


def _ledger_files(directory):
    return sorted(p for p in directory.iterdir() if p.suffix == ".json")


def test_without_a_ledger_a_repeated_fit_gets_a_fresh_budget(tmp_path):
    # The attack the ledger stops: the same fit, started again, spends the
    # node's budget again; each fit alone is within it.
    clients = _clients()
    with nodes(dp_epsilon=0.5, privacy_ledger=False):
        for _ in range(3):
            _dp_fit().fit(clients)


def test_a_ledger_holds_the_budget_across_fits(tmp_path):
    clients = _clients()
    with nodes(dp_epsilon=1.0, privacy_ledger=tmp_path):
        _dp_fit(0.5).fit(clients)
        # Gaussian releases compose in mu-GDP: 0.5 and 0.9 spend 1.06 together.
        with refused("dp-budget"):
            _dp_fit(0.9).fit(clients)
    # One file per node (a simulated node is its rows' fingerprint unless the
    # runtime names it), each counting both fits (the refused one from its
    # start) and holding what was charged: the first fit's releases, then the
    # second's until one would go over the budget. In all, never more than
    # the budget.
    files = _ledger_files(tmp_path)
    assert [f.name for f in files] == sorted(ledger_name(data_fingerprint(c)) for c in clients)
    for f in files:
        record = json.loads(f.read_text())
        assert len(record["fits"]) == 2
        assert [r[0] for r in record["releases"]][0] == record["fits"][0]
        assert 0.5 < _spent(record) <= 1.0 + 1e-9


def _spent(record):
    from skfedclust.secure import gaussian_epsilon

    mu = np.sqrt(sum(count * (s / g) ** 2 for _, _, s, g, count in record["releases"]))
    return gaussian_epsilon(mu, 1e-5)


def test_the_ledger_survives_a_restart_and_its_budget_still_pays_what_is_left(tmp_path):
    clients = _clients()
    with nodes(dp_epsilon=1.0, privacy_ledger=tmp_path):
        _dp_fit(0.6).fit(clients)
    # A new policy object (a restarted node) reads the same directory: a fit
    # that fits in what is left (0.6 and 0.6 compose to 0.88 in mu-GDP) runs,
    # the next (1.09 in all) is refused.
    with nodes(dp_epsilon=1.0, privacy_ledger=str(tmp_path)):
        _dp_fit(0.6).fit(clients)
        with refused("dp-budget"):
            _dp_fit(0.6).fit(clients)


def test_unnamed_simulated_nodes_are_their_rows(tmp_path):
    # A simulation without node_identities has nothing but the rows to tell
    # its nodes apart: other rows are other nodes, with ledgers of their own
    # (a deployed node is its identity key: tests/test_node_ledger_integrity.py).
    with nodes(dp_epsilon=1.0, privacy_ledger=tmp_path):
        _dp_fit(0.9).fit(_clients(0))
        _dp_fit(0.9).fit(_clients(1))
    assert len(_ledger_files(tmp_path)) == 10


def test_max_fits_refuses_a_fit_beyond_it_before_anything_is_sent(tmp_path):
    clients = _clients()
    with nodes(privacy_ledger=tmp_path, max_fits=2):
        KFed(3, random_state=0).fit(clients)
        KFed(3, random_state=1).fit(clients)
        with refused("max-fits"):
            KFed(3, random_state=2).fit(clients)
    # The refused fit is not counted.
    ledger = NodeLedger(tmp_path, data_fingerprint(clients[0]), "another fit")
    assert ledger.n_fits == 2
    # A fit's many steps count once: FederatedKMeans runs dozens.
    with nodes(privacy_ledger=tmp_path / "other", max_fits=1):
        FederatedKMeans(3, random_state=0).fit(clients)


def test_the_ledger_holds_what_the_fit_spent(tmp_path):
    clients = _clients()
    with nodes(dp_epsilon=10.0, privacy_ledger=tmp_path):
        estimator = _dp_fit(1.0).fit(clients)
    record = json.loads(_ledger_files(tmp_path)[0].read_text())
    assert _spent(record) == pytest.approx(estimator.privacy_spent_[0], rel=1e-9)


def test_policy_fields_are_checked():
    with pytest.raises(ValueError, match="max-fits needs a privacy-ledger"):
        NodePolicy(max_fits=3, privacy_ledger=False)
    with pytest.raises(ValueError, match="max-fits needs a privacy-ledger"):
        NodePolicy.from_node_config({"privacy-ledger": "none", "max-fits": "3"})
    with pytest.raises(ValueError, match="privacy-ledger is empty"):
        NodePolicy.from_node_config({"privacy-ledger": ""})
    with pytest.raises(ValueError, match="max-fits=0: expected an integer >= 1"):
        NodePolicy(privacy_ledger="x", max_fits=0)
    policy = NodePolicy.from_node_config({"privacy-ledger": "/tmp/l", "max-fits": "4"})
    assert (policy.privacy_ledger, policy.max_fits) == ("/tmp/l", 4)
    with pytest.raises(ValueError, match="max-fits=.*integer"):
        NodePolicy.from_node_config({"privacy-ledger": "/tmp/l", "max-fits": "2.5"})
    assert NodePolicy(privacy_ledger=False).ledger(np.zeros((2, 2)), "fit") is None
    assert NodePolicy.simulation().ledger(np.zeros((2, 2)), "fit") is None


def test_a_ledger_of_another_format_is_refused(tmp_path):
    ledger = NodeLedger(tmp_path, "abc", "fit")
    ledger.path.write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError, match="not a privacy ledger"):
        ledger.enter_fit()
