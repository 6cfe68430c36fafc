"""A malicious coordinator asking one statistic twice, under another guise or over other clients.

Rule ``one-sum-per-input`` keys every sum a node joins by what the step
computes from and by what its values reveal (their decoded real values, at a
canonical precision), and refuses a second sum of one statistic over clients
that differ from an earlier sum's by fewer than ``min-sum-participants``.
Method-specific secure steps (OmniFC's offset) run only in their method's fits.
The attacks go through the package's runtime and secure sum.
"""

import numpy as np
import pytest
from test_secure_sum_attacks import Coordinator, refused

from skfedclust.federation import Federation, InProcessRuntime, Reply, summand
from skfedclust.node import NodeRefusal
from skfedclust.node._policy import NodePolicy
from skfedclust.node._sum_guard import decoded_values, isolated_clients, value_keys
from skfedclust.secure import SecureAggregator
from skfedclust.secure._lcc_offset import (
    column_sum_exponent,
    fixed_point_column_sums,
    offset_mean,
    offset_sum_step,
)
from skfedclust.secure._moments import moments_raw
from skfedclust.utils.protocol_checks import RecordingRuntime


@summand
def float32_column_sums(data, inbox, state, party):
    """Client step: the column sums, as float32."""
    return Reply(send=data.sum(axis=0).astype(np.float32))


@summand
def column_sums(data, inbox, state, party):
    """Client step: the column sums, as float64."""
    return Reply(send=data.sum(axis=0))


def _data(n_clients=6, n_per=20, d=3, seed=0):
    X = np.random.default_rng(seed).uniform(-1, 1, size=(n_per * n_clients, d)) + 5.0
    return X, [np.arange(n_per * c, n_per * (c + 1)) for c in range(n_clients)]


def _fit(X, rows, policy):
    """A new fit (a new runtime) of nodes with ``policy`` on ``rows``."""
    federation = Federation(X, rows)
    federation.spawn_seeds(np.random.RandomState(0))
    return InProcessRuntime(federation, policy=policy)


def _shift(X, rows):
    # The shift OmniFC's offset agrees: every client's sums and the total fit int64.
    return column_sum_exponent(float(np.abs(X).max()), len(X) * len(rows))


def _offset_sums(runtime, shift, clients=None, tag="offset"):
    total, _ = SecureAggregator(runtime, seed=3).sum(
        offset_sum_step, tag=tag, bounds=None, clients=clients, shift=shift
    )
    return total


NODES = {
    "default": lambda: NodePolicy(),
    # A node with a budget: offset_sum_step's integers are not floats.
    "dp": lambda: NodePolicy(dp_epsilon=1.0),
}


# --------------------------------------------------------------------------- #
# The same statistic at another fixed-point shift, scale or dtype
# --------------------------------------------------------------------------- #
def test_the_offset_attack_leaks_a_clients_column_sums_from_nodes_without_a_ledger():
    # What the rule stands in the way of: nodes that keep no ledger forget
    # their sums between fits, and the six clients' sums at one shift minus
    # the five others' at another, each a fit of its own, are client 0's
    # column sums (to 3e-12). The tests below have default nodes refuse it.
    X, rows = _data()
    shift, forgetful = _shift(X, rows), NodePolicy(privacy_ledger=False)
    six = _offset_sums(_fit(X, rows, forgetful), shift)
    five = _offset_sums(_fit(X, rows, forgetful), shift + 1, clients=list(range(1, 6)))
    leaked = offset_mean(six, 1, shift) - offset_mean(five, 1, shift + 1)
    np.testing.assert_allclose(leaked, X[rows[0]].sum(0), rtol=0, atol=1e-11)


@pytest.mark.parametrize("node", list(NODES))
@pytest.mark.parametrize("other", [1, -1, 12, 40])
def test_the_offset_sums_at_another_shift_over_five_clients_are_refused(node, other):
    # The attack of the issue, in one fit: six clients' exact column sums at one
    # shift, then the five others' at another (finer, coarser, much coarser: at
    # 40 binary orders coarser each row is rounded to 2**-9, the values differ
    # beyond the canonical precision, and the step's key, which leaves the
    # declared shift out, is what refuses it).
    X, rows = _data()
    shift = _shift(X, rows)
    runtime = _fit(X, rows, NODES[node]())
    if node == "dp":
        # A node with a budget sends no exact value of any dtype: the attack ends
        # at its first sum.
        with refused("dp-only"):
            _offset_sums(runtime, shift)
        return
    total = _offset_sums(runtime, shift)
    np.testing.assert_allclose(offset_mean(total, 1, shift), X.sum(0), rtol=1e-12)
    with refused("one-sum-per-input"):
        _offset_sums(runtime, shift + other, clients=list(range(1, 6)))


