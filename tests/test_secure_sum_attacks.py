"""A malicious coordinator against the secure sum: every attack ends in a node's refusal.

The coordinator here is the test: it drives the package's runtime with the
secure sum's own client steps, but chooses their public constants, the
announcements and the order of the rounds as a hostile server would. Each
attack must be refused by a node with default settings, by the rule the
Security page names, or leave the server with values that tell it nothing.
"""

import warnings

import numpy as np
import pytest

from skfedclust.federation import Federation, Party, Reply, summand
from skfedclust.federation._runtime import client_step_name
from skfedclust.node._refusal import NodeRefusal
from skfedclust.node._sum_guard import harary_neighbours_of
from skfedclust.secure import SecureAggregator
from skfedclust.secure._moments import moments_deviations, moments_rows
from skfedclust.secure._secure_sum import (
    TAG_ATTEST,
    TAG_SURVIVORS,
    TAG_UNMASK,
    TAG_UPLOAD,
    _encode,
    _structure,
    fixed_point_shift,
    secure_sum_attest_step,
    secure_sum_unmask_step,
    secure_sum_upload_step,
)
from skfedclust.secure._sum_bounds import agree_bound
from skfedclust.utils.protocol_checks import RecordingRuntime, remove_self_masks


@summand
def row_sums(data, inbox, state, party):
    return Reply(send=data.sum(axis=0))


@summand
def centered_sums(data, inbox, state, party):
    return Reply(send=(data - np.asarray(inbox["centers"])).sum(axis=0))


def _runtime(n_clients=6, n=60, d=2, cls=RecordingRuntime):
    X = np.random.RandomState(0).normal(size=(n, d))
    rows = np.array_split(np.arange(n), n_clients)
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(1))
    return X, rows, cls(federation, private_entropy=[7])


class Coordinator:
    """A server that runs the secure sum's client steps with constants of its choosing."""

    def __init__(self, runtime, seed=0, degree=None):
        self.runtime = runtime
        self.honest = SecureAggregator(runtime, seed=seed, degree=degree)
        self.honest.setup()
        self.next_id = 100

    def upload(
        self,
        participants,
        *,
        step=row_sums,
        threshold=None,
        graph=None,
        sum_id=None,
        bounds=1e3,
        run_on=None,
        **public,
    ):
        graph = dict(self.honest.graph if graph is None else graph)
        threshold = self.honest._threshold(participants) if threshold is None else threshold
        sum_id = self.next_id if sum_id is None else sum_id
        self.next_id = max(self.next_id, sum_id) + 1
        return self.runtime.run(
            secure_sum_upload_step,
            tag=TAG_UPLOAD,
            clients=participants if run_on is None else run_on,
            inner=client_step_name(step),
            inner_public=public,
            sum_id=sum_id,
            participants=sorted(participants),
            graph=graph,
            threshold=threshold,
            shifts=[fixed_point_shift(bounds, len(participants))],
            n_clients=len(participants),
        )

    def complete_sum(self, participants, **upload):
        """An honest sum over ``participants``: upload, announce no dropout, unmask."""
        self.upload(participants, **upload)
        self.announce(participants, [], participants)
        return self.unmask(participants)

    def announce(self, survivors, dropped, clients):
        self.runtime.broadcast(
            {"survivors": np.array(survivors), "dropped": np.array(dropped)},
            tag=TAG_SURVIVORS,
            clients=clients,
        )

    def unmask(self, clients):
        return self.runtime.run(secure_sum_unmask_step, tag=TAG_UNMASK, clients=clients)

    def attest(self, clients):
        return self.runtime.run(secure_sum_attest_step, tag=TAG_ATTEST, clients=clients)


def refused(rule):
    # Any refusal of the node (a SumRefusal is one), by its rule.
    return pytest.raises(NodeRefusal, match=f"refused by rule '{rule}'")


# --------------------------------------------------------------------------- #
# Who takes part, the graph and the threshold
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("participants", [[0], [0, 1]])
def test_a_sum_of_one_or_two_clients_is_refused(participants):
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    with refused("min-sum-participants"):
        coordinator.upload(participants, threshold=1)


