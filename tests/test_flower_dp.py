"""Node-side differential privacy on Flower's in-process grid: a node's own budget holds."""

import json

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

from test_flower import (  # noqa: E402
    _clients,
    _fit_with_configs,
    _fit_with_policy,
    _standing_identities,
)

from skfedclust import FederatedKMeans, KFed  # noqa: E402
from skfedclust.flower import FlowerNodeError  # noqa: E402


def test_a_node_refuses_a_fit_over_its_own_budget_on_flower():
    clients = _clients(n=4)
    box = (-15.0, 15.0)
    with pytest.raises(FlowerNodeError, match="dp-budget"):
        _fit_with_policy(
            FederatedKMeans(4, privacy="dp", epsilon=1.0, bounds=box, random_state=0),
            clients,
            **{"dp-epsilon": 0.5},
        )
    estimator, _ = _fit_with_policy(
        FederatedKMeans(4, privacy="dp", epsilon=1.0, bounds=box, random_state=0),
        clients,
        **{"dp-epsilon": 1.0},
    )
    assert estimator.privacy_spent_[0] == pytest.approx(1.0, rel=1e-6)
    assert np.all(np.isfinite(estimator.cluster_centers_))


#: Nodes whose operator lets the coordinator choose centers (its Lloyd).
COORDINATOR_CENTERS = {"allow-coordinator-centers": "FederatedKMeans"}


@pytest.mark.parametrize(
    "estimator, rule, config",
    [
        # Exact Lloyd totals through secure sums: the adaptive-centers oracle.
        # Their first row-dependent exchange is a bound agreement (its
        # histogram of binary orders is an exact count too).
        (
            FederatedKMeans(4, coordinator="sees-totals", random_state=0),
            "dp-bounds",
            COORDINATOR_CENTERS,
        ),
        # Exact totals among the nodes (the blind default): its set-up already.
        (FederatedKMeans(4, random_state=0), "dp-only", {}),
        # Local centroids in the clear.
        (KFed(4, random_state=0), "dp-only", {}),
    ],
    ids=["secure sums", "blind", "clear"],
)
def test_a_node_with_a_budget_sends_no_exact_statistic_on_flower(estimator, rule, config):
    with pytest.raises(FlowerNodeError, match=f"rule '{rule}'"):
        _fit_with_policy(estimator, _clients(n=4), **{"dp-epsilon": 1.0, **config})


def test_a_node_charges_fedsc_releases_to_its_own_budget_on_flower():
    from skfedclust import FedSpectralClustering

    clients = _clients(n=4)
    private = dict(
        privacy="data", epsilon=1.0, delta=1e-5, clip_norm=15.0, n_rounds=2, kmeans_n_init=2,
        random_state=0,
    )  # fmt: skip
    with pytest.raises(FlowerNodeError, match="dp-budget"):
        _fit_with_policy(FedSpectralClustering(4, **private), clients, **{"dp-epsilon": 0.5})
    # Without privacy the fit's first release is a bound agreement on the raw rows.
    with pytest.raises(FlowerNodeError, match="dp-bounds"):
        _fit_with_policy(
            FedSpectralClustering(4, n_rounds=2, kmeans_n_init=2, random_state=0),
            clients,
            **{"dp-epsilon": 1.0},
        )
    estimator, _ = _fit_with_policy(
        FedSpectralClustering(4, **private), clients, **{"dp-epsilon": 1.0}
    )
    assert estimator.privacy_spent_[0] == pytest.approx(1.0, rel=1e-6)


def test_a_nodes_ledger_holds_its_budget_across_fits_on_flower(tmp_path):
    clients = _clients(n=4)
    box = (-15.0, 15.0)
    policy = {"dp-epsilon": 1.0, "privacy-ledger": str(tmp_path), "max-fits": 3}
    # The same four nodes (the same identity keys) at every fit: a node's
    # ledger is its own, keyed by its identity.
    configs = [
        {"partition-id": i, **policy, **keys} for i, keys in enumerate(_standing_identities(4))
    ]

    def fit(epsilon):
        estimator = FederatedKMeans(4, privacy="dp", epsilon=epsilon, bounds=box, random_state=0)
        return _fit_with_configs(estimator, clients, configs)[0]

    fit(0.5)
    # 0.5 and 0.9 spend 1.06 together (mu-GDP): over the node's budget.
    with pytest.raises(FlowerNodeError, match="dp-budget"):
        fit(0.9)
    # The third fit is the last the nodes allow; the fourth is refused at the handshake.
    fit(0.1)
    with pytest.raises(FlowerNodeError, match="max-fits"):
        fit(0.1)


def test_the_coordinator_logs_each_nodes_budget_and_ledger():
    from skfedclust.flower._fit import _describe_policy

    line = _describe_policy({"dp_epsilon": 1.0, "privacy_ledger": True, "max_fits": 3})
    assert "DP budget epsilon 1 across fits (ledger), at most 3 fits" in line
    assert "DP budget epsilon 0.5 per fit" in _describe_policy({"dp_epsilon": 0.5})
    assert "no DP budget" in _describe_policy({})
    # What the node's ledger reports at the handshake, this fit counted.
    status = {"fits_used": 2, "fits_left": 98, "epsilon_spent": 0.5, "epsilon_left": 0.5}
    line = _describe_policy({"dp_epsilon": 1.0, "privacy_ledger": True, "ledger": status})
    assert "(2 used, epsilon 0.5 spent, 0.5 left)" in line