@pytest.mark.parametrize("node", list(NODES))
def test_the_offset_sums_at_another_shift_in_a_later_fit_are_refused(node):
    # The same across fits: the node's ledger keeps the sums' keys.
    X, rows = _data()
    shift = _shift(X, rows)
    if node == "dp":
        with refused("dp-only"):
            _offset_sums(_fit(X, rows, NODES[node]()), shift)
        return
    _offset_sums(_fit(X, rows, NODES[node]()), shift)
    with refused("one-sum-per-input") as refusal:
        _offset_sums(_fit(X, rows, NODES[node]()), shift + 1, clients=list(range(1, 6)))
    assert "an earlier fit on this node's rows" in str(refusal.value)


@pytest.mark.parametrize("second", [offset_sum_step, float32_column_sums])
def test_the_column_sums_in_another_dtype_over_five_clients_are_refused(second):
    # Float64 column sums (with the row count) over everyone, then the same
    # sums as fixed-point integers or as float32 over the five others: other
    # steps, other dtypes, the same values.
    X, rows = _data()
    runtime = _fit(X, rows, NodePolicy())
    SecureAggregator(runtime, seed=3).sum(moments_raw, tag="moments", bounds=[64.0, None])
    public = {"shift": _shift(X, rows)} if second is offset_sum_step else {}
    bounds = None if second is offset_sum_step else 256.0
    with refused("one-sum-per-input"):
        SecureAggregator(runtime, seed=3).sum(
            second, tag="again", bounds=bounds, clients=list(range(1, 6)), **public
        )


def test_the_same_statistic_at_another_scale_and_dtype_gets_a_common_key():
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = rng.uniform(-1, 1, size=(20, 8)) * 10.0 ** rng.integers(-5, 5)
        exact = rows.sum(0)
        shift = column_sum_exponent(float(np.abs(rows).max()), 20 * 6)
        keys = set(value_keys(exact))
        for other in (shift, shift + 1, shift + 4, shift - 3):
            fixed = decoded_values(fixed_point_column_sums(rows, other), other)
            assert keys & set(value_keys(fixed))
        assert keys & set(value_keys(decoded_values(exact.astype(np.float32))))
    # Values that differ beyond the canonical precision are another statistic.
    assert not set(value_keys(exact)) & set(value_keys(exact + 1e-3 * np.abs(exact).max()))
    # An all-zero plaintext tells nothing of the rows: no key.
    assert value_keys(np.zeros(3)) == ()


# --------------------------------------------------------------------------- #
# Honest change: a repeat over clients that differ by the minimum or more
# --------------------------------------------------------------------------- #
def test_isolated_clients_are_the_new_groups_below_the_minimum():
    five, six, eight = range(5), range(6), range(8)
    # One new member, or one left out: a group of one.
    assert isolated_clients([five], six, 3) == (5,)
    assert isolated_clients([six], five, 3) == (5,)
    # Three new members: a group of three; two: a group of two.
    assert isolated_clients([five], eight, 3) == ()
    assert isolated_clients([five], range(7), 3) == (5, 6)
    # The same clients again, or the first sum: nothing new.
    assert isolated_clients([five], five, 3) == ()
    assert isolated_clients([], five, 3) == ()
    # Two samples sharing three clients: each with two of its own, or three.
    assert isolated_clients([five], [0, 1, 2, 5, 6], 3) == (3, 4)
    assert isolated_clients([range(6)], [0, 1, 2, 6, 7, 8], 3) == ()


def test_three_sums_whose_pairwise_differences_are_large_are_refused_if_they_isolate_one():
    # Sums over A + {4} and {4} + B, then over their union: each pair differs by
    # four clients, yet the first two minus the third is client 4's vector.
    first, second = [0, 1, 2, 3, 4], [4, 5, 6, 7, 8]
    assert isolated_clients([first], second, 3) == (4,)
    with_two_shared = [3, 4, 5, 6, 7, 8]
    assert isolated_clients([first], with_two_shared, 3) == (3, 4)
    # Sums that already leave client 4 in a group of its own (kept before this
    # rule, or by a node that joined them): their union would open it.
    assert isolated_clients([[0, 1, 2, 3, 4], [4, 5, 6, 7, 8]], range(9), 3) == (4,)
    # Groups of three: accepted, and so is the union over them (it adds no group);
    # a set that splits a group is not.
    first, second = range(6), range(3, 9)
    assert isolated_clients([first], second, 3) == ()
    assert isolated_clients([first, second], range(9), 3) == ()
    assert isolated_clients([first, second], [0, 1, 6, 7, 8], 3) == (2,)


