"""The protocol runtime: client steps send or keep, server steps get only what was sent."""

import joblib
import numpy as np
import pytest
from sklearn.datasets import make_blobs

from skfedclust import KFed
from skfedclust.federation import (
    SERVER,
    Federation,
    InProcessRuntime,
    Received,
    Reply,
    data_independent,
    reads,
    releases_nothing,
    releases_rows,
    side_by_side,
    summary,
)
from skfedclust.utils.protocol_checks import check_protocol


def _kept(runtime, key, clients=None):
    """What parties kept under ``key`` (a test's look inside the parties)."""
    states = runtime.private_states()
    return [states[c][key] for c in (range(runtime.n_clients) if clients is None else clients)]


def _federation(n_clients=3, rows=4, seed=0):
    X = np.arange(n_clients * rows * 2, dtype=float).reshape(-1, 2)
    rows_ = np.array_split(np.arange(len(X)), n_clients)
    fed = Federation(X, rows_)
    fed.spawn_seeds(np.random.RandomState(seed))
    return fed


@summary
def send_sum_keep_mean(data, inbox, state, party, *, offset):
    return Reply(send=data.sum() + offset, keep={"mean": data.mean(axis=0)})


@summary
def send_state(data, inbox, state, party):
    return Reply(send=state["mean"])


@releases_nothing
def echo_inbox(data, inbox, state, party):
    return Reply(keep={"inbox": dict(inbox)})


@summary
def seeded_noise(data, inbox, state, party):
    rng = np.random.RandomState(party.seed)
    return Reply(send=data @ rng.rand(data.shape[1]), keep={"labels": np.zeros(len(data), int)})


@releases_rows("a test of peer delivery sends one row to the next party")
def share_with_next(data, inbox, state, party, *, n_parties):
    me = int(data[0, 0]) // 8
    return Reply(to_peers={(me + 1) % n_parties: data[:1]})


@releases_nothing
def data_is_none(data, inbox, state, party):
    return Reply(keep={"had_data": data is not None})


@releases_nothing
def returns_tuple(data, inbox, state, party):
    return data, None


def server_total(received, *, scale):
    return scale * sum(received.list())


def test_run_records_what_is_sent_and_keeps_the_rest_private():
    runtime = InProcessRuntime(_federation())
    received = runtime.run(send_sum_keep_mean, tag="sums", offset=1.0)
    assert isinstance(received, Received) and list(received) == [0, 1, 2]
    fed = runtime._federation
    assert [received[c] for c in range(3)] == [fed.client_data(c).sum() + 1 for c in range(3)]
    # What a client kept is available to its own later steps, and is sent only when
    # a step chooses to send it.
    assert runtime.ledger.report()["bytes_up"] == 3 * 8
    again = runtime.run(send_state, tag="means")
    np.testing.assert_array_equal(again[1], fed.client_data(1).mean(axis=0))
    report = runtime.ledger.report()
    assert report["rounds"] == 2
    assert report["bytes_up"] == 3 * 8 + 3 * 16


def test_server_messages_arrive_in_the_next_step_inbox_once():
    runtime = InProcessRuntime(_federation())
    runtime.broadcast(np.ones(2), tag="centers")
    runtime.send({1: np.zeros(3)}, tag="extra")
    runtime.run(echo_inbox, tag="look")
    inboxes = _kept(runtime, "inbox")
    assert set(inboxes[0]) == {"centers"} and set(inboxes[1]) == {"centers", "extra"}
    runtime.run(echo_inbox, tag="look again")
    assert _kept(runtime, "inbox") == [{}, {}, {}]
    report = runtime.ledger.report()
    assert report["bytes_down"] == 3 * 16 + 24
    # Downloads alone open no round: nothing was sent by a client.
    assert report["rounds"] == 0


@releases_nothing
@reads()
def reads_nothing(data, inbox, state, party):
    return Reply(keep={"set-up inbox": dict(inbox)})


@releases_nothing
@reads("extra")
def reads_extra(data, inbox, state, party):
    return Reply(keep={"extra inbox": dict(inbox)})


