"""coordinator="verified": the coordinator adds the uploads, the nodes verify and compute.

The claim: the coordinator learns no more than every iteration's totals over
all participants, their public set-up (row counts, binary orders, local
centers) and the result; it chooses no center, and a total it changed, a
set-up message it rewrote, an upload it left out or a round it replayed ends
the fit with a refusal. Per node and round the cost does not grow with the
federation. The coordinator of the attack tests is the test: it drives the
client steps on nodes with a deployed node's default policy and edits what
waits in their inboxes.
"""

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from test_ffcm_blind import _nodes as ffcm_nodes

from skfedclust import FederatedFuzzyCMeans, FederatedKMeans
from skfedclust.methods import _fedkmeans_verified as verified
from skfedclust.methods._fedkmeans_blind import _STATE, TAG_SETUP, blind_setup_step
from skfedclust.node import NodeRefusal

K = 3


def _blobs(n=600, seed=0):
    return make_blobs(n, centers=[[0, 0, 0], [9, 0, 0], [0, 9, 0]], random_state=seed)[0]


def _uniform(n=600, seed=0):
    """Rows without clusters: Lloyd runs many iterations (the attacks need rounds)."""
    return np.random.default_rng(seed).uniform(-1, 1, size=(n, 3))


def _nodes(blocks, ledger=None, **policy):
    return ffcm_nodes(blocks, ledger, method="FederatedKMeans", **policy)


def _fit(runtime, hook=None, **params):
    """The coordinator's own driver of a verified fit; ``{node: result or refusal}``.

    ``hook(runtime, stage)`` runs when what the coordinator sent waits in the
    inboxes: ``"public"`` (what it announced), ``"start"`` (the sum of the words
    of agreement and the drawn local centers), each round's number (its
    total), ``"result"``.
    """
    clients = list(range(runtime.n_clients))
    params = {"n_clusters": K, "n_init": 1, "max_iter": 20, "tol": 1e-4, "init": None, **params}
    public = runtime.run(
        blind_setup_step,
        tag=TAG_SETUP,
        setup=True,
        clients=clients,
        participants=clients,
        mode="verified",
        **params,
    )
    announced = runtime.server(
        verified.announce, public, participants=clients, start_drawn=params["init"] is None
    )
    runtime.broadcast(announced, tag=verified.TAG_PUBLIC)
    if hook:
        hook(runtime, "public")
    replies = runtime.run(verified.verified_reveal_step, tag=verified.TAG_AGREEMENT, setup=True)
    runtime.broadcast(runtime.server(verified.start_message, replies), tag=verified.TAG_START)
    if hook:
        hook(runtime, "start")
    for r in range(1, 3 * params["max_iter"] + 2):
        uploads = runtime.run(verified.verified_iteration_step, tag=verified.TAG_UPLOAD)
        # What the coordinator holds of the round, for the attacks' hooks.
        runtime.last_uploads = dict(uploads.items())
        total, finals = runtime.server(verified.add_uploads, uploads)
        runtime.broadcast(total, tag=verified.TAG_TOTAL)
        if hook:
            hook(runtime, r if finals != {1} else "result")
        if finals == {1}:
            break
    results = {}
    for c in clients:
        try:
            step = verified.verified_release_step
            results[c] = runtime.run(step, tag=verified.TAG_RESULT, clients=[c]).list()[0]
        except NodeRefusal as refusal:
            results[c] = refusal
    return results


# --------------------------------------------------------------------------- #
# What the estimator gives
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("offset", [0.0, 1.7e9])
def test_the_centers_are_the_blind_modes_and_kmeans_from_the_same_start(offset):
    X = _blobs() + offset
    start = X[[0, 1, 2]].copy()
    fits = {
        mode: FederatedKMeans(K, init=start, coordinator=mode, partition=8, random_state=0).fit(X)
        for mode in ("verified", "blind")
    }
    # The same arithmetic on the same exact totals: the same bits.
    np.testing.assert_array_equal(fits["verified"].cluster_centers_, fits["blind"].cluster_centers_)
    np.testing.assert_array_equal(fits["verified"].labels_, fits["blind"].labels_)
    assert fits["verified"].n_iter_ == fits["blind"].n_iter_
    km = KMeans(K, init=start, n_init=1).fit(X)
    np.testing.assert_allclose(
        fits["verified"].cluster_centers_, km.cluster_centers_, rtol=1e-12, atol=offset * 1e-15
    )
    np.testing.assert_array_equal(fits["verified"].labels_, km.labels_)
    assert fits["verified"].inertia_ == pytest.approx(km.inertia_, rel=1e-9)


