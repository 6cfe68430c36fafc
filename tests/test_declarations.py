"""Every client step declares what it releases, and what it sends matches the declaration."""

import ast
import functools
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs

import skfedclust
from skfedclust import (
    DCClustering,
    FederatedFuzzyCMeans,
    FederatedKMeans,
    FederatedMinMaxScaler,
    FederatedStandardScaler,
    KFed,
)
from skfedclust.federation import (
    InProcessRuntime,
    Reply,
    build_federation,
    private_entropy,
    use_runtime,
)
from skfedclust.federation._runtime import resolve_client_step
from skfedclust.metrics import INTERNAL_INDICES
from skfedclust.node import NodePolicy
from skfedclust.node._declarations import (
    EXCLUSIVE_KINDS,
    RELEASE_KINDS,
    bound_only,
    contradictions,
    declared_releases,
    releases_nothing,
    releases_rows,
    summand,
    summary,
)
from skfedclust.node._policy import _arrays
from skfedclust.utils import all_estimators

STEP_PARAMETERS = ["data", "inbox", "state", "party"]
DECORATORS = {
    "bound_only",
    "data_independent",
    "dp_release",
    "on_private_rows",
    "releases_nothing",
    "releases_rows",
    "sum_only",
    "summand",
    "summary",
}
TESTS = Path(__file__).parent


def _is_step(obj, module):
    if not inspect.isfunction(obj) or obj.__module__ != module:
        return False
    return list(inspect.signature(obj).parameters)[:4] == STEP_PARAMETERS


def _package_steps():
    # Every module of the package, imported: a step in a module nothing imports
    # yet is still one a coordinator can name.
    modules = [skfedclust] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(skfedclust.__path__, "skfedclust.")
    ]
    steps = {}
    for module in modules:
        for name, obj in vars(module).items():
            if _is_step(obj, module.__name__) and obj.__qualname__ == name:
                steps[f"{module.__name__}:{name}"] = obj
    return dict(sorted(steps.items()))


STEPS = _package_steps()


def test_steps_are_found_in_every_part_of_the_package():
    modules = {name.partition(":")[0] for name in STEPS}
    for expected in (
        "skfedclust.methods._kfed",
        "skfedclust.methods._fedsc_steps",
        "skfedclust.metrics",
        "skfedclust.preprocessing",
        "skfedclust.secure._secure_sum",
    ):
        assert expected in modules
    # What the node runs by name is exactly what is found here.
    for name, step in STEPS.items():
        assert resolve_client_step(name, ("skfedclust",), role="bound") is step


@pytest.mark.parametrize("name", list(STEPS))
def test_every_client_step_declares_a_release(name):
    kinds = declared_releases(STEPS[name])
    assert kinds, f"{name} declares no kind of release: a node would refuse it"
    assert kinds <= set(RELEASE_KINDS)


@pytest.mark.parametrize("name", list(STEPS))
def test_declarations_are_consistent(name):
    step = STEPS[name]
    kinds = declared_releases(step)
    assert contradictions(step) == [], f"{name} declares {sorted(kinds)}"
    # The markers the runtimes read today agree with the kinds.
    assert ("bound-only" in kinds) == bool(getattr(step, "__skfedclust_bound_only__", False))
    assert ("sum-only" in kinds) == bool(getattr(step, "__skfedclust_sum_only__", False))
    assert ("summand" in kinds) == bool(getattr(step, "__skfedclust_summand__", False))
    reason = getattr(step, "__skfedclust_releases_rows__", None)
    assert ("rows-by-design" in kinds) == (reason is not None)
    if reason is not None:
        # The Security page lists the reason: it names what the method sends.
        assert len(reason.split()) >= 5


CHARGING = [
    name for name, step in STEPS.items() if re.search(r"\b_?charge_node\(", inspect.getsource(step))
]


def test_steps_that_charge_the_node_are_found():
    assert "skfedclust.methods._fedkmeans_steps:fedkmeans_dp_lloyd_statistics" in CHARGING
    assert "skfedclust.methods._fedsc_steps:fedsc_coefficients" in CHARGING


@pytest.mark.parametrize("name", CHARGING)
def test_a_step_that_charges_the_node_declares_a_dp_release(name):
    # The gate refuses a dp-release step that charged nothing on a node with a
    # budget; a step that charges and does not say so escapes that check.
    assert "dp-release" in declared_releases(STEPS[name])


