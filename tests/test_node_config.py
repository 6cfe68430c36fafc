"""A node's configuration is validated, not guessed: every field of the registry, swept.

An unknown field (a misspelling) or a value its field cannot take is refused,
naming the field; an empty, fractional or malformed value never switches a
protection off; the defaults are what the docs say, and the docs list every
field.
"""

import math
import re
from pathlib import Path

import numpy as np
import pytest

from skfedclust.node._node_config import (
    FLOWER_FIELDS,
    NODE_CONFIG_FIELDS,
    NODE_FIELDS,
    POLICY_FIELDS,
    check_node_config,
    node_config_value,
)
from skfedclust.node._policy import NodePolicy

ROOT = Path(__file__).resolve().parents[1]

#: Values every field refuses: empty, blank, a float not-a-number or infinity.
ALWAYS_REFUSED = ["", "   ", float("nan"), float("inf")]
#: Refused by every field that is not a path or a name (for which they are names).
NOT_NUMBERS = ["abc", "nan", "inf", "-inf"]
#: Fields whose value is any non-empty text: a path, a name.
TEXT_FIELDS = {
    "data-path",
    "new-data-path",
    "labels-path",
    "predicted-labels-path",
    "client-name",
    "identity-key",
    "trusted-identities",
    "privacy-ledger",
}

#: For every field: a valid value as an operator writes it, what it parses to,
#: and the malformed values (besides ALWAYS_REFUSED) it must refuse.
CASES = {
    "allowed-methods": ("KFed, FeCA", ("KFed", "FeCA"), ["KMeans", "KFed,,FeCA", ",", 3]),
    "min-rows-per-vector": ("5", 5, ["0.5", 0.5, "2.5", "-1", -1, True, "true"]),
    "refuse-raw-rows": ("strict", "strict", ["maybe", "2", 0.5, "stric", "-1"]),
    "raw-row-tolerance": ("1e-3", 1e-3, ["-1e-4", -0.1, True]),
    "dc-full-rank-maps": ("yes", True, ["2", 0.5, "truee", "-1", "y"]),
    "dp-epsilon": ("0.5", 0.5, ["0", "-1", -1.0, "1e9", True]),
    "dp-delta": ("1e-6", 1e-6, ["0", "1", "-1e-5", "1.5", True]),
    "dp-neighbouring": ("replace-one", "replace-one", ["add-remove", "replace", "-1"]),
    "dp-trusted-shares": ("3", 3, ["1.5", "0", "-2", True]),
    "allow-clear-sums": ("off", False, ["2", 0.5, "of", "-1", "none"]),
    "min-sum-participants": ("4", 4, ["2.5", "1", "-3", True]),
    "max-bound-queries": ("0", 0, ["0.5", "-1", True]),
    "privacy-ledger": ("none", False, [True, 3]),
    "max-fits": ("4", 4, ["2.5", "0", "-1", True]),
    "allow-row-release": ("FederatedFuzzyCMeans", ("FederatedFuzzyCMeans",), ["KMeans", ","]),
    "allow-coordinator-centers": ("FederatedKMeans", ("FederatedKMeans",), ["KMeans", ","]),
    "data-path": ("/data/org_a.npy", "/data/org_a.npy", [3, True]),
    "new-data-path": ("/data/new.npy", "/data/new.npy", [3, True]),
    "labels-path": ("/out/labels.npy", "/out/labels.npy", [3, True]),
    "predicted-labels-path": ("/out/p.npy", "/out/p.npy", [3, True]),
    "client-name": ("org-a", "org-a", [True, 1.5]),
    "identity-key": ("/keys/a.pem", "/keys/a.pem", [3, True]),
    "trusted-identities": ("/keys/trusted.txt", "/keys/trusted.txt", [3, True]),
    "allow-unauthenticated": ("true", True, ["2", 0.5, "tru", "-1"]),
    "n-threads": ("2", 2, ["1.5", "0", "-1", True]),
    "private-seed": ("5", 5, ["1.5", "-1", True]),
    "row-group": ("1", 1, ["0.5", "-1", True]),
    "columns": ("0, 1,2", [0, 1, 2], ["0,,1", "0,0", "-1,2", "0.5", "a,b", "1;2"]),
    "step-worker": ("on", True, ["2", 0.5, "sure", "-1"]),
    "step-worker-idle": ("30", 30.0, ["0", "-1", True]),
    "partition-id": ("0", 0, ["1.5", "-1", True]),
    "num-partitions": ("3", 3, ["0", "1.5", "-1", True]),
}

