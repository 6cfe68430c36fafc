"""Client sampling from the clients' own randomness, against a coordinator that steers it.

A coordinator that chooses whom a sampled secure sum adds can put one honest
client among clients it controls. Each test drives deployed nodes (default
``NodePolicy()``) through the commit-reveal agreement and one sampled Lloyd
sum, with one message forged, and checks the refusal names its rule.
"""

import numpy as np
import pytest

from skfedclust import FederatedKMeans
from skfedclust.federation import Federation, InProcessRuntime
from skfedclust.methods._fedkmeans_steps import TAG_CENTERS, fedkmeans_lloyd_statistics
from skfedclust.node._policy import NodePolicy
from skfedclust.secure import SecureAggregator
from skfedclust.secure._sampling import (
    TAG_COMMITS,
    TAG_REVEALS,
    TAG_SAMPLE,
    public_sample,
    sampling_commit_step,
    sampling_reveal_step,
    sampling_seed,
)
from skfedclust.secure._secure_sum import TAG_UPLOAD
from skfedclust.utils.protocol_checks import recording_runtime

N_CLIENTS = 6
HORIZON = 5


def _sent(runtime, tag):
    return [m for m in runtime.ledger.messages if m.tag == tag]


def _nodes():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.3, size=(30, 2)) for c in (0.0, 4.0)])
    X = X[rng.permutation(len(X))]
    rows = np.array_split(np.arange(len(X)), N_CLIENTS)
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(0))
    return InProcessRuntime(federation, policy=NodePolicy())


def _agree(runtime, aggregator=None, *, relay=None, horizon=HORIZON):
    """The commit-reveal exchange, then the sums' set-up; ``relay`` may forge the relay."""
    slots = list(range(N_CLIENTS))
    commitments = runtime.run(sampling_commit_step, tag=TAG_COMMITS, horizon=horizon)
    relayed = {"slots": np.array(slots), "commitments": np.stack([commitments[c] for c in slots])}
    if relay is not None:
        relayed = relay(relayed)
    runtime.broadcast(relayed, tag=TAG_COMMITS)
    nonces = runtime.run(sampling_reveal_step, tag=TAG_REVEALS)
    nonces = np.stack([nonces[c] for c in slots])
    if aggregator is not None:
        aggregator.setup()
    return sampling_seed(slots, nonces), nonces


def _sampled_sum(runtime, aggregator, nonces, iteration, active, announced, summed=None):
    """Announce ``announced`` for ``iteration``, then add the Lloyd statistics of ``summed``."""
    summed = announced if summed is None else summed
    runtime.broadcast(
        {
            "nonces": nonces,
            "iteration": iteration,
            "active": np.array(active),
            "participants": np.array(announced),
        },
        tag=TAG_SAMPLE,
        clients=summed,
    )
    runtime.broadcast(np.array([[0.0, 0.0], [4.0, 4.0]]), tag=TAG_CENTERS, clients=summed)
    return aggregator.sum(
        fedkmeans_lloyd_statistics,
        tag="cluster statistics",
        bounds=[1e3, None, None],
        clients=summed,
    )


def _setup():
    runtime = _nodes()
    return runtime, SecureAggregator(runtime, seed=3, degree=N_CLIENTS - 1)


def test_the_public_sample_adds_up_and_the_seed_is_every_clients():
    runtime, aggregator = _setup()
    seed, nonces = _agree(runtime, aggregator)
    everyone = list(range(N_CLIENTS))
    sample = public_sample(seed, 1, everyone, 3)
    (sums, counts, _), survivors = _sampled_sum(runtime, aggregator, nonces, 1, everyone, sample)
    assert survivors == sample
    assert counts.sum() == sum(runtime.client_sizes[c] for c in sample)
    # Each client's nonce is in the seed: changing one changes the samples.
    other = nonces.copy()
    other[4, 0] ^= 1
    assert sampling_seed(everyone, other) != seed
    draws = {tuple(public_sample(seed, t, everyone, 3)) for t in range(1, 40)}
    assert len(draws) > 5


def test_a_sample_of_the_servers_choosing_is_refused():
    runtime, aggregator = _setup()
    seed, nonces = _agree(runtime, aggregator)
    everyone = list(range(N_CLIENTS))
    drawn = public_sample(seed, 1, everyone, 3)
    chosen = next(
        [0, a, b]
        for a in range(1, N_CLIENTS)
        for b in range(a + 1, N_CLIENTS)
        if [0, a, b] != drawn
    )
    with pytest.raises(PermissionError, match="rule 'sampling'.*not the sample"):
        _sampled_sum(runtime, aggregator, nonces, 1, everyone, chosen)
    assert not _sent(runtime, TAG_UPLOAD)


def test_a_sum_over_other_clients_than_the_announced_sample_is_refused():
    runtime, aggregator = _setup()
    seed, nonces = _agree(runtime, aggregator)
    everyone = list(range(N_CLIENTS))
    drawn = public_sample(seed, 1, everyone, 4)
    # Each summing client is told the true sample, which holds it; the sum
    # adds three of its four clients.
    with pytest.raises(PermissionError, match="rule 'sampling'.*are not the sample"):
        _sampled_sum(runtime, aggregator, nonces, 1, everyone, drawn, summed=drawn[:3])
    assert not _sent(runtime, TAG_UPLOAD)