def test_a_nodes_ledger_refuses_a_sum_of_an_earlier_fit_over_other_nodes_on_flower():
    # The same four nodes (the same identity keys) fit twice, then three of
    # them again: the third fit's sums over three of the four nodes repeat the
    # first fits' over four, which the nodes' default ledgers refuse.
    from test_flower import _authenticated, _fit_with_configs

    clients = _clients(n=4)
    configs = _authenticated([{"partition-id": i, **COORDINATOR_CENTERS} for i in range(4)])

    def fit(n_nodes):
        # The coordinator's Lloyd, where the operator allows it: the same fit twice.
        estimator = FederatedKMeans(4, coordinator="sees-totals", random_state=0)
        return _fit_with_configs(estimator, clients[:n_nodes], configs[:n_nodes])[0]

    first = fit(4)
    np.testing.assert_allclose(fit(4).cluster_centers_, first.cluster_centers_)
    with pytest.raises(
        FlowerNodeError, match="one-sum-per-input.*earlier fit on this node.s rows added"
    ):
        fit(3)


def test_a_nodes_budget_on_flower_is_its_identitys_whatever_its_rows(tmp_path):
    # The same four nodes (the same identity keys); between two fits the
    # coordinator's data churn changes a row of node 0 and reorders node 1's:
    # no fresh budget. The handshake says what each node spent and has left.
    clients = _clients(n=4)
    box = (-15.0, 15.0)
    policy = {"dp-epsilon": 1.0, "privacy-ledger": str(tmp_path)}
    configs = [
        {"partition-id": i, **policy, **keys} for i, keys in enumerate(_standing_identities(4))
    ]

    def fit(epsilon, blocks):
        estimator = FederatedKMeans(4, privacy="dp", epsilon=epsilon, bounds=box, random_state=0)
        return _fit_with_configs(estimator, blocks, configs)[0]

    first = fit(0.5, clients)
    ledger = first.client_policies_[0]["ledger"]
    assert ledger["fits_used"] == 1 and ledger["fits_left"] == 99
    # Reported at the handshake, before this fit charged anything.
    assert ledger["epsilon_spent"] == 0.0 and ledger["epsilon_left"] == 1.0
    edited = [c.copy() for c in clients]
    edited[0][0] += 1e-3
    edited[1] = edited[1][::-1]
    with pytest.raises(FlowerNodeError, match="dp-budget"):
        fit(0.9, edited)
    third = fit(0.1, edited)
    for party in third.client_policies_:
        assert party["ledger"]["fits_used"] == 3
        assert 0.5 < party["ledger"]["epsilon_spent"] < 1.0
        assert party["ledger"]["epsilon_left"] == pytest.approx(
            1.0 - party["ledger"]["epsilon_spent"]
        )
    # One ledger per node in the directory, named by its identity.
    assert len(list(tmp_path.glob("node-*.json"))) == 4


def test_a_node_without_an_identity_key_keeps_its_ledger_under_its_name():
    from skfedclust.flower._client import _ledger_node
    from skfedclust.flower._crypto import IdentityKey

    key = IdentityKey()
    assert _ledger_node(key, "org-1") == key.fingerprint
    assert _ledger_node(None, "org-1") == "name:org-1"
    # Neither: the one node of its ledger directory.
    assert _ledger_node(None, None) == "node"


# --------------------------------------------------------------------------- #
# An identity key rotated by its node: the same node to its ledger and its peers'
# --------------------------------------------------------------------------- #
def _trust_file(tmp_path, lines):
    trust = tmp_path / "trusted.txt"
    trust.write_text("".join(lines))
    return trust


def _rotating_federation(tmp_path, capsys, n=4):
    """``n`` nodes with identity keys (written by the command line) and a trust file."""
    from skfedclust.flower.__main__ import main

    lines = []
    for i in range(n):
        main(["keygen", str(tmp_path / f"node{i}.pem"), "--name", f"node-{i}"])
        lines.append(capsys.readouterr().out.splitlines()[0] + "\n")
    return lines


def _configs(tmp_path, lines, keys, **policy):
    trust = _trust_file(tmp_path, lines)
    return [
        {"partition-id": i, "identity-key": str(key), "trusted-identities": str(trust), **policy}
        for i, key in enumerate(keys)
    ]


def _rotate(tmp_path, capsys, i, old, new):
    """Node ``i`` rotates its key from ``old`` to ``new``; its trust-file line, with the link."""
    from skfedclust.flower.__main__ import main

    assert main(["keygen", str(new), "--rotate-from", str(old), "--name", f"node-{i}"]) == 0
    return capsys.readouterr().out.splitlines()[0] + "\n"