def test_auto_runs_verified_above_the_blind_modes_size():
    X = _blobs(1200)
    client_ids = np.arange(len(X)) % 60
    est = FederatedKMeans(K, random_state=0).fit(X, client_ids=client_ids)
    assert est.coordinator_ == "verified" and est.init_centers_ is None
    blind = FederatedKMeans(K, random_state=0, coordinator="blind").fit(X, client_ids=client_ids)
    # The start: weighted k-means++ on the local centers of at most 50 nodes drawn by
    # the nonces; here the same clustering as the blind mode's, whose start pools all.
    order = np.lexsort(est.cluster_centers_.T[::-1])
    np.testing.assert_allclose(
        est.cluster_centers_[order],
        blind.cluster_centers_[np.lexsort(blind.cluster_centers_.T[::-1])],
        atol=1e-9,
    )
    fuzzy = FederatedFuzzyCMeans(K, n_rounds=3, random_state=0).fit(X, client_ids=client_ids)
    assert fuzzy.coordinator_ == "verified"
    fuzzy_blind = FederatedFuzzyCMeans(
        K, n_rounds=3, random_state=0, coordinator="blind", init=fuzzy.cluster_centers_
    )
    fuzzy_verified = FederatedFuzzyCMeans(
        K, n_rounds=3, random_state=0, coordinator="verified", init=fuzzy.cluster_centers_
    )
    np.testing.assert_array_equal(
        fuzzy_blind.fit(X, client_ids=client_ids).cluster_centers_,
        fuzzy_verified.fit(X, client_ids=client_ids).cluster_centers_,
    )


def test_one_round_per_iteration_and_a_nodes_cost_per_round_does_not_grow_with_the_federation():
    per_round = {}
    for n in (20, 80):
        X = _uniform(40 * n)
        start = X[[0, 1, 2]].copy()
        fits = [
            FederatedKMeans(K, init=start, coordinator="verified", max_iter=m, tol=0, partition=n)
            for m in (2, 5)
        ]
        comms = [f.fit(X).communication_ for f in fits]
        assert comms[1]["rounds"] - comms[0]["rounds"] == 3
        assert comms[0]["setup_rounds"] == 2
        per_round[n] = {
            key: (np.mean(comms[1]["per_client"][key]) - np.mean(comms[0]["per_client"][key])) / 3
            for key in ("bytes_up", "bytes_down", "bytes_peer_sent")
        }
    for key, value in per_round[20].items():
        assert per_round[80][key] == pytest.approx(value, rel=1e-12)
    assert per_round[80]["bytes_peer_sent"] == 0
    # The upload: four 32-bit limbs of every ring element and the 64 words of the code.
    length = K * 3 + 2 * K + 1
    assert per_round[80]["bytes_up"] == pytest.approx(8 * (4 * length + verified.MAC_ROWS) + 1)


def test_neighbours_are_symmetric_and_few():
    for n in (5, 13, 100, 1000):
        participants = list(range(n))
        near = {p: verified.neighbours(participants, p) for p in participants}
        for p, others in near.items():
            assert p not in others
            assert all(p in near[q] for q in others)
            assert len(others) <= max(2 * max(3, int(np.ceil(np.log2(n)))), 1)
        if n > 13:
            assert max(len(o) for o in near.values()) < n - 1