def test_relayed_commitments_without_the_nodes_own_are_refused_before_its_nonce_leaves():
    runtime, _ = _setup()

    def replace_client_two(relayed):
        relayed["commitments"] = relayed["commitments"].copy()
        relayed["commitments"][2] ^= 0xFF
        return relayed

    with pytest.raises(PermissionError, match="do not hold this node's in its slot"):
        _agree(runtime, relay=replace_client_two)
    assert not _sent(runtime, TAG_REVEALS)


def test_nonces_that_do_not_open_the_commitments_are_refused():
    # The server swaps its own client's nonce after seeing the honest ones.
    runtime, aggregator = _setup()
    seed, nonces = _agree(runtime, aggregator)
    forged = nonces.copy()
    forged[5] = 7
    everyone = list(range(N_CLIENTS))
    sample = public_sample(sampling_seed(everyone, forged), 1, everyone, 3)
    with pytest.raises(PermissionError, match="do not open the commitments"):
        _sampled_sum(runtime, aggregator, forged, 1, everyone, sample)


@pytest.mark.parametrize("iteration", [0, HORIZON + 1])
def test_an_iteration_outside_the_horizon_is_refused(iteration):
    runtime, aggregator = _setup()
    seed, nonces = _agree(runtime, aggregator)
    everyone = list(range(N_CLIENTS))
    sample = public_sample(seed, iteration, everyone, 3)
    with pytest.raises(PermissionError, match=f"iteration {iteration} after 0"):
        _sampled_sum(runtime, aggregator, nonces, iteration, everyone, sample)


def test_an_iteration_drawn_again_is_refused():
    # Redrawing iteration t (a sample it did not like) is not the server's choice.
    runtime, aggregator = _setup()
    seed, nonces = _agree(runtime, aggregator)
    everyone = list(range(N_CLIENTS))
    first = public_sample(seed, 2, everyone, 3)
    _sampled_sum(runtime, aggregator, nonces, 2, everyone, first)
    again = public_sample(seed, 2, everyone, 4)
    with pytest.raises(PermissionError, match="iteration 2 after 2"):
        _sampled_sum(runtime, aggregator, nonces, 2, everyone, again)


def test_a_client_counted_out_cannot_come_back():
    runtime, aggregator = _setup()
    seed, nonces = _agree(runtime, aggregator, horizon=100)
    fewer = [0, 1, 2, 3, 4]
    _sampled_sum(runtime, aggregator, nonces, 1, fewer, public_sample(seed, 1, fewer, 4))
    everyone = list(range(N_CLIENTS))
    # The first iteration's sample holding client 5 and someone who saw it counted out.
    t, sample = next(
        (t, public_sample(seed, t, everyone, 3))
        for t in range(2, 101)
        if 5 in public_sample(seed, t, everyone, 3)
    )
    with pytest.raises(PermissionError, match="counted out of the fit is active again"):
        _sampled_sum(runtime, aggregator, nonces, t, everyone, sample)


def test_a_second_commitment_and_a_missing_announcement_are_refused():
    runtime, aggregator = _setup()
    _agree(runtime, aggregator)
    with pytest.raises(PermissionError, match="committed to the fit's sampling seed already"):
        runtime.run(sampling_commit_step, tag="again", horizon=HORIZON)
    runtime.broadcast(np.array([[0.0, 0.0], [4.0, 4.0]]), tag=TAG_CENTERS)
    with pytest.raises(PermissionError, match="sent no sample announcement"):
        aggregator.sum(
            fedkmeans_lloyd_statistics, tag="cluster statistics", bounds=[1e3, None, None]
        )


def test_federated_kmeans_samples_from_the_clients_nonces():
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(400, centers=3, random_state=0)
    with recording_runtime() as runtimes:
        FederatedKMeans(3, client_fraction=0.5, partition=8, random_state=0).fit(X)
    (runtime,) = runtimes
    (reveals,) = [r for r in runtime.received if r.tag == TAG_REVEALS]
    slots = sorted(reveals)
    seed = sampling_seed(slots, np.stack([reveals[c] for c in slots]))
    # (the first five uploads are the moments' sums and bounds, the last the inertia's)
    lloyd = [sorted(r) for r in runtime.received if r.tag == TAG_UPLOAD][5:-1]
    assert lloyd
    assert lloyd == [public_sample(seed, t + 1, slots, 4) for t in range(len(lloyd))]


def test_an_announced_sample_larger_than_the_active_clients_is_refused():
    runtime, aggregator = _setup()
    seed, nonces = _agree(runtime, aggregator)
    everyone = list(range(N_CLIENTS))
    drawn = public_sample(seed, 1, everyone, 3)
    with pytest.raises(PermissionError, match="rule 'sampling'.*not the sample"):
        _sampled_sum(runtime, aggregator, nonces, 1, everyone, [*everyone, 6], summed=drawn)
    assert not _sent(runtime, TAG_UPLOAD)