#: Misspellings of policy fields an attack review tried: each was ignored.
REVIEWED_MISSPELLINGS = {
    "dp-epsilom": "dp-epsilon",
    "max-fit": "max-fits",
    "min-rows-per-vectr": "min-rows-per-vector",
    "refuse-raw-row": "refuse-raw-rows",
    "allowed-method": "allowed-methods",
    "min-sum-participant": "min-sum-participants",
    "dp-delt": "dp-delta",
    "allow-clear-sum": "allow-clear-sums",
    "max-bound-query": "max-bound-queries",
    "privacy-ledgr": "privacy-ledger",
    "raw-row-tolerence": "raw-row-tolerance",
    "dc-full-rank-map": "dc-full-rank-maps",
    "dp-neighboring": "dp-neighbouring",
    "dp_epsilon": "dp-epsilon",
}


def _refused(config, field):
    """The ValueError a node config gets, checked to name ``field``."""
    with pytest.raises(ValueError, match=f"node config {re.escape(field)}\\b") as info:
        NodePolicy.from_node_config(config)
    return str(info.value)


def test_the_sweep_covers_every_field_of_the_registry():
    assert set(CASES) == set(NODE_CONFIG_FIELDS)
    # One table: the policy's fields, the Flower node's, Flower's own.
    assert len(NODE_CONFIG_FIELDS) == len(POLICY_FIELDS) + len(NODE_FIELDS) + len(FLOWER_FIELDS)
    assert {f.attribute for f in POLICY_FIELDS} <= set(NodePolicy.__init__.__code__.co_varnames)


@pytest.mark.parametrize("field", sorted(CASES))
def test_a_valid_value_is_read_as_the_field_says(field):
    text, parsed, _ = CASES[field]
    assert check_node_config({field: text}) == {field: parsed}
    assert node_config_value({field: text}, field) == parsed
    if NODE_CONFIG_FIELDS[field].scope == "policy":
        config = {field: text}
        if field == "max-fits":
            config["privacy-ledger"] = "/tmp/ledger"
        policy = NodePolicy.from_node_config(config)
        expected = {
            "allowed-methods": ["KFed", "FeCA"],
            "max-bound-queries": None,  # 0, said explicitly, is the limit off
            "privacy-ledger": None,  # "none": no ledger
            "refuse-raw-rows": True,
        }.get(field, parsed)
        assert getattr(policy, field.replace("-", "_")) == expected
        if field == "refuse-raw-rows":
            assert policy.strict_rows


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (f, v)
        for f in sorted(CASES)
        for v in [*ALWAYS_REFUSED, *([] if f in TEXT_FIELDS else NOT_NUMBERS), *CASES[f][2]]
    ],
    ids=str,
)
def test_a_malformed_value_is_refused_naming_the_field(field, value):
    message = _refused({field: value}, field)
    assert "expected" in message or "no estimator" in message or "row count is public" in message
    # node_config_value, which the Flower node reads its own fields with, refuses it too.
    with pytest.raises(ValueError, match=re.escape(field)):
        node_config_value({field: value}, field)


@pytest.mark.parametrize("field", sorted(CASES))
def test_an_empty_value_never_means_off(field):
    message = _refused({field: ""}, field)
    assert "is empty" in message and "never turns a rule off" in message


