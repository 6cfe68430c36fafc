"""A node's budget is the node's, and nothing loses it.

Attacks on the privacy ledger by a coordinator (or a careless operator) played
through the package's own code: a changed or reordered row must not open a
fresh budget; two fits of one node at once, in threads or in processes, must
not lose each other's charges nor both pass a budget or ``max-fits`` meant for
one; a ledger written once and then missing, emptied or damaged makes the node
refuse (naming the file), never start afresh; only the operator resets it.
"""

import functools
import json
import multiprocessing
import shutil
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from skfedclust import FederatedKMeans, KFed
from skfedclust.federation import InProcessRuntime, use_runtime
from skfedclust.flower.__main__ import main as flower_cli
from skfedclust.node._dp import charge_node
from skfedclust.node._ledger import (
    INDEX,
    NodeLedger,
    data_fingerprint,
    ledger_name,
    reset_ledger,
)
from skfedclust.node._policy import DEFAULT_MAX_FITS, NodePolicy
from skfedclust.node._refusal import NodeRefusal
from skfedclust.node._sum_guard import SumRefusal
from skfedclust.secure import gaussian_sigma

BOX = (-12.0, 14.0)
NAMES = [f"org-{i}" for i in range(5)]


def named_nodes(names=NAMES, **policy):
    """Simulated deployed nodes of the given identities (harvest checks off)."""
    policy = NodePolicy(min_rows_per_vector=None, refuse_raw_rows=False, **policy)
    return use_runtime(
        functools.partial(InProcessRuntime, policy=policy, node_identities=list(names))
    )


def refused(rule):
    return pytest.raises(NodeRefusal, match=f"refused by rule '{rule}'")


def _clients(seed=0):
    X, _ = make_blobs(500, centers=3, random_state=seed)
    return np.array_split(X, 5)


def _dp_fit(epsilon):
    return FederatedKMeans(3, privacy="dp", epsilon=epsilon, bounds=BOX, random_state=0)


def _record(directory, node):
    return json.loads((directory / ledger_name(node)).read_text())


# --------------------------------------------------------------------------- #
# One budget per node, whatever its rows
# --------------------------------------------------------------------------- #
def test_a_changed_or_reordered_row_opens_no_fresh_budget(tmp_path):
    clients = _clients()
    with named_nodes(dp_epsilon=1.0, privacy_ledger=tmp_path):
        _dp_fit(0.5).fit(clients)
        # The coordinator (or the data's own churn) changes one row of node 0
        # and reorders node 1's: the same nodes, the same budget.
        edited = [c.copy() for c in clients]
        edited[0][0] += 1e-3
        edited[1] = edited[1][::-1]
        with refused("dp-budget"):
            _dp_fit(0.9).fit(edited)
    # The ledger notes which version of the rows each fit ran on, as information.
    record = _record(tmp_path, "org-0")
    rows = [d["rows"] for d in record["data_sets"].values()]
    assert rows == [data_fingerprint(clients[0]), data_fingerprint(edited[0])]
    assert len(list(tmp_path.glob("*.json"))) == 5


def test_max_fits_counts_the_node_whatever_its_rows_and_defaults_to_a_finite_number(tmp_path):
    clients = _clients()
    with named_nodes(privacy_ledger=tmp_path, max_fits=2):
        KFed(3, random_state=0).fit(clients)
        KFed(3, random_state=0).fit([c[1:] for c in clients])
        with refused("max-fits"):
            KFed(3, random_state=0).fit([c[::-1] for c in clients])
    assert NodePolicy(privacy_ledger=tmp_path).ledger(clients[0], "f", node="n").max_fits == 100
    assert DEFAULT_MAX_FITS == 100
    # Set explicitly, max-fits raises the default.
    assert (
        NodePolicy(privacy_ledger=tmp_path, max_fits=500).ledger(clients[0], "f", node="n").max_fits
        == 500
    )