def test_the_limbs_carry_every_total_exactly():
    rng = np.random.default_rng(0)
    words = rng.integers(0, 2**63, size=(50, 2), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    limbs = verified.to_limbs(words)
    np.testing.assert_array_equal(verified.from_limbs(limbs.ravel()), words)
    # 300 uploads added slot by slot modulo 2**64: the ring's sum, carries and all.
    many = rng.integers(0, 2**63, size=(300, 50, 2), dtype=np.uint64)
    total = sum(verified.to_limbs(w).ravel() for w in many)
    expected = [
        sum(int(h) << 64 | int(lo) for h, lo in (w[i] for w in many)) % 2**128 for i in range(50)
    ]
    got = verified.from_limbs(total)
    assert [int(h) << 64 | int(lo) for h, lo in got] == expected


# --------------------------------------------------------------------------- #
# A hostile coordinator, on default nodes
# --------------------------------------------------------------------------- #
def _refused(edit, at, n=6):
    X = _uniform()

    def hook(runtime, stage):
        if stage == at:
            edit(runtime)

    with pytest.raises(NodeRefusal) as refused:
        results = _fit(_nodes(np.array_split(X, n)), hook=hook)
        raise next(r for r in results.values() if isinstance(r, NodeRefusal))
    return refused.value


def _each_inbox(runtime, tag, change):
    for c, inbox in enumerate(runtime._inboxes):
        if tag in inbox:
            inbox[tag] = change(c, inbox[tag])


def test_honest_nodes_release_one_result_and_send_the_coordinator_only_the_declared():
    X = _blobs()
    runtime = _nodes(np.array_split(X, 6))
    results = _fit(runtime)
    first = results[0]
    for other in results.values():
        for a, b in zip(first, other):
            np.testing.assert_array_equal(a, b)
    km = KMeans(K, init=first[0], n_init=1, max_iter=1).fit(X)
    np.testing.assert_allclose(km.cluster_centers_, first[0], atol=1e-12)
    for message in (m for m in runtime.ledger.messages if m.receiver == "server"):
        assert message.tag in (
            TAG_SETUP,
            verified.TAG_AGREEMENT,
            verified.TAG_UPLOAD,
            verified.TAG_RESULT,
        )
    # Pair seeds go to neighbours, the code key from the lowest node to every other.
    peer = [m for m in runtime.ledger.messages if m.tag == TAG_SETUP and m.receiver != "server"]
    assert {(m.sender, m.receiver) for m in peer if m.sender != 0} <= {
        (a, b) for a in range(6) for b in verified.neighbours(list(range(6)), a)
    }


def test_a_total_the_coordinator_changed_is_refused():
    def change(runtime):
        def nudge(c, message):
            total = np.array(message["total"])
            total[0] += np.uint64(1)
            return {**message, "total": total}

        _each_inbox(runtime, verified.TAG_TOTAL, nudge)

    refusal = _refused(change, 2)
    assert refusal.rule == "consistent-view" and "not the sum of the uploads" in str(refusal)


def test_a_total_by_a_multiple_of_two_to_the_63_is_refused():
    # The weakest change for a code modulo 2**64: each row catches it with
    # probability 1/2 only; 64 rows do with 1 - 2**-64.
    def change(runtime):
        def nudge(c, message):
            total = np.array(message["total"])
            total[::7] += np.uint64(1 << 63)
            return {**message, "total": total}

        _each_inbox(runtime, verified.TAG_TOTAL, nudge)

    assert _refused(change, 3).rule == "consistent-view"


def test_a_total_that_leaves_out_an_upload_is_refused():
    # Node 5's upload left out (a dropped node, or a coordinator isolating the
    # others): its masks with its neighbours no longer cancel, nor does its code's.
    def leave_out_node_5(runtime):
        others = [u for c, u in runtime.last_uploads.items() if c != 5]
        total = sum(np.asarray(u["upload"]) for u in others)
        code = sum(np.asarray(u["code"]) for u in others)
        _each_inbox(runtime, verified.TAG_TOTAL, lambda c, m: {"total": total, "code": code})

    refusal = _refused(leave_out_node_5, 2)
    assert refusal.rule == "consistent-view" and "not the sum of the uploads" in str(refusal)


def test_a_replayed_total_is_refused():
    earlier = {}

    def hook(runtime, stage):
        if stage == 2:
            earlier["total"] = dict(runtime._inboxes[0][verified.TAG_TOTAL])
        if stage == 3:
            _each_inbox(runtime, verified.TAG_TOTAL, lambda c, m: earlier["total"])

    X = _uniform()
    with pytest.raises(NodeRefusal, match="not the sum of the uploads"):
        results = _fit(_nodes(np.array_split(X, 6)), hook=hook)
        raise next(r for r in results.values() if isinstance(r, NodeRefusal))


def test_drawn_local_centers_the_coordinator_rewrote_are_refused():
    # The coordinator shows everyone heavy local centers of its choice in node 3's
    # name (a start it would choose): node 3's code does not match.
    def rewrite(runtime):
        def heavy(c, shown):
            fake = dict(shown["local"][3])
            fake["local centers"] = np.full((3, 3), 0.5) + np.arange(3)[:, None]
            fake["local sizes"] = np.full(3, 10**9, dtype=np.int64)
            return {**shown, "local": {**shown["local"], 3: fake}}

        _each_inbox(runtime, verified.TAG_START, heavy)

    refusal = _refused(rewrite, "start")
    assert refusal.rule == "consistent-view" and "participant 3's local centers" in str(refusal)


def test_the_draw_names_distinct_participants_a_key_chooses():
    participants = list(range(0, 20_000, 2))
    draws = [verified.draw_digest(bytes([i]) * 32) for i in range(40)]
    chosen = [verified.drawn_nodes(draw, participants) for draw in draws]
    for nodes in chosen:
        assert len(set(nodes)) == verified.START_NODES and set(nodes) <= set(participants)
    # The same on every node (the order of the list it was given does not matter),
    # another for another key; over 40 keys every part of the roster is drawn.
    assert verified.drawn_nodes(draws[0], participants[::-1]) == chosen[0]
    assert len({tuple(nodes) for nodes in chosen}) == len(draws)
    drawn = np.concatenate(chosen)
    counts, _ = np.histogram(drawn, bins=10, range=(0, 20_000))
    assert counts.min() > 0.5 * len(drawn) / 10
    # Up to START_NODES participants, every one of them.
    assert verified.drawn_nodes(draws[0], [5, 3, 9]) == [3, 5, 9]


def test_local_centers_of_a_node_the_draw_did_not_name_are_refused():
    X = _uniform(60 * 10)
    blocks = np.array_split(X, 60)

    def hook(runtime, stage):
        if stage != "start":
            return
        drawn = set(runtime._inboxes[0][verified.TAG_START]["local"])
        assert len(drawn) == verified.START_NODES
        outsider = next(p for p in range(60) if p not in drawn)

        def extra(c, shown):
            some = next(iter(shown["local"].values()))
            return {**shown, "local": {**shown["local"], outsider: some}}

        _each_inbox(runtime, verified.TAG_START, extra)

    with pytest.raises(NodeRefusal, match="not those of the nodes the draw named"):
        _fit(_nodes(blocks), hook=hook)


def test_a_drawn_nodes_local_centers_left_out_are_refused():
    # Leaving out some of the drawn local centers would let the coordinator choose
    # among starts; every drawn node sends a coded message, even without centers.
    def leave_out(runtime):
        def fewer(c, shown):
            local = dict(shown["local"])
            del local[min(local)]
            return {**shown, "local": local}

        _each_inbox(runtime, verified.TAG_START, fewer)

    refusal = _refused(leave_out, "start")
    assert refusal.rule == "sampling"


def test_a_drawn_node_too_small_for_local_centers_still_answers_the_draw():
    X = _uniform(60)
    # Node 0 holds one row: no local center of two rows on a default node. It
    # answers the draw with an empty, coded message; the fit goes on.
    blocks = [X[:1], X[1:30], X[30:45], X[45:]]
    shown = {}

    def keep(runtime, stage):
        if stage == "start":
            shown.update(runtime._inboxes[1][verified.TAG_START]["local"])

    results = _fit(_nodes(blocks), n_clusters=2, hook=keep)
    assert sorted(shown) == [0, 1, 2, 3]
    assert np.asarray(shown[0]["local centers"]).shape == (0, 3)
    assert not any(isinstance(r, NodeRefusal) for r in results.values())


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("exponent", -5, "well-formed"),
        ("rows", 3, "well-formed"),
        ("rows", 10**6, "consistent-view"),
        ("exponent", 40, "consistent-view"),
    ],
    ids=["order below the node's", "rows below the node's", "rows inflated", "order inflated"],
)
def test_an_announcement_told_to_one_node_is_refused_before_any_upload(field, value, rule):
    # Told to one node only, a smaller binary order would scale its upload above
    # the others' and put its statistics alone in the total's high bits. The node
    # refuses what cannot be its own; otherwise the words of agreement differ, and
    # every node refuses before any statistic leaves it.
    X = _uniform()
    runtime = _nodes(np.array_split(X, 6))

    def tell_node_2(runtime, stage):
        if stage == "public":
            announced = dict(runtime._inboxes[2][verified.TAG_PUBLIC])
            announced[field] = np.int64(value)
            runtime._inboxes[2][verified.TAG_PUBLIC] = announced

    with pytest.raises(NodeRefusal) as refused:
        _fit(runtime, hook=tell_node_2)
    assert refused.value.rule == rule
    if rule == "consistent-view":
        assert "were not all told the same fit" in str(refused.value)
    assert not [m for m in runtime.ledger.messages if m.tag == verified.TAG_UPLOAD]