def test_the_reviewed_values_no_longer_switch_a_rule_off():
    # Each of these left a rule off, or raised a bare int() error.
    _refused({"min-rows-per-vector": 0.5}, "min-rows-per-vector")
    _refused({"min-rows-per-vector": "0.5"}, "min-rows-per-vector")
    _refused({"refuse-raw-rows": ""}, "refuse-raw-rows")
    _refused({"min-sum-participants": 2.5}, "min-sum-participants")
    for value in ("nan", "abc"):
        for field in ("min-rows-per-vector", "min-sum-participants", "max-bound-queries"):
            message = _refused({field: value}, field)
            assert "an integer" in message
    # "Off" is said, and then it is off.
    assert NodePolicy.from_node_config({"min-rows-per-vector": 0}).min_rows_per_vector is None
    assert NodePolicy.from_node_config({"max-bound-queries": "0"}).max_bound_queries is None
    assert NodePolicy.from_node_config({"refuse-raw-rows": "false"}).refuse_raw_rows is False
    assert NodePolicy.from_node_config({"privacy-ledger": "none"}).privacy_ledger is None


def test_every_problem_of_a_config_is_named_at_once():
    config = {"dp-epsilom": 1.0, "min-rows-per-vector": "0.5", "n-threads": "abc"}
    with pytest.raises(ValueError) as info:
        NodePolicy.from_node_config(config)
    message = str(info.value)
    for part in ("'dp-epsilom'", "min-rows-per-vector='0.5'", "n-threads='abc'"):
        assert part in message


@pytest.mark.parametrize(("typo", "field"), sorted(REVIEWED_MISSPELLINGS.items()))
def test_a_reviewed_misspelling_is_refused_with_the_field_it_meant(typo, field):
    with pytest.raises(ValueError, match=f"unknown node-config field '{typo}'") as info:
        NodePolicy.from_node_config({typo: "1"})
    assert f"did you mean '{field}'?" in str(info.value)


def _misspellings(field):
    """A dropped last letter, two letters swapped, a letter doubled."""
    i = len(field) // 2
    swapped = field[:i] + field[i + 1] + field[i] + field[i + 2 :]
    return {field[:-1], swapped, field[:i] + field[i] + field[i:]} - {field}


@pytest.mark.parametrize(
    ("typo", "field"),
    [(t, f) for f in sorted(NODE_CONFIG_FIELDS) for t in sorted(_misspellings(f))],
)
def test_a_misspelling_of_any_field_is_refused_with_a_suggestion(typo, field):
    with pytest.raises(ValueError, match=f"unknown node-config field '{re.escape(typo)}'") as info:
        check_node_config({typo: "x"})
    assert f"did you mean '{field}'?" in str(info.value)


def test_a_field_far_from_every_known_one_lists_them():
    with pytest.raises(ValueError, match="known fields: allow-clear-sums, "):
        check_node_config({"zzzz": 1})


def test_fields_flower_sets_and_output_paths_are_known():
    # Flower's simulation gives every node these two.
    assert check_node_config({"partition-id": 0, "num-partitions": 3}) == {
        "partition-id": 0,
        "num-partitions": 3,
    }
    # An output written with a prefix (fit_on_flower(output_prefix="kfed-")).
    assert check_node_config({"kfed-labels-path": "/out/k.npy"}) == {
        "kfed-labels-path": "/out/k.npy"
    }
    _refused({"kfed-labels-path": ""}, "kfed-labels-path")
    with pytest.raises(ValueError, match="did you mean 'labels-path'"):
        check_node_config({"lables-path": "/out/l.npy"})
    # A field of the node's own app is accepted once declared.
    assert check_node_config({"site": "a"}, extra=["site"]) == {}
    with pytest.raises(ValueError, match="unknown node-config field 'site'"):
        check_node_config({"site": "a"})