def _eight():
    X = np.random.RandomState(0).normal(size=(80, 2))
    federation = Federation(X, np.array_split(np.arange(80), 8))
    federation.spawn_seeds(np.random.RandomState(1))
    return X, RecordingRuntime(federation, private_entropy=[7])


def test_one_new_member_is_refused_and_three_new_together_are_accepted():
    _, runtime = _eight()
    coordinator = Coordinator(runtime)
    first = [0, 1, 2, 3, 4]
    coordinator.complete_sum(first)
    # One new member: the difference of the two sums is client 5's vector.
    with refused("one-sum-per-input") as refusal:
        coordinator.upload([*first, 5], run_on=first)
    assert "[5]" in str(refusal.value)
    # One left out, or two new members: still fewer than the minimum of 3.
    with refused("one-sum-per-input"):
        coordinator.upload(first[:-1])
    with refused("one-sum-per-input"):
        coordinator.upload([*first, 5, 6], run_on=first)
    # Three new together: their sum is a sum of three, as any secure sum.
    coordinator.complete_sum([*first, 5, 6, 7])
    # The two sums' groups are {0..4} and {5, 6, 7}: a third over {3..7} would
    # split both into groups of two and three, the pair {3, 4} among them.
    with refused("one-sum-per-input") as refusal:
        coordinator.upload([3, 4, 5, 6, 7])
    assert "[3, 4]" in str(refusal.value)


def test_a_repeat_with_three_clients_dropped_is_accepted_and_with_one_refused():
    _, runtime = _eight()
    # A complete graph: every survivor keeps enough neighbours to attest.
    coordinator = Coordinator(runtime, degree=7)
    everyone = list(range(8))
    coordinator.complete_sum(everyone)
    for survivors, accepted in ((everyone[3:], True), (everyone[1:], False)):
        dropped = sorted(set(everyone) - set(survivors))
        coordinator.upload(everyone, run_on=survivors)
        coordinator.announce(survivors, dropped, survivors)
        coordinator.attest(survivors)
        if accepted:
            coordinator.unmask(survivors)
        else:
            with refused("one-sum-per-input"):
                coordinator.unmask(survivors)


def test_a_later_fit_with_three_new_members_is_accepted_and_with_one_refused():
    X, rows = _data(n_clients=8)
    first = list(range(5))

    def sums(clients):
        runtime = _fit(X, rows, NodePolicy())
        total, _ = SecureAggregator(runtime, seed=3).sum(
            column_sums, tag="sums", bounds=64.0, clients=clients
        )
        return total

    np.testing.assert_allclose(sums(first), X[np.concatenate(rows[:5])].sum(0))
    sums(list(range(8)))
    with refused("one-sum-per-input"):
        sums([*first, 5])


# --------------------------------------------------------------------------- #
# Method-specific secure steps run only in their method's fits
# --------------------------------------------------------------------------- #
OFFSET = "skfedclust.secure._lcc_offset:offset_sum_step"


@pytest.mark.parametrize("method", ["KFed", "FederatedKMeans", "GOLDClustering"])
@pytest.mark.parametrize("step", [OFFSET, "skfedclust.secure._lcc:lcc_share_step"])
def test_a_node_agreed_to_another_method_refuses_omnifcs_secure_steps(method, step):
    with pytest.raises(NodeRefusal, match="this node agreed to a fit of") as refusal:
        NodePolicy().check_step(step, method=method)
    assert refusal.value.rule == "agreed-method"
    NodePolicy().check_step(step, method="OmniFCClustering")
    # Named through the package that re-exports it, it is still OmniFC's.
    with pytest.raises(NodeRefusal, match="this node agreed to a fit of"):
        NodePolicy().check_step("skfedclust.secure:lcc_share_step", method=method)


def test_a_node_allowing_other_methods_refuses_omnifcs_secure_steps():
    with pytest.raises(NodeRefusal) as refusal:
        NodePolicy(allowed_methods=["KFed"]).check_step(OFFSET)
    assert refusal.value.rule == "allowed-methods"
    NodePolicy(allowed_methods=["OmniFCClustering"]).check_step(OFFSET)