def test_a_draw_that_is_not_the_keys_is_refused():
    def redraw(runtime):
        _each_inbox(runtime, verified.TAG_PUBLIC, lambda c, m: {**m, "draw": bytes(32)})

    assert _refused(redraw, "public").rule == "sampling"


def test_parameters_that_differ_for_one_node_are_refused_before_any_upload():
    X = _uniform()
    for change in ({"max_iter": 7}, {"tol": 0.5}, {"mode": "blind"}):
        runtime = _nodes(np.array_split(X, 6))
        clients = list(range(6))
        public = runtime.run(
            blind_setup_step,
            tag=TAG_SETUP,
            setup=True,
            participants=clients,
            per_client={3: change},
            n_clusters=K,
            n_init=1,
            max_iter=20,
            tol=1e-4,
            init=None,
            mode="verified",
        )
        if change.get("mode") == "blind":
            # A node set up blind runs no step of the verified protocol.
            with pytest.raises(NodeRefusal) as refused:
                runtime.run(verified.verified_reveal_step, tag=verified.TAG_AGREEMENT, clients=[3])
            assert refused.value.rule == "agreed-method"
            continue
        announced = runtime.server(
            verified.announce, public, participants=clients, start_drawn=True
        )
        runtime.broadcast(announced, tag=verified.TAG_PUBLIC)
        replies = runtime.run(verified.verified_reveal_step, tag=verified.TAG_AGREEMENT, setup=True)
        runtime.broadcast(runtime.server(verified.start_message, replies), tag=verified.TAG_START)
        with pytest.raises(NodeRefusal, match="were not all told the same fit"):
            runtime.run(verified.verified_iteration_step, tag=verified.TAG_UPLOAD)
        assert not [m for m in runtime.ledger.messages if m.tag == verified.TAG_UPLOAD]