def test_a_node_with_a_stricter_policy_refuses_a_sum_below_its_own_minimum():
    from skfedclust.node._policy import NodePolicy

    _, _, runtime = _runtime()

    def strict_party(c, n_threads=1, _party=runtime._party):
        party = _party(c, n_threads)
        return Party(
            c, party.seed, [7], (runtime._exchange,), policy=NodePolicy(min_sum_participants=6)
        )

    Coordinator(runtime)  # set-up with default parties
    runtime._party = strict_party
    coordinator = Coordinator.__new__(Coordinator)
    coordinator.runtime, coordinator.next_id = runtime, 100
    coordinator.honest = SecureAggregator(runtime, seed=0)
    coordinator.honest._set_up = True
    with refused("min-sum-participants"):
        coordinator.upload([0, 1, 2, 3, 4])


@pytest.mark.parametrize("threshold", [1, 2])
def test_a_threshold_below_the_majority_of_the_neighbours_is_refused(threshold):
    _, _, runtime = _runtime(n_clients=6)  # complete graph: 5 neighbours, floor 3
    with refused("threshold-floor"):
        Coordinator(runtime).upload(list(range(6)), threshold=threshold)


def test_a_one_neighbour_graph_is_refused():
    _, _, runtime = _runtime(n_clients=8)
    coordinator = Coordinator(runtime)
    graph = {**coordinator.honest.graph, "degree": 1}
    with refused("threshold-floor"):
        coordinator.upload(list(range(8)), graph=graph, threshold=2)


def test_nodes_derive_their_neighbours_from_the_public_graph_parameters_only():
    _, _, runtime = _runtime(n_clients=40, n=200)
    aggregator = SecureAggregator(runtime, seed=5)
    for c in range(40):
        assert harary_neighbours_of(c, 40, aggregator.degree, 5) == aggregator.neighbours[c]
    aggregator.sum(row_sums, tag="sums", bounds=1e3)
    uploads = [e for e in runtime.trace if e[3] == "secure_sum_upload_step"]
    assert uploads
    # No constant of the upload step lists the graph: its size does not grow with it.
    assert set(aggregator.graph) == {"seed", "degree", "n_clients"}


# --------------------------------------------------------------------------- #
# Mask reuse, differencing and the stages of a sum
# --------------------------------------------------------------------------- #
def test_a_reused_sum_id_is_refused():
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    coordinator.upload(everyone, sum_id=200)
    coordinator.announce(everyone, [], everyone)
    coordinator.unmask(everyone)
    with refused("fresh-sum"):
        coordinator.upload(everyone, sum_id=200, step=centered_sums_from_public, shift=1.0)


@summand
def centered_sums_from_public(data, inbox, state, party, *, shift):
    return Reply(send=(data - shift).sum(axis=0))


def test_the_sum_over_all_but_one_after_the_sum_over_all_is_refused():
    # The differencing attack: sum(all) - sum(all but 5) = client 5's vector.
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    coordinator.complete_sum(everyone)
    with refused("one-sum-per-input"):
        coordinator.upload(everyone[:-1])


@pytest.mark.parametrize("shift", [0.0, 1e-300])
def test_the_same_values_under_another_step_over_fewer_clients_are_refused(shift):
    # Information-equal statistics: the column sums as row_sums over everyone,
    # then as sums of deviations from a public 0 (or from 1e-300, below the
    # values' resolution) over everyone but one. The steps and constants
    # differ, the values do not: the node keys its sums on the float arrays it
    # adds as well, and refuses to add the same ones over other clients.
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    coordinator.complete_sum(everyone)
    with refused("one-sum-per-input"):
        coordinator.upload(everyone[:-1], step=centered_sums_from_public, shift=shift)


def test_the_same_values_repeated_over_the_same_clients_are_accepted():
    # A repeat over the same clients (a fixed point of an iteration) tells nothing new.
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    for step, public in [(row_sums, {}), (centered_sums_from_public, {"shift": 0.0})]:
        coordinator.complete_sum(everyone, step=step, **public)