def test_a_rotated_identity_key_keeps_the_nodes_budget_and_count_of_fits(tmp_path, capsys):
    clients = _clients(n=4)
    lines = _rotating_federation(tmp_path, capsys)
    keys = [tmp_path / f"node{i}.pem" for i in range(4)]
    policy = {"dp-epsilon": 1.0, "privacy-ledger": str(tmp_path / "ledgers")}

    def fit(configs):
        estimator = FederatedKMeans(
            4, privacy="dp", epsilon=0.5, bounds=(-15.0, 15.0), random_state=0
        )
        return _fit_with_configs(estimator, clients, configs)[0]

    fit(_configs(tmp_path, lines, keys, **policy))
    # Node 0 replaces its key; its operator and the others trust the new one.
    lines[0] = _rotate(tmp_path, capsys, 0, keys[0], tmp_path / "node0-new.pem")
    keys[0] = tmp_path / "node0-new.pem"
    second = fit(_configs(tmp_path, lines, keys, **policy))
    ledger = second.client_policies_[0]["ledger"]
    assert ledger["fits_used"] == 2 and ledger["epsilon_spent"] > 0.4
    # Its chain, tampered with (another key in place of the signed one), is refused
    # rather than read as a new node with a fresh budget.
    chain = json.loads((tmp_path / "node0-new.pem.rotation").read_text())
    chain[0]["new"] = "00" * 32
    (tmp_path / "node0-new.pem.rotation").write_text(json.dumps(chain))
    with pytest.raises(FlowerNodeError, match="not signed by the key it replaces"):
        fit(_configs(tmp_path, lines, keys, **policy))


def test_peers_count_a_rotated_key_as_the_same_participant(tmp_path, capsys):
    clients = _clients(n=4)
    lines = _rotating_federation(tmp_path, capsys)
    keys = [tmp_path / f"node{i}.pem" for i in range(4)]

    def fit(configs):
        # The coordinator's Lloyd, where the operator allows it: the same fit twice.
        estimator = FederatedKMeans(4, coordinator="sees-totals", random_state=0)
        configs = [{**c, **COORDINATOR_CENTERS} for c in configs]
        return _fit_with_configs(estimator, clients, configs)[0]

    first = fit(_configs(tmp_path, lines, keys))
    rotated = _rotate(tmp_path, capsys, 3, keys[3], tmp_path / "node3-new.pem")
    keys[3] = tmp_path / "node3-new.pem"
    # Trusted without its link, the new key is another participant: the honest
    # re-fit's sums repeat the first fit's over other clients.
    unlinked = rotated.split(" rotated-from=")[0] + "\n"
    with pytest.raises(FlowerNodeError, match="one-sum-per-input"):
        fit(_configs(tmp_path, [*lines[:3], unlinked], keys))
    # With the link its old key signed, the same participant: accepted.
    again = fit(_configs(tmp_path, [*lines[:3], rotated], keys))
    np.testing.assert_allclose(again.cluster_centers_, first.cluster_centers_)


def test_a_forged_rotation_is_refused(tmp_path, capsys):
    from skfedclust.flower._rotation import RotationError, load_rotations

    lines = _rotating_federation(tmp_path, capsys, n=2)
    rotated = _rotate(tmp_path, capsys, 1, tmp_path / "node1.pem", tmp_path / "new.pem")
    # The line claims node 0's key as the old one: node 0 never signed it.
    node0 = lines[0].split()[1]
    forged = rotated.replace(rotated.split("rotated-from=")[1].split()[0], node0)
    with pytest.raises(RotationError, match="not signed by the key it replaces"):
        load_rotations(_trust_file(tmp_path, [lines[0], forged]))
    assert len(load_rotations(_trust_file(tmp_path, [lines[0], rotated]))) == 1
    # A chain copied beside another key does not make that key the node of its chain.
    from skfedclust.flower._crypto import IdentityKey
    from skfedclust.flower._rotation import ledger_identity

    new = IdentityKey.load(tmp_path / "new.pem")
    chain = (tmp_path / "new.pem.rotation").read_text()
    assert (
        ledger_identity(new, tmp_path / "new.pem")
        == IdentityKey.load(tmp_path / "node1.pem").fingerprint
    )
    (tmp_path / "node0.pem.rotation").write_text(chain)
    with pytest.raises(RotationError, match="does not end at"):
        ledger_identity(IdentityKey.load(tmp_path / "node0.pem"), tmp_path / "node0.pem")


def test_a_node_whose_ledger_was_emptied_refuses_at_the_handshake(tmp_path):
    clients = _clients(n=4)
    configs = [
        {"partition-id": i, "privacy-ledger": str(tmp_path), **keys}
        for i, keys in enumerate(_standing_identities(4))
    ]
    _fit_with_configs(KFed(4, random_state=0), clients, configs)
    # One node's operator (or a script) empties its ledger between two fits.
    ledger = sorted(tmp_path.glob("node-*.json"))[0]
    ledger.write_text("{}")
    with pytest.raises(FlowerNodeError, match=f"ledger-damaged.*{ledger.name}"):
        _fit_with_configs(KFed(4, random_state=0), clients, configs)
