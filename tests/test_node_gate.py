"""Both runtimes serve every client step through the node's one gate.

A hostile coordinator names any client step of the package, under any method
it announces, with no public constants. A default node (``NodePolicy()``)
simulated in process and a Flower node (its ClientApp called directly) must
give the same answer to each request: the same refusal naming the same rule,
the same error, or a reply of the same form. A step the agreed method does not
run is refused by both with rule ``agreed-method``; a step whose declaration
excludes running on its own, by both with ``declared-release``; a summand in
the clear, by both with ``clear-sum``.
"""

import importlib
import inspect
import pkgutil
import re

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("cryptography")

from flwr.app import Error  # noqa: E402
from test_flower_roster import Nodes, _blocks, _federation  # noqa: E402

import skfedclust  # noqa: E402
from skfedclust.federation import Federation, InProcessRuntime  # noqa: E402
from skfedclust.flower._wire import ERROR_REFUSED  # noqa: E402
from skfedclust.node import NodePolicy, NodeRefusal  # noqa: E402
from skfedclust.node._contract import _STEP_PARAMETERS  # noqa: E402

N_NODES = 4


def _client_steps():
    """Every client step of the package, by ``module:qualname``."""
    steps = {}
    for info in pkgutil.walk_packages(skfedclust.__path__, "skfedclust."):
        if info.name.startswith("skfedclust.flower"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isfunction(obj)
                and obj.__module__ == module.__name__
                and list(inspect.signature(obj).parameters)[:4] == _STEP_PARAMETERS
            ):
                steps[f"{module.__name__}:{name}"] = obj
    return dict(sorted(steps.items()))


STEPS = _client_steps()
METHODS = ["KFed", "FederatedKMeans", "OmniFCClustering", "FederatedFuzzyCMeans"]


def _outcome_in_process(method, step):
    blocks = _blocks(N_NODES)
    X = np.vstack(blocks)
    sizes = np.cumsum([0, *(len(b) for b in blocks)])
    federation = Federation(X, [np.arange(sizes[i], sizes[i + 1]) for i in range(N_NODES)])
    federation.spawn_seeds(np.random.RandomState(0))
    runtime = InProcessRuntime(federation, policy=NodePolicy(), name=method)
    try:
        runtime.run(step, tag="t", clients=[0])
    except NodeRefusal as exc:
        return ("refused", exc.rule)
    except PermissionError:
        return ("refused", None)
    except Exception as exc:  # noqa: BLE001 - the answer is what is compared
        return ("error", type(exc).__name__)
    return ("answered",)


def _outcome_on_flower(nodes, name):
    reply = nodes.step(0, nodes.begin(0), step=name)
    if not isinstance(reply, Error):
        return ("answered",)
    if reply.code == ERROR_REFUSED:
        rule = re.search(r"refused by rule '([a-z-]+)'", reply.reason)
        return ("refused", rule.group(1) if rule else None)
    return ("error", reply.reason.partition(":")[0])


@pytest.fixture(scope="module")
def flower_nodes(tmp_path_factory):
    made = {}
    for method in METHODS:
        _, configs = _federation(tmp_path_factory.mktemp(method), N_NODES)
        nodes = Nodes(configs, method=method)
        nodes.hellos()
        made[method] = nodes
    return made


@pytest.mark.parametrize("method", METHODS)
def test_both_runtimes_answer_every_step_alike(method, flower_nodes):
    differ = {}
    outcomes = {}
    for name, step in STEPS.items():
        here = _outcome_in_process(method, step)
        there = _outcome_on_flower(flower_nodes[method], name)
        outcomes[name] = here
        if here != there:
            differ[name] = (here, there)
    assert not differ, differ
    # The gate's rules decided these before any step ran.
    for name, outcome in outcomes.items():
        step = STEPS[name]
        if getattr(step, "__skfedclust_sum_only__", False) or getattr(
            step, "__skfedclust_bound_only__", False
        ):
            assert outcome[0] == "refused", (name, outcome)


@pytest.mark.parametrize("method", METHODS)
def test_a_step_of_another_method_is_refused_naming_the_rule(method, flower_nodes):
    own = skfedclust.node.method_step_modules(method)
    foreign = [
        name
        for name in STEPS
        if name.startswith("skfedclust.methods.")
        and not any(name.partition(":")[0] == m for m in own)
    ]
    assert foreign
    for name in foreign:
        assert _outcome_in_process(method, STEPS[name]) == ("refused", "agreed-method"), name
        assert _outcome_on_flower(flower_nodes[method], name) == ("refused", "agreed-method")


def test_a_statistic_made_to_be_added_is_refused_in_the_clear_by_both():
    summands = [n for n, s in STEPS.items() if getattr(s, "__skfedclust_summand__", False)]
    assert summands
    by_method = {}
    for name in summands:
        module = name.partition(":")[0]
        method = next(
            (
                m
                for m in skfedclust.__all__
                if m[0].isupper() and module in skfedclust.node.method_step_modules(m)
            ),
            None,
        )
        by_method.setdefault(method, []).append(name)
    for method, names in by_method.items():
        for name in names:
            assert _outcome_in_process(method, STEPS[name]) == ("refused", "clear-sum"), name


def test_a_nodes_index_of_its_rows_is_built_once_per_read_only_array_and_forgotten_with_it():
    import gc

    from skfedclust.node import _policy

    rows = np.random.default_rng(0).normal(size=(500, 3))
    sent = rows[:4].mean(axis=0, keepdims=True)
    # A writable array may change between two steps: never indexed.
    assert _policy.raw_row_matches(rows, sent, 1e-4) is None
    assert id(rows) not in _policy._PROJECTIONS
    rows.flags.writeable = False
    assert _policy.raw_row_matches(rows, rows[7:8], 1e-4) == 7
    first = _policy._PROJECTIONS[id(rows)]
    assert _policy.raw_row_matches(rows, rows[9:10] + 1e-9, 1e-4) == 9
    assert _policy._PROJECTIONS[id(rows)] is first
    key = id(rows)
    del rows, first
    gc.collect()
    assert key not in _policy._PROJECTIONS