def test_a_step_declared_to_read_some_tags_leaves_the_others_for_the_next_step():
    # A set-up step that reads nothing does not take the centers sent before
    # it: they wait for the step that reads them, server messages and peer
    # messages alike.
    runtime = InProcessRuntime(_federation(), n_parties=4)
    runtime.run(share_with_next, tag="shares", n_parties=4)
    runtime.broadcast(np.ones(2), tag="centers")
    runtime.send({1: np.zeros(3)}, tag="extra")
    runtime.run(reads_nothing, tag="set-up")
    assert _kept(runtime, "set-up inbox") == [{}, {}, {}]
    runtime.run(reads_extra, tag="extra step")
    extra = _kept(runtime, "extra inbox")
    assert [set(i) for i in extra] == [set(), {"extra"}, set()]
    runtime.run(echo_inbox, tag="look")
    inboxes = _kept(runtime, "inbox")
    assert [set(i) for i in inboxes] == [{"centers"}, {"centers", "shares"}, {"centers", "shares"}]
    # The centers are still server messages to the step that reads them.
    runtime.broadcast(np.ones(2), tag="centers")
    runtime.run(reads_nothing, tag="set-up again")
    runtime.run(server_tags_of_inbox, tag="tags")
    assert _kept(runtime, "tags") == [{"centers"}] * 3


@releases_nothing
def server_tags_of_inbox(data, inbox, state, party):
    return Reply(keep={"tags": set(inbox.server_tags)})


def test_server_steps_take_only_received_messages():
    runtime = InProcessRuntime(_federation())
    received = runtime.run(send_sum_keep_mean, tag="sums", offset=0.0)
    assert runtime.server(server_total, received, scale=2.0) == 2 * sum(received.list())
    forged = Received("sums", {0: 1.0})
    with pytest.raises(TypeError, match="Received"):
        runtime.server(server_total, forged, scale=1.0)
    with pytest.raises(TypeError, match="Received"):
        runtime.server(server_total, [1.0, 2.0], scale=1.0)


def test_peer_messages_are_counted_and_delivered():
    runtime = InProcessRuntime(_federation(), n_parties=4)
    runtime.run(share_with_next, tag="shares", n_parties=4)
    report = runtime.ledger.report()
    assert report["bytes_peer"] == 3 * 16 and report["bytes_up"] == 0
    assert report["rounds"] == 1
    np.testing.assert_array_equal(report["per_client"]["bytes_peer_received"], [0, 16, 16, 16])
    runtime.run(echo_inbox, tag="look", clients=[3])
    (inbox,) = _kept(runtime, "inbox", [3])
    assert list(inbox["shares"]) == [2]


def test_parties_without_data_get_none():
    runtime = InProcessRuntime(_federation(n_clients=2), n_parties=3)
    runtime.run(data_is_none, tag="x", clients=[0, 1, 2])
    assert _kept(runtime, "had_data", [0, 1, 2]) == [True, True, False]


def test_setup_exchanges_are_not_rounds():
    runtime = InProcessRuntime(_federation())
    runtime.run(send_sum_keep_mean, tag="set-up", setup=True, offset=0.0)
    runtime.run(send_sum_keep_mean, tag="upload", offset=0.0)
    report = runtime.ledger.report()
    assert (report["rounds"], report["setup_rounds"]) == (1, 1)


def test_steps_must_return_a_reply_and_be_module_level():
    runtime = InProcessRuntime(_federation())
    with pytest.raises(TypeError, match="Reply"):
        runtime.run(returns_tuple, tag="bad")

    def local_step(data, inbox, state, party):
        return Reply()

    with pytest.raises(TypeError, match="module-level"):
        runtime.run(local_step, tag="bad")


def test_state_is_read_only_inside_a_step():
    def mutate(data, inbox, state, party):
        state["x"] = 1

    runtime = InProcessRuntime(_federation())
    mutate.__qualname__ = "mutate"  # pretend module level to reach the state check
    releases_nothing(mutate)  # and declared, to pass the gate
    with pytest.raises(TypeError):
        runtime.run(mutate, tag="bad")