def test_helpers_that_read_rows_are_not_steps():
    # A function with the step's leading parameters is a step a coordinator can
    # name; the indices' and FedSC's helpers are not.
    assert "skfedclust.metrics:_centers_labels_and_shifts" not in STEPS
    assert "skfedclust.methods._fedsc_steps:_local_rank" not in STEPS


def test_contradicting_kinds_are_named():
    assert contradictions({"summand", "dp-release", "private-rows"}) == []
    assert contradictions({"bound-only", "private-rows"}) == []
    assert contradictions({"summary", "rows-by-design"}) == [("rows-by-design", "summary")]
    assert contradictions({"nothing", "summary"}) == [("nothing", "summary")]
    assert contradictions({"data-independent", "dp-release"}) == [
        ("data-independent", "dp-release")
    ]
    # Every exclusion goes both ways.
    for kind, others in EXCLUSIVE_KINDS.items():
        assert all(kind in EXCLUSIVE_KINDS[other] for other in others)

    @summand
    @summary
    def both(data, inbox, state, party):
        return Reply()

    assert contradictions(both) == [("summand", "summary")]


def test_unknown_kinds_are_refused():
    from skfedclust.node._declarations import _declare

    with pytest.raises(ValueError, match="unknown release kind"):
        _declare(lambda data, inbox, state, party: None, "rows")