def test_a_repeated_statistic_announced_with_other_survivors_is_refused():
    # A fixed point sends the same centers twice; a repeat over the same clients
    # is harmless only if it ends with the same survivors.
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    coordinator.complete_sum(everyone)
    # The same statistic, the same clients: accepted; client 0 really drops.
    coordinator.upload(everyone, run_on=everyone[1:])
    coordinator.announce(everyone[1:], [0], everyone[1:])
    coordinator.attest(everyone[1:])
    with refused("one-sum-per-input"):
        coordinator.unmask(everyone[1:])


def test_a_second_unmasking_of_a_sum_is_refused():
    # First the self-mask shares of the survivors, then (declaring one of
    # them dropped) its pair keys: together they would open its upload.
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    coordinator.complete_sum(everyone)
    coordinator.announce(everyone[1:], [0], everyone[1:])
    with refused("stage"):
        coordinator.attest(everyone[1:])
    coordinator.announce(everyone[1:], [0], everyone[1:])
    with refused("stage"):
        coordinator.unmask(everyone[1:])


def test_an_unmasking_without_an_upload_is_refused():
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    coordinator.announce(list(range(6)), [], list(range(6)))
    with refused("stage"):
        coordinator.unmask(list(range(6)))


def test_dropouts_announced_without_the_attestation_round_are_refused():
    _, _, runtime = _runtime()
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    coordinator.upload(everyone)
    coordinator.announce(everyone[1:], [0], everyone[1:])
    with refused("stage"):
        coordinator.unmask(everyone[1:])


def test_split_views_of_who_dropped_get_no_pair_key():
    # The server keeps client 0's upload and shows half of its neighbours
    # "0 dropped" (for its pair keys) and the others "nobody dropped" (for its
    # self-mask shares). The first half cannot gather enough matching
    # attestations.
    _, _, runtime = _runtime(n_clients=6)
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    coordinator.upload(everyone)
    told_dropped, told_nothing = [1, 2], [3, 4, 5]
    coordinator.announce([c for c in everyone if c != 0], [0], told_dropped)
    coordinator.announce(everyone, [], told_nothing)
    coordinator.attest(told_dropped)
    with refused("consistent-view"):
        coordinator.unmask(told_dropped)


def test_an_unmasking_announcement_other_than_the_attested_one_is_refused():
    _, _, runtime = _runtime(n_clients=6)
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    coordinator.upload(everyone)
    coordinator.announce(everyone[1:], [0], everyone[1:])
    coordinator.attest(everyone[1:])
    coordinator.announce(everyone[2:], [0, 1], everyone[2:])
    with refused("consistent-view"):
        coordinator.unmask(everyone[2:])


def test_an_honest_dropout_is_unmasked_after_the_attestation_round():
    _, rows, runtime = _runtime(n_clients=6)
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    survivors = everyone[1:]
    uploads = coordinator.upload(everyone, run_on=survivors)  # client 0 is gone
    coordinator.announce(survivors, [0], survivors)
    coordinator.attest(survivors)
    reveals = coordinator.unmask(survivors)
    assert set(reveals) == set(survivors)
    # Each survivor revealed pair keys only for client 0, shares for the others,
    # and shares of its surviving neighbours' pair keys with client 0 only.
    for shares, keys, key_shares in reveals.values():
        assert set(np.asarray(keys)[:, 0].tolist()) <= {0}
        assert 0 not in set(np.asarray(shares)[:, 0].tolist())
        assert set(np.asarray(key_shares)[:, 1].tolist()) <= {0}
        assert 0 not in set(np.asarray(key_shares)[:, 0].tolist())
    assert len(uploads) == 5