@pytest.mark.parametrize("backend", ["loky", "threading"])
def test_results_do_not_depend_on_n_jobs_or_backend(backend):
    ref = InProcessRuntime(_federation(n_clients=5, seed=3))
    want = ref.run(seeded_noise, tag="x").list()
    with joblib.parallel_config(backend=backend):
        runtime = InProcessRuntime(_federation(n_clients=5, seed=3), n_jobs=2)
        got = runtime.run(seeded_noise, tag="x").list()
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_estimator_runs_on_dask_with_identical_results():
    distributed = pytest.importorskip("distributed")
    X, _ = make_blobs(90, centers=3, random_state=0)
    reference = KFed(n_clusters=3, partition=3, random_state=0).fit(X)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2):
        with joblib.parallel_config(backend="dask"):
            est = KFed(n_clusters=3, partition=3, random_state=0, n_jobs=2).fit(X)
    np.testing.assert_array_equal(est.labels_, reference.labels_)
    np.testing.assert_array_equal(est.cluster_centers_, reference.cluster_centers_)


@pytest.mark.parametrize("backend", [None, "threading", "loky"])
def test_client_work_is_single_threaded(backend):
    from joblib import parallel_config

    runtime = InProcessRuntime(_federation(), n_jobs=None if backend is None else 2)
    with parallel_config(backend=backend or "sequential"):
        runtime.run(record_threads, tag="threads")
    for info in _kept(runtime, "threads"):
        assert all(n == 1 for n in info), info