def _test_steps():
    """``(file, step, decorators)`` of every module-level step the tests define."""
    for path in sorted(TESTS.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            if [a.arg for a in node.args.args][:4] != STEP_PARAMETERS:
                continue
            names = set()
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                names.add(target.attr if isinstance(target, ast.Attribute) else target.id)
            yield path.name, node.name, names


def test_the_tests_own_steps_declare_a_release():
    steps = list(_test_steps())
    assert any(name == "mask_shares" for _, name, _ in steps)
    undeclared = [f"{path}:{name}" for path, name, names in steps if not names & DECORATORS]
    assert undeclared == []


# --------------------------------------------------------------------------- #
# Declarations against behaviour: every estimator fitted once, each message seen
# --------------------------------------------------------------------------- #
class RecordingPolicy(NodePolicy):
    """A simulated party's policy that notes what every step hands it to check.

    ``check_outgoing`` sees what a step sends in the clear and the plaintext
    of every secure sum, with the step that computed it.
    """

    records = None

    def check_outgoing(self, data, to_server, to_peers, step, **kwargs):
        if type(self).records is not None:
            if isinstance(step, str):
                step = resolve_client_step(step, role="bound")
            type(self).records.append((step, data, to_server, to_peers))
        return super().check_outgoing(data, to_server, to_peers, step, **kwargs)


def _float_arrays(payload):
    return (array for array in _arrays(payload) if array.dtype.kind == "f")


def _contains_a_row(array, data):
    vectors = array.reshape(1, -1) if array.ndim == 1 else array
    if vectors.ndim != 2 or vectors.shape[1] != data.shape[1]:
        return False
    return bool(np.any(np.all(np.isclose(vectors[:, None, :], data[None]), axis=2)))


def _violations(step, data, to_server, to_peers):
    """What the message breaks of what ``step`` declares (empty: nothing)."""
    kinds = declared_releases(step)
    name = step.__qualname__
    problems = []
    sent = [to_server, *(to_peers or {}).values()]
    if kinds == {"nothing"} and (to_server is not None or to_peers):
        problems.append(f"{name} declares 'nothing' and sends a message")
    if data is None or data.ndim != 2:
        return problems
    n_rows, width = data.shape
    if kinds == {"data-independent"}:
        for array in _arrays(sent):
            if array.shape[:1] == (n_rows,):
                problems.append(f"{name} (data-independent) sends one value per row")
            if array.dtype.kind == "f" and _contains_a_row(array, data):
                problems.append(f"{name} (data-independent) sends one of its rows")
    if "summary" in kinds or kinds & {"summand", "sum-only"}:
        for array in _float_arrays(sent):
            vectors = array.reshape(1, -1) if array.ndim == 1 else array
            if vectors.ndim == 2 and vectors.shape[1] == width and len(vectors) >= n_rows:
                problems.append(f"{name} ({sorted(kinds)}) sends as many vectors as rows")
            if array.ndim == 1 and len(array) == n_rows and n_rows != width:
                problems.append(f"{name} ({sorted(kinds)}) sends one value per row")
            if "summary" in kinds and _contains_a_row(array, data):
                problems.append(f"{name} (summary) sends one of its rows")
    if "bound-only" in kinds:
        problems.append(f"{name} (bound-only) sent its values outside a bound agreement")
    return problems


def _clients():
    X, _ = make_blobs(n_samples=150, centers=3, n_features=3, cluster_std=0.7, random_state=0)
    return [X[:50], X[50:100], X[100:]]


#: Estimator parameters for one small fit that runs most of its steps.
FIT_PARAMS = {
    # Lagrange decoding with l = t = 2 needs 7 share-holding parties.
    "OmniFCClustering": {"n_parties": 7},
}


def _fit_and_predict(estimator, clients):
    estimator.fit(clients)
    # Predict and score run steps of their own (DC's and OmniFC's uploads of new rows).
    if hasattr(estimator, "predict"):
        estimator.predict(clients[0])
    if hasattr(estimator, "score"):
        estimator.score(clients[0])


def _fits():
    clients = _clients()
    for name, Estimator in all_estimators():
        params = {"n_clusters": 3, "random_state": 0, **FIT_PARAMS.get(name, {})}
        if "compute_inertia" in Estimator().get_params():
            params["compute_inertia"] = True
        yield name, functools.partial(_fit_and_predict, Estimator(**params), clients)
    # Options that run steps of their own: a private fit, sums in the clear, FFCM v2's
    # local centers, the scaler's moments in the clear, user-supplied DC anchors.
    anchors = np.random.RandomState(0).uniform(-10, 10, size=(60, 3))
    for name, estimator in [
        ("FederatedKMeans(privacy='dp')", FederatedKMeans(3, privacy="dp", random_state=0)),
        (
            "FederatedKMeans(secure_aggregation=False)",
            FederatedKMeans(3, secure_aggregation=False, random_state=0),
        ),
        ("FederatedFuzzyCMeans(aggregation='v2')", FederatedFuzzyCMeans(3, aggregation="v2")),
        ("DCClustering(anchors=...)", DCClustering(3, anchors=anchors, random_state=0)),
    ]:
        yield name, functools.partial(_fit_and_predict, estimator, clients)
    yield (
        "FederatedStandardScaler(secure_aggregation=False)",
        lambda: FederatedStandardScaler(secure_aggregation=False).fit(clients),
    )
    yield "FederatedStandardScaler", lambda: FederatedStandardScaler().fit(clients)
    yield "FederatedMinMaxScaler", lambda: FederatedMinMaxScaler().fit(clients)

    def indices():
        # As federated_score runs them, on a runtime whose parties record.
        est = KFed(3, random_state=0).fit(clients)
        for criterion, (protocol, _) in INTERNAL_INDICES.items():
            rng = np.random.RandomState(0)
            runtime = InProcessRuntime(
                build_federation(clone(est), clients, None, None, rng),
                name=criterion,
                private_entropy=private_entropy(rng),
                policy=RecordingPolicy.simulation(),
            )
            protocol(runtime, est.cluster_centers_, random_state=rng)

    yield "federated indices", indices


@pytest.fixture(scope="module")
def recorded():
    """``[(fit, step, data, to_server, to_peers)]`` of every fit of :func:`_fits`."""
    records = []
    factory = functools.partial(InProcessRuntime, policy=RecordingPolicy.simulation())
    for name, fit in _fits():
        RecordingPolicy.records = []
        with use_runtime(factory):
            fit()
        records += [(name, *record) for record in RecordingPolicy.records]
    RecordingPolicy.records = None
    return records


def test_messages_match_their_declarations(recorded):
    fits = {name for name, *_ in recorded}
    assert len(fits) == len(all_estimators()) + 8
    problems = sorted(
        {f"{fit}: {p}" for fit, step, *message in recorded for p in _violations(step, *message)}
    )
    assert problems == []


def test_the_fits_exercise_every_kind(recorded):
    seen = {step for _, step, *_ in recorded}
    kinds = set().union(*(declared_releases(step) for step in seen))
    assert {
        "nothing",
        "data-independent",
        "summary",
        "summand",
        "sum-only",
        "rows-by-design",
    } <= kinds
    # Most of the package's steps ran (the others are of predict, private fits,
    # options off by default).
    assert len(seen) >= 45


@pytest.mark.parametrize(
    ("decorator", "payload"),
    [
        (releases_nothing, lambda X: np.zeros(1)),
        (summary, lambda X: X.copy()),
        (summand, lambda X: X * 1.0),
        (bound_only, lambda X: X.sum(axis=0)),
        (releases_rows("a step that sends rows for this test only"), None),
    ],
    ids=["nothing", "summary", "summand", "bound-only", "rows-by-design"],
)
def test_the_checks_catch_a_wrong_declaration(decorator, payload):
    """Each check above refuses a step that sends what its kind excludes."""

    @decorator
    def step(data, inbox, state, party):
        return Reply()

    X = _clients()[0]
    problems = [] if payload is None else _violations(step, X, payload(X), None)
    if payload is None:
        # A row-releasing step may send its rows: nothing to refuse.
        assert _violations(step, X, X, None) == []
    else:
        assert problems


def _print_seen(recorded):  # pragma: no cover - a helper for a reader's session
    for name in sorted({f"{s.__module__}:{s.__qualname__}" for _, s, *_ in recorded}):
        print(name)


# --------------------------------------------------------------------------- #
# The Security page's tables, generated from the code
# --------------------------------------------------------------------------- #
def _rows_of(table):
    """The first cell of every body row of a generated ``list-table``."""
    import docutils.core

    doctree = docutils.core.publish_doctree(
        table, settings_overrides={"report_level": 2, "halt_level": 2}
    )
    rows = [row for row in doctree.findall() if row.tagname == "row"]
    return [row.children[0].astext() for row in rows[1:]]


def test_the_rule_table_is_every_rule():
    from skfedclust.node import RULES
    from skfedclust.utils._step_audit import rules_table_rst

    table = rules_table_rst()
    assert _rows_of(table) == list(RULES)
    for refuses, field in RULES.values():
        assert " ".join(refuses.split()[:4]) in table
        for name in filter(None, field.split(",")):
            assert f"``{name.strip()}``" in table


def test_the_kind_table_is_every_kind_with_its_decorator():
    from skfedclust.utils._step_audit import release_kinds_table_rst

    table = release_kinds_table_rst()
    assert _rows_of(table) == list(RELEASE_KINDS)
    assert "``@releases_nothing``" in table
    assert "``@releases_rows(reason)``" in table


def test_the_node_config_table_shows_the_codes_defaults():
    from skfedclust.utils._step_audit import node_config_table_rst

    table = node_config_table_rst()
    parameters = inspect.signature(NodePolicy).parameters
    assert _rows_of(table) == [name.replace("_", "-") for name in parameters]
    lines = table.splitlines()
    for name, parameter in parameters.items():
        row = lines.index(f"   * - ``{name.replace('_', '-')}``")
        assert lines[row + 1] == f"     - ``{parameter.default!r}``"
    # No default list of methods: every method is allowed unless the operator names some.
    assert parameters["allowed_methods"].default is None


def test_the_step_table_shows_each_steps_kinds():
    from skfedclust.utils._step_audit import audit_table_rst, client_steps

    steps = client_steps()
    table = audit_table_rst(steps)
    # (Its cells use Sphinx roles, which docutils alone does not know: rows by their marker.)
    rows = [line for line in table.splitlines() if line.startswith("   * -")]
    assert len(rows) - 1 == len(steps) == len(STEPS)
    for step in steps:
        assert step.releases == tuple(sorted(declared_releases(STEPS[step.qualified_name])))
    kfed = table.index("``skfedclust.methods._kfed:kfed_local_centers``")
    assert table[kfed:].splitlines()[1] == "     - ``summary``"


def test_an_empty_node_config_has_the_tables_defaults():
    # The table shows NodePolicy's signature; a node whose config sets nothing must
    # have exactly those defaults, or the page would state another node's.
    assert vars(NodePolicy.from_node_config({})) == vars(NodePolicy())
    assert NodePolicy.from_node_config({}).allowed_methods is None