# --------------------------------------------------------------------------- #
# Model inconsistency: different public inputs for one client
# --------------------------------------------------------------------------- #
def test_a_client_sent_other_centers_makes_the_sum_noise_to_the_server():
    # Pasquini et al. (CCS 2022): the victim gets crafted centers, the others
    # the real ones; the server would read the victim's share of the sum. The
    # inputs are part of every pair key, so the masks no longer cancel.
    X, rows, runtime = _runtime(n_clients=6)
    coordinator = Coordinator(runtime)
    everyone = list(range(6))
    centers = np.zeros(2)
    runtime.broadcast(centers, tag="centers", clients=everyone[1:])
    runtime.broadcast(centers + 1e2, tag="centers", clients=[0])
    uploads = coordinator.upload(everyone, step=centered_sums)
    coordinator.announce(everyone, [], everyone)
    reveals = coordinator.unmask(everyone)
    opened = remove_self_masks(uploads, reveals)
    total = np.zeros_like(next(iter(opened.values())))
    for value in opened.values():
        total += value
    shift = fixed_point_shift(1e3, 6)
    honest = [(X[r] - centers).sum(axis=0) for r in rows]
    victim = (X[rows[0]] - centers - 1e2).sum(axis=0)
    for target in (sum(honest), sum(honest[1:]) + victim):
        encoded = _encode(*_structure(target), [shift], 6, "t")
        # Far from either fixed-point sum (whose units are 2**-shift): noise.
        assert np.all(np.abs((total - encoded).view(np.int64)).astype(float) > 2.0**40)
    # The same attack with consistent centers opens to the sum: the test's
    # server would have read it.
    _, rows, runtime = _runtime(n_clients=6)
    coordinator = Coordinator(runtime)
    runtime.broadcast(centers, tag="centers", clients=everyone)
    uploads = coordinator.upload(everyone, step=centered_sums)
    coordinator.announce(everyone, [], everyone)
    opened = remove_self_masks(uploads, coordinator.unmask(everyone))
    total = np.zeros_like(next(iter(opened.values())))
    for value in opened.values():
        total += value
    encoded = _encode(*_structure(sum(honest)), [shift], 6, "t")
    # Equal up to the rounding of each client's encoding (half a unit each).
    assert np.all(np.abs((total - encoded).view(np.int64)) <= 3)


# --------------------------------------------------------------------------- #
# Steps that exist only inside an aggregate
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("step", [moments_rows, moments_deviations])
def test_row_level_steps_never_run_on_their_own(step):
    _, _, runtime = _runtime()
    with pytest.raises(PermissionError, match="only inside a bound agreement"):
        runtime.run(step, tag="harvest")
    assert not runtime.ledger.messages or all(m.tag != "harvest" for m in runtime.ledger.messages)


def test_row_level_steps_are_not_the_vector_of_a_secure_sum():
    _, _, runtime = _runtime(n_clients=6, n=6)  # one row each: the sum is row by row
    coordinator = Coordinator(runtime)
    with pytest.raises(PermissionError, match="not the vector|the vector of a secure sum"):
        coordinator.upload(list(range(6)), step=moments_rows)


def test_row_level_steps_run_inside_a_bound_agreement():
    _, _, runtime = _runtime()
    bound = agree_bound(SecureAggregator(runtime, seed=0), moments_rows, tag="bound")
    assert bound >= np.abs(runtime._federation.X).max()


def test_a_flower_node_refuses_a_row_level_step_by_name():
    from skfedclust.federation._runtime import resolve_client_step

    name = client_step_name(moments_rows)
    with pytest.raises(PermissionError, match="only inside a bound agreement"):
        resolve_client_step(name, ("skfedclust",))
    with pytest.raises(PermissionError, match="the vector of a secure sum"):
        resolve_client_step(name, ("skfedclust",), role="summand")
    assert resolve_client_step(name, ("skfedclust",), role="bound") is moments_rows


def test_key_material_comes_from_the_partys_cryptographic_generator():
    a = Party(0, 1, [3], stream=(4,))
    assert a.secret_bytes(32) == Party(0, 1, [3], stream=(4,)).secret_bytes(32)
    assert a.secret_bytes(32) != Party(0, 1, [3], stream=(4,)).secret_bytes(32)  # a stream
    assert Party(0, 1, [3], stream=(5,)).secret_bytes(32) != Party(0, 1, [3], (4,)).secret_bytes(32)
    assert Party(1, 1, [3], stream=(4,)).secret_bytes(32) != Party(0, 1, [3], (4,)).secret_bytes(32)