def test_the_defaults_are_the_documented_ones():
    from skfedclust.federation._runtime import threads_per_step
    from skfedclust.flower import _client
    from skfedclust.flower._step_worker import DEFAULT_IDLE_SECONDS

    policy, built = NodePolicy.from_node_config({}), NodePolicy()
    for field in POLICY_FIELDS:
        attribute = field.attribute
        value = getattr(policy, attribute)
        assert value == getattr(built, attribute), field.name
        if field.name == "privacy-ledger":
            from skfedclust.node._policy import default_ledger_directory

            assert value == str(default_ledger_directory())
        elif field.name == "allowed-methods":
            assert value is None and field.default is None
        else:
            assert value == field.default, field.name
    assert policy.strict_rows is False
    assert NODE_CONFIG_FIELDS["step-worker-idle"].default == DEFAULT_IDLE_SECONDS
    assert _client.node_threads({}) == threads_per_step(None)
    assert _client._allows_unauthenticated({}) is False
    assert _client.node_layout({}) is None
    # The docs state each default as the registry's default_doc.
    documented = _reference_rows()
    for name, field in NODE_CONFIG_FIELDS.items():
        assert documented[name][1] == field.default_doc, name


def test_a_policy_built_in_python_is_checked_the_same_way():
    with pytest.raises(ValueError, match="min-rows-per-vector=0.5"):
        NodePolicy(min_rows_per_vector=0.5)
    with pytest.raises(ValueError, match="min-sum-participants=2.5"):
        NodePolicy(min_sum_participants=2.5)
    with pytest.raises(ValueError, match="max-fits=nan"):
        NodePolicy(privacy_ledger="x", max_fits=math.nan)
    with pytest.raises(ValueError, match="max-bound-queries=True"):
        NodePolicy(max_bound_queries=True)
    with pytest.raises(ValueError, match="dp-trusted-shares=0"):
        NodePolicy(dp_trusted_shares=0)
    with pytest.raises(ValueError, match="allow-row-release names 'KMeans'"):
        NodePolicy(allow_row_release=["KMeans"])
    with pytest.raises(ValueError, match="refuse-raw-rows='maybe'"):
        NodePolicy(refuse_raw_rows="maybe")
    # A flag's word is read, not its truth as a Python string ("false" was True).
    assert NodePolicy(allow_clear_sums="false").allow_clear_sums is False
    assert NodePolicy(dc_full_rank_maps="no").dc_full_rank_maps is False
    assert NodePolicy(min_rows_per_vector=np.int64(3)).min_rows_per_vector == 3
    assert NodePolicy(privacy_ledger=Path("/tmp/l")).privacy_ledger == "/tmp/l"


def test_the_handshake_summary_and_repr_carry_the_new_fields():
    from skfedclust.flower._client import policy_summary

    config = {
        "dp-trusted-shares": "2",
        "allow-row-release": "FederatedFuzzyCMeans",
        "allow-unauthenticated": "true",
    }
    policy = NodePolicy.from_node_config(config)
    summary = policy_summary(policy, config)
    assert summary["dp_trusted_shares"] == 2
    assert summary["allow_row_release"] == ["FederatedFuzzyCMeans"]
    assert summary["allow_unauthenticated"] is True
    assert "dp_trusted_shares=2" in repr(policy)
    assert "allow_row_release=('FederatedFuzzyCMeans',)" in repr(policy)


# --------------------------------------------------------------------------- #
# The docs list every field
# --------------------------------------------------------------------------- #
def _reference_rows():
    """``{field: [values, default, sets]}`` of the Flower guide's node-config reference."""
    page = (ROOT / "doc" / "user_guide" / "flower.rst").read_text()
    start = page.index("Node-config reference\n---")
    section = page[start : page.index("\n---", page.index("\n---", start) + 4)]
    rows = {}
    for match in re.finditer(r"   \* - ``([a-z-]+)``\n((?:     .*\n)+)", section):
        cells = re.split(r"\n     - ", "\n" + match.group(2).rstrip("\n"))[1:]
        rows[match.group(1)] = [" ".join(c.split()) for c in cells]
    return rows