def test_the_default_max_fits_refuses_the_fit_after_it(tmp_path):
    ledger = NodePolicy(privacy_ledger=tmp_path).ledger(np.zeros((4, 2)), "fit", node="n")
    for i in range(DEFAULT_MAX_FITS):
        NodeLedger(tmp_path, "n", f"fit {i}", max_fits=ledger.max_fits).enter_fit()
    with refused("max-fits"):
        NodeLedger(tmp_path, "n", "one more", max_fits=ledger.max_fits).enter_fit()


# --------------------------------------------------------------------------- #
# Concurrent fits of one node: serialised, nothing lost
# --------------------------------------------------------------------------- #
N_WRITERS, N_CHARGES = 6, 6


def _charge_many(directory, fit):
    ledger = NodeLedger(directory, "node", fit)
    for i in range(N_CHARGES):
        ledger.record_releases([(f"{fit} release {i}", 1.0, 10.0, 1)])


def _run_all(target, args, use_processes):
    if use_processes:
        context = multiprocessing.get_context("fork")
        workers = [context.Process(target=target, args=a) for a in args]
    else:
        workers = [threading.Thread(target=target, args=a) for a in args]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    if use_processes:
        assert all(w.exitcode == 0 for w in workers)


@pytest.mark.parametrize("use_processes", [False, True], ids=["threads", "processes"])
def test_concurrent_fits_keep_every_charge(tmp_path, use_processes):
    _run_all(_charge_many, [(tmp_path, f"fit {k}") for k in range(N_WRITERS)], use_processes)
    kept = NodeLedger(tmp_path, "node", "reader").releases()
    assert len(kept) == N_WRITERS * N_CHARGES


def _charge_once(directory, fit, outcomes):
    policy = NodePolicy(privacy_ledger=directory, dp_epsilon=1.0)
    party = SimpleNamespace(policy=policy, ledger=NodeLedger(directory, "node", fit))
    sigma = gaussian_sigma(1.0, 0.9, 1e-5)
    try:
        charge_node({}, party, [("centers", 1.0, sigma)], 1)
    except SumRefusal as exc:
        assert exc.rule == "dp-budget"
        outcomes.put("refused")
    else:
        outcomes.put("charged")


@pytest.mark.parametrize("use_processes", [False, True], ids=["threads", "processes"])
def test_two_fits_asking_0_9_under_a_budget_of_1_cannot_both_charge(tmp_path, use_processes):
    import queue

    for trial in range(4):
        directory = tmp_path / str(trial)
        outcomes = multiprocessing.get_context("fork").Queue() if use_processes else queue.Queue()
        _run_all(_charge_once, [(directory, f"fit {k}", outcomes) for k in range(4)], use_processes)
        results = sorted(outcomes.get(timeout=10) for _ in range(4))
        assert results == ["charged", "refused", "refused", "refused"]
        assert len(NodeLedger(directory, "node", "reader").releases()) == 1


def _enter(directory, fit, outcomes, start):
    start.wait(30)
    try:
        NodeLedger(directory, "node", fit, max_fits=1).enter_fit()
    except SumRefusal as exc:
        assert exc.rule == "max-fits"
        outcomes.put("refused")
    else:
        outcomes.put("entered")


@pytest.mark.parametrize("use_processes", [False, True], ids=["threads", "processes"])
def test_max_fits_1_lets_exactly_one_of_concurrent_fits_run(tmp_path, use_processes):
    import queue

    n = 8
    for trial in range(4):
        directory = tmp_path / str(trial)
        if use_processes:
            context = multiprocessing.get_context("fork")
            outcomes, start = context.Queue(), context.Barrier(n)
        else:
            outcomes, start = queue.Queue(), threading.Barrier(n)
        _run_all(
            _enter, [(directory, f"fit {k}", outcomes, start) for k in range(n)], use_processes
        )
        results = sorted(outcomes.get(timeout=10) for _ in range(n))
        assert results == ["entered"] + ["refused"] * (n - 1)
        assert NodeLedger(directory, "node", "reader").n_fits == 1


