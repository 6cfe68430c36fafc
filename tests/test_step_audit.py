"""The audit of client steps lists every step of the package, classified by its declarations."""

import importlib
import inspect
import pkgutil
import sys

import pytest

import skfedclust
from skfedclust.federation._runtime import resolve_client_step
from skfedclust.utils import _step_audit
from skfedclust.utils._step_audit import (
    BOUND_ONLY,
    RELEASES_ROWS,
    SHARED,
    SUMMARIES,
    audit_table_rst,
    client_steps,
)
from skfedclust.utils.discovery import all_estimators

BOUND_ONLY_STEPS = {
    "skfedclust.secure._moments:moments_rows",
    "skfedclust.secure._moments:moments_deviations",
    "skfedclust.methods._fedkmeans_steps:fedkmeans_row_extremes",
    "skfedclust.methods._fedkmeans_steps:fedkmeans_deviation_extremes",
    "skfedclust.methods._fedsc_steps:fedsc_rows",
}
RELEASES_ROWS_STEPS = {
    "skfedclust.methods._dc:dc_party_intermediate",
    "skfedclust.methods._ffcm:ffcm_seed_centers",
}


@pytest.fixture(scope="module")
def steps():
    return client_steps()


def _every_function_of_the_package():
    # Every function reachable as a module attribute, re-exports included, named where it is
    # defined: whatever the audit skips must not be one that a node would run.
    modules = [skfedclust]
    for info in pkgutil.walk_packages(skfedclust.__path__, "skfedclust."):
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:
            assert info.name.startswith("skfedclust.flower")
    for module in modules:
        for obj in vars(module).values():
            if inspect.isfunction(obj) and obj.__module__.startswith("skfedclust"):
                yield obj


def test_every_client_step_is_listed(steps):
    listed = {step.qualified_name for step in steps}
    assert len(listed) == len(steps)
    accepted = set()
    for function in _every_function_of_the_package():
        name = f"{function.__module__}:{function.__qualname__}"
        try:
            resolve_client_step(name, ("skfedclust",), role="bound")
        except PermissionError:
            continue
        accepted.add(name)
    assert accepted == listed
    # Steps of every kind of module: methods, shared steps, the secure sum, metrics.
    assert {
        "skfedclust.methods._kfed:kfed_local_centers",
        "skfedclust.methods._centroid_steps:lloyd_statistics",
        "skfedclust.secure._secure_sum:secure_sum_upload_step",
        "skfedclust.preprocessing:client_range",
        "skfedclust.metrics:cluster_moments_step",
    } <= listed


def test_every_step_belongs_to_a_method_or_is_shared(steps):
    estimators = dict(all_estimators())
    assert {step.method for step in steps} <= set(estimators) | {SHARED}
    for step in steps:
        if step.method != SHARED:
            cls = estimators[step.method]
            assert step.module in (cls.__module__, *getattr(cls, "_client_step_modules", ()))
    by_name = {step.qualified_name: step for step in steps}
    assert by_name["skfedclust.methods._fedsc_steps:fedsc_rows"].method == "FedSpectralClustering"
    assert by_name["skfedclust.methods._dc:dc_party_intermediate"].method == "DCClustering"
    # A method's own step module; a module that defines another method stays that one's.
    lloyd = by_name["skfedclust.methods._fedkmeans_steps:fedkmeans_lloyd_statistics"]
    assert lloyd.method == "FederatedKMeans"
    assert by_name["skfedclust.methods._kfed:kfed_local_centers"].method == "KFed"
    assert by_name["skfedclust.secure._moments:moments_rows"].method == SHARED
    assert by_name["skfedclust.metrics:silhouette_sum_step"].method == SHARED
    # Grouped: each method's steps are together, the shared ones last.
    methods = [step.method for step in steps]
    groups = [m for i, m in enumerate(methods) if i == 0 or methods[i - 1] != m]
    assert len(groups) == len(set(groups))
    assert groups[-1] == SHARED