def test_the_flower_guide_lists_every_field_and_no_other():
    rows = _reference_rows()
    assert set(rows) == set(NODE_CONFIG_FIELDS)
    assert all(len(cells) == 3 for cells in rows.values())
    page = (ROOT / "doc" / "user_guide" / "flower.rst").read_text()
    assert "A node checks its whole\nnode config at its first message" in page


def test_the_policy_module_docstring_lists_every_policy_field():
    from skfedclust.node import _policy

    # A field's entry is a line of its own: ``name`` (or ``a``, ``b`` for two).
    heads = [
        line
        for line in _policy.__doc__.splitlines()
        if re.fullmatch(r"``[a-z-]+``(, ``[a-z-]+``)*", line)
    ]
    listed = {name for line in heads for name in re.findall(r"``([a-z-]+)``", line)}
    assert {f.name for f in POLICY_FIELDS} <= listed
    assert listed <= set(NODE_CONFIG_FIELDS)


# --------------------------------------------------------------------------- #
# On Flower: refused at the node's first message, with the field named
# --------------------------------------------------------------------------- #
@pytest.fixture
def flower():
    """The Flower tests' local grid and helpers (Flower is optional)."""
    pytest.importorskip("flwr")
    import test_flower

    return test_flower


def _fit(flower, configs, load_data=None, **app_kwargs):
    from skfedclust import KFed
    from skfedclust.flower import fit_on_flower, make_client_app

    clients = flower._clients()
    app = make_client_app(
        load_data or flower.Clients(clients),
        save_output=flower.Memory(),
        allowed_modules=flower.ALLOWED,
        **app_kwargs,
    )
    grid = flower.LocalGrid(app, configs)
    estimator = KFed(n_clusters=4, random_state=0)
    fit_on_flower(estimator, grid, n_nodes=len(configs), timeout=30, allowed_modules=flower.ALLOWED)
    return estimator, grid


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dp-epsilom", 1.0, r"unknown node-config field 'dp-epsilom' \(did you mean 'dp-epsilon'"),
        ("min-rows-per-vectr", 5, "did you mean 'min-rows-per-vector'"),
        ("min-rows-per-vector", 0.5, r"min-rows-per-vector=0\.5: expected an integer >= 0"),
        ("refuse-raw-rows", "", "refuse-raw-rows is empty"),
        ("max-bound-queries", "nan", "max-bound-queries='nan': expected an integer"),
        ("step-worker", "maybe", "step-worker='maybe': expected true or false"),
    ],
)
def test_a_flower_node_refuses_a_bad_field_at_its_handshake(flower, field, value, message):
    from skfedclust.flower import FlowerNodeError

    configs = [{"partition-id": i} for i in range(4)]
    configs[2][field] = value
    with pytest.raises(FlowerNodeError, match=f"handshake.*{message}") as info:
        _fit(flower, configs)
    assert "102" in str(info.value)  # the node is named


def test_a_flower_node_accepts_its_apps_own_fields_once_declared(flower, tmp_path):
    from skfedclust.flower import FileLoader, FileWriter, FlowerNodeError

    clients = flower._clients()

    class BySite:
        def __call__(self, node_config):
            return clients[int(node_config["site"])]

    configs = [{"partition-id": i, "site": str(i)} for i in range(4)]
    with pytest.raises(FlowerNodeError, match="unknown node-config field 'site'"):
        _fit(flower, configs, load_data=BySite())
    estimator, _ = _fit(flower, configs, load_data=BySite(), node_config_fields=["site"])
    assert estimator.cluster_centers_.shape == (4, 2)
    # The fields a FileLoader's or FileWriter's pattern names are the app's own.
    assert FileLoader("{folder}/site_{partition-id:d}.npy").node_config_fields == (
        "folder",
        "partition-id",
    )
    assert FileWriter("/out/{key}_{site}.npy").node_config_fields == ("site",)
    assert FileWriter().node_config_fields == ()
    for i, block in enumerate(clients):
        np.save(tmp_path / f"site_{i}.npy", block)
    configs = [{"partition-id": i, "folder": str(tmp_path)} for i in range(4)]
    with pytest.raises(FlowerNodeError, match="unknown node-config field 'folder'"):
        _fit(flower, configs, load_data=BySite())
    estimator, _ = _fit(flower, configs, load_data=FileLoader("{folder}/site_{partition-id}.npy"))
    assert estimator.cluster_centers_.shape == (4, 2)