def test_an_array_start_is_refused_by_a_default_node():
    X = _blobs()
    with pytest.raises(NodeRefusal) as refused:
        _fit(_nodes(np.array_split(X, 4)), init=X[:3])
    assert refused.value.rule == "coordinator-centers"


def test_a_re_run_with_one_participant_fewer_is_refused(tmp_path):
    X = _blobs()
    blocks = np.array_split(X, 5)
    allow = {"allow_coordinator_centers": ("FederatedKMeans",)}

    class Stop(Exception):
        pass

    def stop(runtime, stage):
        if stage == 1:
            raise Stop

    with pytest.raises(Stop):
        _fit(_nodes(blocks, tmp_path, **allow), hook=stop, init=X[:3])
    with pytest.raises(PermissionError, match="one-sum-per-input"):
        _fit(_nodes(blocks[:4], tmp_path, **allow), hook=stop, init=X[:3])


def test_an_upload_is_masked_and_only_the_total_opens():
    X = _blobs()
    seen = {}

    def keep(runtime, stage):
        if stage == 1:
            seen["uploads"] = runtime.last_uploads
            seen["total"] = runtime._inboxes[0][verified.TAG_TOTAL]["total"]

    _fit(_nodes(np.array_split(X, 8)), hook=keep)
    uploads = [np.asarray(u["upload"]) for u in seen["uploads"].values()]
    # Plain limbs are below 2**32; masked slots are uniform modulo 2**64.
    for upload in uploads:
        assert (upload >= np.uint64(1 << 32)).mean() > 0.9
    total = sum(uploads)
    np.testing.assert_array_equal(total, seen["total"])
    assert np.all(total < np.uint64(8 << 32))


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="LIMIT (the lowest participant colluding): it draws the fit's code key; "
    "given the key, the coordinator computes the code of any total it likes, and the "
    "nodes accept a total it chose (it steers every node's centers, as a colluder's own "
    "biased upload does in the blind mode).",
)
def test_the_key_holder_in_collusion_cannot_make_the_nodes_accept_a_forged_total():
    X = _uniform()

    def forge(runtime, stage):
        if stage == 2:
            # The key holder's state: the key, the round and the agreement.
            kept = runtime.private_states()[0][_STATE]

            def forged(c, message):
                total = np.array(message["total"])
                # The top limb of the first sum: moves center 0 by about 0.3.
                total[3] += np.uint64(1 << 24)
                return {"total": total, "code": verified._mac_matrix(kept, len(total)) @ total}

            _each_inbox(runtime, verified.TAG_TOTAL, forged)

    honest = _fit(_nodes(np.array_split(X, 6)))
    got = _fit(_nodes(np.array_split(X, 6)), hook=forge)
    assert all(np.array_equal(a, b) for a, b in zip(honest[1], got[1]))


def test_nodes_for_the_start_other_than_the_draws_are_refused():
    # With more nodes than the start takes, the coordinator could name the nodes
    # whose local centers make the start; the nodes check the names are the draw's.
    X = _uniform(60 * 10)

    def choose(runtime, stage):
        if stage == "public":
            _each_inbox(
                runtime,
                verified.TAG_PUBLIC,
                lambda c, m: {**m, "drawn": np.arange(verified.START_NODES, dtype=np.int64)},
            )

    with pytest.raises(NodeRefusal) as refused:
        _fit(_nodes(np.array_split(X, 60)), hook=choose)
    assert refused.value.rule == "sampling" and "not the draw's" in str(refused.value)