def test_declarations_are_classified(steps):
    by_name = {step.qualified_name: step for step in steps}
    for name in BOUND_ONLY_STEPS:
        assert by_name[name].kind == BOUND_ONLY
        assert by_name[name].role.startswith("only inside a bound agreement")
    for name in RELEASES_ROWS_STEPS:
        assert by_name[name].kind == RELEASES_ROWS
        assert by_name[name].role.startswith("releases rows by design: ")
    reason = sys.modules["skfedclust.methods._ffcm"].ffcm_seed_centers.__skfedclust_releases_rows__
    assert by_name["skfedclust.methods._ffcm:ffcm_seed_centers"].role.endswith(reason)
    kfed = by_name["skfedclust.methods._kfed:kfed_local_centers"]
    assert kfed.kind == SUMMARIES
    assert kfed.role.startswith("summaries: counted by min-rows-per-vector")
    # The declarations the audit reads are the ones the runtime enforces.
    for step in steps:
        function = resolve_client_step(step.qualified_name, ("skfedclust",), role="bound")
        declared = getattr(function, "__skfedclust_bound_only__", False)
        assert (step.kind == BOUND_ONLY) == declared
        if declared:
            with pytest.raises(PermissionError, match="bound"):
                resolve_client_step(step.qualified_name, ("skfedclust",), role="top")


def test_per_client_inputs_and_summaries(steps):
    by_name = {step.qualified_name: step for step in steps}
    gold = by_name["skfedclust.methods._gold:gold_labels_and_inertia"]
    assert gold.per_client_inputs == ("micro-cluster labels",)
    assert by_name["skfedclust.methods._kfed:kfed_local_centers"].per_client_inputs == ()
    assert by_name["skfedclust.methods._kfed:kfed_local_centers"].summary == (
        "Client step: k-means on the client's own rows; send the centers."
    )
    # A sentence ends at a full stop followed by a capital, not inside "(Eq. 43)".
    assert "Eq. 43" in by_name["skfedclust.methods._fedsc_steps:fedsc_rank_histogram"].summary
    # Roles relative to the step's module become literals.
    kept = by_name["skfedclust.methods._centroid_steps:lloyd_kept_statistics"].summary
    assert kept.startswith("``lloyd_statistics`` for the centers")
    for step in steps:
        assert step.summary, step.qualified_name
        assert ":func:" not in step.summary and ":class:" not in step.summary


def test_functions_that_are_not_client_steps_are_not_listed(steps):
    listed = {step.qualified_name for step in steps}
    for name in (
        # Server side: the runtime comes first.
        "skfedclust.methods._centroid_steps:secure_lloyd_step",
        # Helpers of a step, helpers of the runtime.
        "skfedclust.methods._fedkmeans_steps:dp_moments_exact",
        "skfedclust.federation._runtime:resolve_client_step",
        "skfedclust.federation._runtime:bound_only",
        "skfedclust.utils._step_audit:client_steps",
    ):
        assert name not in listed
        module, _, function = name.partition(":")
        assert inspect.isfunction(getattr(importlib.import_module(module), function))


def test_table_has_one_row_per_step(steps):
    table = audit_table_rst(steps)
    assert table.startswith(".. list-table::")
    rows = [line for line in table.splitlines() if line.startswith("   * -")]
    assert len(rows) == len(steps) + 1  # and the header row
    for step in steps:
        assert table.count(f"``{step.qualified_name}``") == 1
    assert table.count(":class:`~skfedclust.") == len({s.method for s in steps} - {SHARED})
    assert audit_table_rst() == table


def test_flower_modules_are_skipped_without_flower(monkeypatch, steps):
    monkeypatch.setattr(_step_audit, "_flower_importable", lambda: False)
    names = [module.__name__ for module in _step_audit._modules()]
    assert "skfedclust.methods._kfed" in names
    assert not any(name.startswith("skfedclust.flower") for name in names)
    assert [step.qualified_name for step in client_steps()] == [
        step.qualified_name for step in steps if not step.module.startswith("skfedclust.flower")
    ]


def test_a_node_that_allows_a_method_runs_every_step_of_it(steps):
    """A method's steps may live in modules of their own (``_client_step_modules``): a node
    whose policy allows the method runs all of them, and a node that allows another method
    none of them."""
    from skfedclust.node._policy import NodePolicy

    methods = sorted({step.method for step in steps} - {SHARED})
    for step in steps:
        if step.method == SHARED:
            continue
        allowing = NodePolicy(allowed_methods=[step.method])
        allowing.check_step(step.qualified_name, method=step.method)
        other = next(m for m in methods if m != step.method and m != "FederatedKMeans")
        if step.module in getattr(dict(all_estimators())[other], "_client_step_modules", ()):
            continue
        with pytest.raises(PermissionError, match="belongs to none of them"):
            NodePolicy(allowed_methods=[other]).check_step(step.qualified_name)