# --------------------------------------------------------------------------- #
# Honest settings that would make small sums
# --------------------------------------------------------------------------- #
def test_a_client_fraction_that_samples_fewer_than_three_clients_is_refused_before_any_exchange():
    from sklearn.datasets import make_blobs

    from skfedclust import FederatedKMeans

    X, _ = make_blobs(120, centers=2, random_state=0)
    clients = np.array_split(X, 4)
    with pytest.raises(ValueError, match="client_fraction=0.25 of 4 clients takes 1"):
        FederatedKMeans(2, client_fraction=0.25, random_state=0).fit(clients)
    # Three of four sampled each iteration: accepted.
    FederatedKMeans(2, client_fraction=0.75, random_state=0, max_iter=3).fit(clients)


def test_secure_sums_over_two_clients_are_refused_at_validation():
    from sklearn.datasets import make_blobs

    from skfedclust import FederatedKMeans, KFed

    X, _ = make_blobs(120, centers=2, random_state=0)
    with pytest.raises(ValueError, match="secure sums need at least 3 clients"):
        FederatedKMeans(2, random_state=0).fit([X[:60], X[60:]])
    # In the clear, two clients work; KFed's inertia_ (a secure sum) is nan with a warning.
    FederatedKMeans(2, secure_aggregation=False, random_state=0).fit([X[:60], X[60:]])
    with pytest.warns(UserWarning, match="inertia_ needs a secure sum of at least 3"):
        est = KFed(2, random_state=0, compute_inertia=True).fit([X[:60], X[60:]])
    assert np.isnan(est.inertia_)
    # Without compute_inertia (the default), two clients fit without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not hasattr(KFed(2, random_state=0).fit([X[:60], X[60:]]), "inertia_")


# --------------------------------------------------------------------------- #
# Bound agreements as an oracle
# --------------------------------------------------------------------------- #
def test_bound_agreements_for_centers_moved_along_a_line_are_refused_past_the_limit():
    # The oracle: the binary order of each client's largest distance to a
    # center the server moves along a line, asked again and again, locates the
    # farthest row. A node answers max-bound-queries (8) distinct ones per step
    # and fit; repeats of the same inputs are free.
    from skfedclust.federation import InProcessRuntime
    from skfedclust.methods._fedkmeans import fedkmeans_nearest_distances
    from skfedclust.node._policy import NodePolicy
    from skfedclust.secure import agree_bound

    X = np.random.RandomState(0).normal(size=(60, 2))
    federation = Federation(X, np.array_split(np.arange(60), 6))
    federation.spawn_seeds(np.random.RandomState(1))
    # Where the operator lets the coordinator choose centers (a default node refuses
    # the step itself: rule coordinator-centers), the query limit still holds.
    policy = NodePolicy(allow_coordinator_centers="*")
    runtime = InProcessRuntime(federation, private_entropy=[7], policy=policy)
    aggregator = SecureAggregator(runtime, seed=0)
    line = [np.array([[t, 0.0]]) for t in np.linspace(-3, 3, 9)]
    for centers in line[:8]:
        agree_bound(aggregator, fedkmeans_nearest_distances, tag="probe", centers=centers)
    agree_bound(aggregator, fedkmeans_nearest_distances, tag="again", centers=line[0])
    with refused("bound-queries"):
        agree_bound(aggregator, fedkmeans_nearest_distances, tag="probe", centers=line[8])
    # A node with the limit off answers on.
    runtime = InProcessRuntime(
        federation,
        private_entropy=[7],
        policy=NodePolicy(max_bound_queries=0, allow_coordinator_centers="*"),
    )
    aggregator = SecureAggregator(runtime, seed=0)
    for centers in line:
        agree_bound(aggregator, fedkmeans_nearest_distances, tag="probe", centers=centers)