def test_two_whole_fits_at_once_stay_within_the_budget(tmp_path):
    clients = _clients()
    done, errors = [], []

    def fit():
        with named_nodes(dp_epsilon=1.0, privacy_ledger=tmp_path):
            try:
                done.append(_dp_fit(0.9).fit(clients))
            except SumRefusal as exc:
                errors.append(exc.rule)

    threads = [threading.Thread(target=fit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(done) <= 1 and set(errors) <= {"dp-budget"}
    for name in NAMES:
        record = _record(tmp_path, name)
        assert len(record["fits"]) == 2
        assert _spent(record) <= 1.0 + 1e-9


def _spent(record):
    from skfedclust.secure import gaussian_epsilon

    mu = np.sqrt(sum(count * (s / g) ** 2 for _, _, s, g, count in record["releases"]))
    return gaussian_epsilon(mu, 1e-5)


# --------------------------------------------------------------------------- #
# A ledger written once and then missing or damaged is refused
# --------------------------------------------------------------------------- #
def _written_ledger(directory):
    ledger = NodeLedger(directory, "node", "fit 1")
    ledger.enter_fit()
    ledger.record_releases([("centers", 1.0, 4.0, 1)])
    return ledger.path


DAMAGE = {
    "deleted": lambda path: path.unlink(),
    "emptied": lambda path: path.write_text(""),
    "{}": lambda path: path.write_text("{}"),
    "null": lambda path: path.write_text("null"),
    "truncated": lambda path: path.write_text(path.read_text()[: len(path.read_text()) // 2]),
    "unparsable": lambda path: path.write_text("not a ledger"),
    "a list": lambda path: path.write_text("[]"),
    "fields of the wrong kind": lambda path: path.write_text(
        json.dumps({**json.loads(path.read_text()), "releases": None})
    ),
    "another node's": lambda path: path.write_text(
        json.dumps({**json.loads(path.read_text()), "node": "someone else"})
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_ledger_is_refused_naming_the_file(tmp_path, damage):
    path = _written_ledger(tmp_path)
    DAMAGE[damage](path)
    with refused("ledger-damaged") as refusal:
        NodeLedger(tmp_path, "node", "fit 2").enter_fit()
    assert str(path) in str(refusal.value)
    with refused("ledger-damaged"):
        NodeLedger(tmp_path, "node", "fit 2").releases()


def test_a_ledger_deleted_mid_fit_is_refused_even_with_its_directory(tmp_path):
    clients = _clients()
    policy = NodePolicy(min_rows_per_vector=None, refuse_raw_rows=False, dp_epsilon=1.0)
    ledger = NodeLedger(tmp_path / "ledger", "node", "fit")
    ledger.enter_fit()
    # The whole directory goes mid-fit (index included): the ledger of a fit
    # that wrote it knows it did.
    shutil.rmtree(tmp_path / "ledger")
    party = SimpleNamespace(policy=policy, ledger=ledger)
    with refused("ledger-damaged"):
        charge_node({}, party, [("centers", 1.0, 4.0)], 1)
    # A deployed node rebuilds its ledger at each step of a fit its handshake
    # entered: the ledger of such a step knows it was written.
    rebuilt = NodeLedger(tmp_path / "ledger", "node", "fit", written=True)
    with refused("ledger-damaged"):
        charge_node({}, SimpleNamespace(policy=policy, ledger=rebuilt), [("c", 1.0, 4.0)], 1)
    # A whole fit on simulated nodes: the ledger file of node 0 deleted after
    # the first fit is refused at the next.
    with named_nodes(dp_epsilon=1.0, privacy_ledger=tmp_path / "fits"):
        _dp_fit(0.3).fit(clients)
        (tmp_path / "fits" / ledger_name("org-0")).unlink()
        with refused("ledger-damaged"):
            _dp_fit(0.3).fit(clients)


def test_deleting_the_whole_directory_is_an_explicit_reset(tmp_path):
    _written_ledger(tmp_path / "ledger")
    shutil.rmtree(tmp_path / "ledger")
    ledger = NodeLedger(tmp_path / "ledger", "node", "fit 2")
    ledger.enter_fit()
    assert ledger.releases() == [] and ledger.n_fits == 1


def test_a_ledger_never_written_starts_empty_and_the_index_lists_it(tmp_path):
    ledger = NodeLedger(tmp_path, "node", "fit")
    assert ledger.releases() == [] and not ledger.path.exists()
    ledger.enter_fit()
    assert (tmp_path / INDEX).read_text().split() == [ledger.path.name]


# --------------------------------------------------------------------------- #
# The operator's explicit reset
# --------------------------------------------------------------------------- #
def test_only_an_explicit_reset_forgets_and_the_ledger_records_it(tmp_path, capsys):
    path = _written_ledger(tmp_path)
    assert flower_cli(["ledger", "reset", "--dir", str(tmp_path), "--what", "budget"]) == 0
    ledger = NodeLedger(tmp_path, "node", "fit 2")
    assert ledger.releases() == [] and ledger.n_fits == 1
    reset_ledger(tmp_path, "fits", node="node")
    assert ledger.n_fits == 0
    assert [what for _, what in json.loads(path.read_text())["resets"]] == ["budget", "fits"]
    flower_cli(["ledger", "show", "--dir", str(tmp_path)])
    assert "node node, 0 fits, 0 releases" in capsys.readouterr().out


def test_a_damaged_ledger_is_reset_only_whole(tmp_path):
    path = _written_ledger(tmp_path)
    path.write_text("{}")
    with pytest.raises(SystemExit):
        flower_cli(["ledger", "reset", "--dir", str(tmp_path), "--what", "budget"])
    with refused("ledger-damaged"):
        NodeLedger(tmp_path, "node", "fit 2").enter_fit()
    assert flower_cli(["ledger", "reset", "--dir", str(tmp_path), "--what", "all"]) == 0
    ledger = NodeLedger(tmp_path, "node", "fit 2")
    ledger.enter_fit()
    assert ledger.n_fits == 1 and ledger.releases() == []


# --------------------------------------------------------------------------- #
# An upgrade loses no charge
# --------------------------------------------------------------------------- #
def test_a_ledger_keyed_by_rows_is_adopted_by_the_nodes_ledger(tmp_path):
    clients = _clients()
    # Version 2 ledgers, one per client, keyed by its rows, with 0.9 spent.
    sigma = gaussian_sigma(1.0, 0.9, 1e-5)
    for c in clients:
        (tmp_path / f"{data_fingerprint(c)}.json").write_text(
            json.dumps({"version": 2, "fits": ["old"], "releases": [["old", "x", 1.0, sigma, 1]]})
        )
    with named_nodes(dp_epsilon=1.0, privacy_ledger=tmp_path), refused("dp-budget"):
        _dp_fit(0.5).fit(clients)
    record = _record(tmp_path, "org-0")
    assert record["fits"][0] == "old" and record["releases"][0][0] == "old"
    assert record["adopted"] == [f"{data_fingerprint(clients[0])}.json"]
    # Adopted once, when the node's ledger was first written: not again.
    NodeLedger(tmp_path, "org-0", "next", adopt=record["adopted"]).enter_fit()
    assert len(_record(tmp_path, "org-0")["releases"]) == len(record["releases"])


def _write_in_child(directory, done):
    NodeLedger(directory, "node", "child").record_releases([("child", 1.0, 10.0, 1)])
    done.put("written")


def test_a_process_forked_while_its_parent_writes_waits_for_it_and_writes(tmp_path):
    # A child forked while a thread of its parent holds the ledger's lock holds
    # none of it: it waits for the parent's write, then writes its own.
    context = multiprocessing.get_context("fork")
    done = context.Queue()
    ledger = NodeLedger(tmp_path, "node", "parent")
    with ledger.locked():
        record = ledger._read()
        child = context.Process(target=_write_in_child, args=(tmp_path, done))
        child.start()
        # A child that did not wait would write now, and lose its release to
        # the parent's write below.
        time.sleep(1.0)
        record["releases"].append(["parent", "parent", 1.0, 10.0, 1])
        ledger._write(record)
    assert done.get(timeout=30) == "written"
    child.join(30)
    assert sorted(r[0] for r in NodeLedger(tmp_path, "node", "reader").releases()) == [
        "child",
        "parent",
    ]