def test_the_generic_secure_sum_steps_stay_shared():
    for step in (
        "skfedclust.secure._secure_sum:secure_sum_upload_step",
        "skfedclust.secure._moments:moments_raw",
        "skfedclust.secure._sum_bounds:exponent_histogram_step",
        "skfedclust.secure._sampling:sampling_commit_step",
    ):
        NodePolicy().check_step(step, method="KFed")


def test_an_omnifc_step_wrapped_in_a_secure_sum_is_refused_in_another_methods_fit():
    # The secure sum is shared, its summand is not: the node checks the step
    # it runs inside the sum as any step of the fit.
    from skfedclust.node import agreed_method

    X, rows = _data()
    runtime = _fit(X, rows, NodePolicy())
    with agreed_method("KFed"), pytest.raises(NodeRefusal) as refusal:
        _offset_sums(runtime, _shift(X, rows))
    assert refusal.value.rule == "agreed-method"
    with agreed_method("OmniFCClustering"):
        _offset_sums(_fit(X, rows, NodePolicy()), _shift(X, rows))


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_flower_node_in_a_kfed_fit_refuses_omnifcs_offset_step(tmp_path, wrapped):
    # The coordinator announced a k-FED fit at the handshake, then asks each
    # node for OmniFC's exact column sums: on their own, or as the summand of
    # a (shared) secure sum. The node refuses both, naming rule agreed-method.
    roster = pytest.importorskip("test_flower_roster")
    _, configs = roster._federation(tmp_path, 4)
    nodes = roster.Nodes(configs, method="KFed")
    nodes.hellos()
    step, public = OFFSET, {"shift": -40}
    if wrapped:
        step = "skfedclust.secure._secure_sum:secure_sum_upload_step"
        public = {
            "inner": OFFSET,
            "inner_public": {"shift": -40},
            "sum_id": 0,
            "participants": [0, 1, 2, 3],
            "graph": {"seed": 7, "degree": 3, "n_clients": 4},
            "threshold": 2,
            "shifts": None,
            "n_clients": 4,
        }
    reason = roster._refused(nodes.step(0, nodes.begin(0), step=step, public=public), "agreed")
    assert "refused by rule 'agreed-method'" in reason and OFFSET in reason


def test_checking_a_step_imports_no_module_outside_the_package(tmp_path, monkeypatch):
    # The name comes from the coordinator: the node's method check must not
    # import what the runtime's allow-list would refuse (its import runs code).
    import sys

    name = "a_module_the_coordinator_names_for_its_side_effects"
    (tmp_path / f"{name}.py").write_text("def step(data, inbox, state, party):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(NodeRefusal):
        NodePolicy(allowed_methods=["KFed"]).check_step(f"{name}:step", method="KFed")
    NodePolicy().check_step(f"{name}:step", method="KFed")
    assert name not in sys.modules


def test_client_sets_given_as_the_roster_less_some_isolate_what_lists_isolate():
    # A node keeps a sum's clients as the roster less those left out; the rule
    # must find exactly the groups it finds on the same sets as lists.
    from skfedclust.node._sum_guard import ClientSet

    rng = np.random.default_rng(0)
    size = 40
    for _ in range(300):
        sets = []
        for _ in range(rng.integers(1, 5)):
            absent = rng.choice(size, size=rng.integers(0, 6), replace=False)
            sets.append(sorted(set(range(size)) - set(absent.tolist())))
        *earlier, current = sets
        minimum = int(rng.integers(2, 5))
        expected = isolated_clients(earlier, current, minimum)
        compact = isolated_clients(
            [ClientSet.of(e, size) for e in earlier], ClientSet.of(current, size), minimum
        )
        # The smallest region is found either way (ties may name another one).
        assert bool(compact) == bool(expected)
        if expected:
            assert len(compact) == len(expected)


def test_value_keys_keep_the_byte_layout_privacy_ledgers_hold():
    # A deployed node's privacy ledger keeps these keys across fits (and
    # versions of the package): a key hashed another way would never match
    # one it holds, and a repeat of a statistic would pass unseen.
    import hashlib
    import math

    values = np.array([12.3, -3.7, 0.9, 0.0])
    order = math.frexp(12.3)[1]
    expected = []
    for k in range(3):
        cells = np.floor(np.ldexp(values, 16 - order) + k / 3).astype(np.int64)
        h = hashlib.sha256(b"skfedclust secure sum")
        h.update(b"s" + repr(b"plaintext value").encode())
        h.update(b"s%d" % order)
        h.update(b"s%d" % k)
        h.update(b"a" + cells.dtype.str.encode() + repr(cells.shape).encode() + cells.tobytes())
        expected.append(h.digest())
    assert value_keys(values) == tuple(expected)