def test_a_malformed_step_worker_field_runs_in_the_node_whose_app_refuses_it():
    pytest.importorskip("flwr")
    import os

    from test_flower_worker import _context, _message

    from skfedclust.flower import make_worker_client_app

    app = make_worker_client_app("flower_toy_app:app")
    # No worker is started on a value that is not a true word, or not positive
    # seconds: the message runs in this process, whose real ClientApp (one of
    # make_client_app) checks the field and refuses it, naming it.
    for config in (
        {"step-worker": "maybe"},
        {"step-worker": True, "step-worker-idle": "abc"},
        {"step-worker": True, "step-worker-idle": -1},
    ):
        reply = app(_message(0), _context(**config))
        assert reply.content["reply"]["pid"] == os.getpid()


def _documented_node_configs():
    """Every ``--node-config "..."`` of the Flower guide and the example's RUNNING.md."""
    for path in (
        ROOT / "doc" / "user_guide" / "flower.rst",
        ROOT / "examples" / "flower_app" / "RUNNING.md",
    ):
        for match in re.finditer(r'--node-config\s+"([^"]+)"', path.read_text()):
            yield path.name, " ".join(match.group(1).replace("\\\n", " ").split())


def test_the_node_configs_the_docs_and_the_example_give_are_accepted(tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    import contextlib
    import io
    import shlex
    import sys

    from flwr.common.config import parse_config_args

    documented = list(_documented_node_configs())
    assert len(documented) >= 5
    # The commands the example's prepare_data.py prints, for three nodes and a share holder.
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "flower_app"))
    monkeypatch.delitem(sys.modules, "prepare_data", raising=False)
    import prepare_data

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        prepare_data.main(str(tmp_path), 3, 9093, 1)
    for line in printed.getvalue().splitlines():
        args = shlex.split(line)
        documented.append(("prepare_data.py", args[args.index("--node-config") + 1]))
    for where, text in documented:
        config = parse_config_args([text])
        # As flower-supernode reads it: typed values, every field known and well formed.
        policy = NodePolicy.from_node_config(config)
        assert check_node_config(config), where
        if "min-sum-participants" in config:
            assert policy.min_sum_participants == 3


def test_an_operator_checks_a_node_config_before_starting_the_node(capsys):
    pytest.importorskip("flwr")
    from skfedclust.flower.__main__ import main

    good = "data-path='a.npy' site='x' min-rows-per-vector=0 privacy-ledger='none'"
    assert main(["check-config", good, "--field", "site"]) == 0
    out = capsys.readouterr().out
    assert "min-rows-per-vector = 0" in out and "site = 'x' (the app's own field)" in out
    assert "min_rows_per_vector=None" in out  # 0, said explicitly: the rule is off
    for text, named in (
        ("data-path='a.npy' site='x'", "unknown node-config field 'site'"),
        ("min-rows-per-vectr=2", "did you mean 'min-rows-per-vector'"),
        ("min-rows-per-vector=0.5", "min-rows-per-vector=0.5: expected an integer"),
        ("refuse-raw-rows=''", "refuse-raw-rows is empty"),
        ("refuse-raw-rows=strict", "flower-supernode would not read"),
    ):
        with pytest.raises(SystemExit) as info:
            main(["check-config", text])
        assert info.value.code == 2
        assert named in capsys.readouterr().err