@pytest.mark.parametrize(
    "n_jobs, backend, pool, n_threads",
    [
        (None, None, "MainThread", "cores"),
        (2, "threading", "skfedclust-client", 1),
        (2, "loky", "MainThread", 1),  # a worker process's main thread
    ],
)
def test_steps_run_on_the_persistent_pool_under_threads_and_get_their_share_of_cores(
    n_jobs, backend, pool, n_threads
):
    from sklearn.utils._openmp_helpers import _openmp_effective_n_threads

    from skfedclust.federation._runtime import threads_per_step

    runtime = InProcessRuntime(_federation(n_clients=4), n_jobs=n_jobs)
    with joblib.parallel_config(backend=backend or "threading"):
        runtime.run(record_thread_name, tag="where")
    names = _kept(runtime, "where")
    assert all(name.startswith(pool) for name, _ in names), names
    cores = _openmp_effective_n_threads()
    expected = cores if n_threads == "cores" else max(1, cores // 2)
    assert {threads for _, threads in names} == {expected} == {threads_per_step(n_jobs)}


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_side_by_side_steps_run_on_one_thread_each_when_steps_would_run_in_turn(cores, monkeypatch):
    from skfedclust.federation import _runtime

    monkeypatch.setattr(_runtime, "_openmp_effective_n_threads", lambda: cores)
    runtime = InProcessRuntime(_federation(n_clients=4))
    runtime.run(record_thread_name_side_by_side, tag="where")
    where = _kept(runtime, "where")
    runtime.run(record_threads_side_by_side, tag="threads")
    if cores == 1:
        assert where == [("MainThread", 1)] * 4
    else:
        # As many threads as a step in turn would get, one thread each.
        assert all(name.startswith("skfedclust-client") for name, _ in where), where
        assert {threads for _, threads in where} == {1}
    for info in _kept(runtime, "threads"):
        assert all(n == 1 for n in info), info  # BLAS and OpenMP still one thread each
    # An unmarked step still runs in turn, with the cores.
    runtime.run(record_thread_name, tag="in turn")
    assert _kept(runtime, "where") == [("MainThread", cores)] * 4


def test_side_by_side_changes_no_result_and_a_single_client_keeps_the_cores(monkeypatch):
    from skfedclust.federation import _runtime

    want = InProcessRuntime(_federation(n_clients=5, seed=3)).run(seeded_noise, tag="x").list()
    monkeypatch.setattr(_runtime, "_openmp_effective_n_threads", lambda: 2)
    runtime = InProcessRuntime(_federation(n_clients=5, seed=3))
    got = runtime.run(side_by_side(seeded_noise_copy), tag="x").list()
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    runtime.run(record_thread_name_side_by_side, tag="where", clients=[2])
    assert _kept(runtime, "where", clients=[2]) == [("MainThread", 2)]


@summary
def seeded_noise_copy(data, inbox, state, party):
    return seeded_noise(data, inbox, state, party)


@releases_nothing
@side_by_side
def record_thread_name_side_by_side(data, inbox, state, party):
    return record_thread_name(data, inbox, state, party)


@releases_nothing
@side_by_side
def record_threads_side_by_side(data, inbox, state, party):
    return record_threads(data, inbox, state, party)


@releases_nothing
def record_thread_name(data, inbox, state, party):
    import threading

    return Reply(keep={"where": (threading.current_thread().name, party.n_threads)})


@releases_nothing
def record_threads(data, inbox, state, party):
    from threadpoolctl import threadpool_info

    return Reply(keep={"threads": [p["num_threads"] for p in threadpool_info()]})


def test_kfed_server_never_gets_unsent_sizes():
    from skfedclust.methods._centroid_steps import secure_inertia_communication

    X, _ = make_blobs(120, centers=3, random_state=0)
    clients = [X[:40], X[40:80], X[80:]]
    # compute_inertia=False (the default): no secure sums of inertia_ after the fit.
    inertia = dict.fromkeys(secure_inertia_communication(3), 0)
    # Each client: 3 x 2 float64 centers and its local iteration count (int64).
    runtime = check_protocol(
        KFed(3, random_state=0),
        clients,
        rounds=1,
        bytes_up=3 * (3 * 2 * 8 + 8) + inertia["bytes_up"],
        bytes_down=3 * 3 * 2 * 8 + inertia["bytes_down"],
    )
    (step, (uploads,), _) = runtime.server_inputs[0]
    assert all(
        len(p) == 2 and p[0].shape == (3, 2) and np.ndim(p[1]) == 0 for p in uploads.values()
    )
    weighted = check_protocol(
        KFed(3, weighted=True, random_state=0),
        clients,
        bytes_up=3 * (3 * 2 * 8 + 3 * 8 + 8) + inertia["bytes_up"],
    )
    (_, (uploads,), _) = weighted.server_inputs[0]
    assert all(len(p) == 3 for p in uploads.values())


def test_ledger_names_the_server():
    runtime = InProcessRuntime(_federation())
    runtime.run(send_sum_keep_mean, tag="sums", offset=0.0)
    assert {m.receiver for m in runtime.ledger.messages} == {SERVER}


@data_independent
def send_k(data, inbox, state, party, *, k, base):
    return Reply(send=np.full(1, base + k))


def test_per_client_public_constants():
    runtime = InProcessRuntime(_federation())
    received = runtime.run(
        send_k, tag="k", per_client={0: {"k": 1}, 1: {"k": 2}, 2: {"k": 3}}, base=10
    )
    assert [int(v[0]) for v in received.values()] == [11, 12, 13]
    # Public constants are protocol parameters, not messages.
    assert runtime.ledger.report()["bytes_down"] == 0


# --------------------------------------------------------------------------- #
# Parties: public index and seed, private generator; declared outputs
# --------------------------------------------------------------------------- #
@data_independent
def send_index_and_private_draw(data, inbox, state, party):
    return Reply(send=(np.int64(party.index), party.rng.random(3)), keep={"seed": party.seed})


@releases_nothing
def output_row_numbers(data, inbox, state, party):
    return Reply(output={"labels": data[:, 0].astype(np.int64)})


def test_steps_know_their_public_index_in_one_exchange():
    runtime = InProcessRuntime(_federation(), n_parties=4)
    received = runtime.run(send_index_and_private_draw, tag="x", clients=range(4))
    assert [int(p[0]) for p in received.list()] == [0, 1, 2, 3]
    assert runtime.ledger.report()["rounds"] == 1
    # The public seed is the one the server drew; parties without data have none.
    assert _kept(runtime, "seed", range(4)) == [*runtime.seeds.tolist(), None]


def test_private_draws_differ_between_parties_and_steps_and_reproduce():
    def draws(entropy, n_jobs=None):
        runtime = InProcessRuntime(_federation(), private_entropy=entropy, n_jobs=n_jobs)
        first = [p[1] for p in runtime.run(send_index_and_private_draw, tag="a").list()]
        second = [p[1] for p in runtime.run(send_index_and_private_draw, tag="b").list()]
        return np.array(first), np.array(second)

    first, second = draws([1, 2, 3])
    assert len({tuple(r) for r in np.vstack([first, second])}) == 6
    # Same entropy: the same private draws, whatever n_jobs.
    again = draws([1, 2, 3], n_jobs=2)
    np.testing.assert_array_equal(first, again[0])
    np.testing.assert_array_equal(second, again[1])
    # Other private entropy, same public seeds: other draws.
    assert not np.allclose(first, draws([4, 5, 6])[0])


def test_private_generator_does_not_follow_the_public_seed():
    # Two runtimes with the same public seeds but different private entropy:
    # a server that knows every public seed cannot replay a party's draws.
    a = InProcessRuntime(_federation(seed=0), private_entropy=[1])
    b = InProcessRuntime(_federation(seed=0), private_entropy=[2])
    np.testing.assert_array_equal(a.seeds, b.seeds)
    draw_a = a.run(send_index_and_private_draw, tag="x").list()[0][1]
    draw_b = b.run(send_index_and_private_draw, tag="x").list()[0][1]
    assert not np.allclose(draw_a, draw_b)
    replay = np.random.default_rng(int(a.seeds[0])).random(3)
    assert not np.allclose(draw_a, replay)


def test_fit_private_entropy_is_reproducible_and_leaves_public_draws_alone():
    from skfedclust.federation import private_entropy

    rs = np.random.RandomState(7)
    before = rs.get_state()[1].copy()
    e1 = private_entropy(rs)
    np.testing.assert_array_equal(rs.get_state()[1], before)  # nothing drawn
    assert e1 == private_entropy(np.random.RandomState(7))
    assert e1 != private_entropy(np.random.RandomState(8))
    # The public seeds drawn next are those of a generator never asked for entropy.
    assert rs.randint(1000) == np.random.RandomState(7).randint(1000)


def test_outputs_are_handed_back_in_input_order_and_never_sent():
    X = np.arange(12, dtype=float).reshape(6, 2)
    fed = Federation(X, [np.array([4, 0, 2]), np.array([5, 1, 3])])
    fed.spawn_seeds(np.random.RandomState(0))
    runtime = InProcessRuntime(fed)
    runtime.run(output_row_numbers, tag="labels")
    assert runtime.ledger.report()["bytes_up"] == 0
    np.testing.assert_array_equal(runtime.hand_back("labels"), X[:, 0])
    assert runtime.hand_back("nothing declared") is None


def test_runtime_factory_is_injectable_without_monkeypatching():
    from skfedclust.federation import current_runtime_factory, use_runtime

    built = []

    class Counting(InProcessRuntime):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    X, _ = make_blobs(60, centers=2, random_state=0)
    with use_runtime(Counting):
        est = KFed(2, random_state=0).fit([X[:30], X[30:]])
    assert current_runtime_factory() is InProcessRuntime
    assert len(built) == 1
    np.testing.assert_array_equal(
        est.labels_, KFed(2, random_state=0).fit([X[:30], X[30:]]).labels_
    )


def test_the_protocol_api_has_no_read_back_of_party_state():
    from skfedclust.federation import Runtime

    for name in ("gather_rows", "client_outputs", "private_states"):
        assert not hasattr(Runtime, name), name


def test_consecutive_rows_reach_their_client_as_a_read_only_view_others_as_a_copy():
    X = np.arange(24, dtype=float).reshape(12, 2)
    fed = Federation(X, [np.arange(0, 5), np.arange(5, 12)])
    shuffled = Federation(X, [np.array([0, 2, 4]), np.array([1, 3, 5])])
    assert np.shares_memory(fed.client_data(1), fed.X)
    assert not np.shares_memory(shuffled.client_data(0), shuffled.X)
    np.testing.assert_array_equal(shuffled.client_data(0), X[[0, 2, 4]])
    fed.spawn_seeds(np.random.RandomState(0))
    runtime = InProcessRuntime(fed)
    block = runtime._data(1)
    np.testing.assert_array_equal(block, X[5:12])
    assert not block.flags.writeable and fed.X.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        block[0, 0] = -1.0
