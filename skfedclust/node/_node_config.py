"""Every node-config field a node reads, and how each is parsed and checked.

A node's operator sets its policy, its data and its identity as text fields of
its node config (``flower-supernode --node-config "key=value ..."``). A field
the node does not read, or a value it cannot read, is refused at the node's
first message, naming the field: a misspelt ``dp-epsilom`` or ``min-rows-per-vectr``
would otherwise leave the rule it meant to set at its default, or off, without
a word. :data:`NODE_CONFIG_FIELDS` is the one table of the fields; parsing
(:func:`check_node_config`, :func:`node_config_value`) is driven by it, and
the Flower guide's node-config reference lists every field of it (a test
checks both).

A value is refused when it is empty, not of the field's kind (``'abc'``,
``'nan'``, ``inf``), fractional for an integer field, or out of the field's
range. An empty value never means "off": where a rule can be turned off, the
word or number that does it is given explicitly (``min-rows-per-vector=0``,
``max-bound-queries=0``, ``privacy-ledger='none'``, ``refuse-raw-rows=false``).
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from ._methods import package_method_names

__all__ = [
    "FLOWER_FIELDS",
    "NODE_CONFIG_FIELDS",
    "NODE_FIELDS",
    "OUTPUT_PATH_SUFFIX",
    "POLICY_FIELDS",
    "NodeConfigField",
    "check_node_config",
    "node_config_value",
]

_TRUE_WORDS = ("true", "yes", "on", "1")
_FALSE_WORDS = ("false", "no", "off", "0")

#: Why a node's budget cannot be for add-remove neighbours (``dp-neighbouring``).
ADD_REMOVE_REASON = (
    "a node's budget is for replace-one neighbours. Its row count is public (the "
    "handshake sends it, and the methods' messages are calibrated with public counts), "
    "so under add-remove the count would be a release no noise covers"
)


def _refused(name, value, expected):
    if isinstance(value, str) and not value.strip():
        return ValueError(
            f"node config {name} is empty (an empty value never turns a rule off): "
            f"expected {expected}"
        )
    return ValueError(f"node config {name}={value!r}: expected {expected}")


def _real(value):
    """``value`` as a float, or ``None`` if it is no number (bools are not numbers)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _int(value):
    """``value`` as an int if it is an integral number (``3``, ``"3"``, ``3.0``), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, str):
        try:
            # int() first: a large seed keeps every digit.
            return int(value.strip())
        except ValueError:
            pass
    number = _real(value)
    if number is None or not math.isfinite(number) or number != int(number):
        return None
    return int(number)


# --------------------------------------------------------------------------- #
# Parsers: (value, field name) -> parsed value, or ValueError naming the field
# --------------------------------------------------------------------------- #
def flag(value, name):
    """``true`` or ``false`` (also ``yes``/``no``, ``on``/``off``, ``1``/``0``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    text = value.strip().lower() if isinstance(value, str) else None
    if text in _TRUE_WORDS:
        return True
    if text in _FALSE_WORDS:
        return False
    raise _refused(name, value, "true or false (or yes/no, on/off, 1/0)")


def integer(minimum, maximum=None, note=""):
    """A parser of an int in ``[minimum, maximum]``; ``note`` says what a bound value means."""
    expected = (
        f"an integer >= {minimum}" if maximum is None else (f"an integer in [{minimum}, {maximum}]")
    )
    expected += note

    def parse(value, name):
        number = _int(value)
        if number is None or number < minimum or (maximum is not None and number > maximum):
            raise _refused(name, value, expected)
        return number

    parse.expected = expected
    return parse


def real(low, high=math.inf, *, low_open=False, high_open=False):
    """A parser of a finite float between ``low`` and ``high`` (open or closed)."""
    left, right = "(" if low_open else "[", ")" if high_open or high == math.inf else "]"
    expected = f"a finite number in {left}{low:g}, {high:g}{right}"

    def parse(value, name):
        number = _real(value)
        if (
            number is None
            or not math.isfinite(number)
            or (number <= low if low_open else number < low)
            or (number >= high if high_open else number > high)
        ):
            raise _refused(name, value, expected)
        return number

    parse.expected = expected
    return parse


def epsilon(value, name):
    """A DP budget: a finite number in ``(0, MAX_EPSILON]``."""
    from ._accounting import MAX_EPSILON

    return real(0.0, MAX_EPSILON, low_open=True)(value, name)


def text(what):
    """A parser of a non-empty string (a path, a name), ``what`` saying which."""

    def parse(value, name):
        if not isinstance(value, str) or not value.strip():
            raise _refused(name, value, what)
        return value.strip()

    parse.expected = what
    return parse


def estimator_names():
    """The estimator class names of the package (what ``allowed-methods`` may name)."""
    return tuple(package_method_names())


_METHODS_EXPECTED = "comma-separated estimator class names, such as 'KFed,FeCA'"


def methods(value, name):
    """Comma-separated estimator class names of the package, as a tuple.

    A sequence of names is accepted too (a policy built in Python); a string
    must name at least one.
    """
    if isinstance(value, str):
        names = [m.strip() for m in value.split(",")]
        if not any(names) or not all(names):
            raise _refused(name, value, _METHODS_EXPECTED)
    elif isinstance(value, (list, tuple)) and all(isinstance(m, str) for m in value):
        names = [m.strip() for m in value]
    else:
        raise _refused(name, value, _METHODS_EXPECTED)
    if not names:
        # An empty sequence (a policy built in Python) needs no lookup.
        return ()
    known = estimator_names()
    for method in names:
        if method not in known:
            close = difflib.get_close_matches(method, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"node config {name} names {method!r}, which is no estimator of "
                f"skfedclust{hint}; known: {', '.join(known)}"
            )
    return tuple(names)


def row_release_methods(value, name):
    """:func:`methods`, or ``*``: every method's release of rows (an explicit choice)."""
    if (isinstance(value, str) and value.strip() == "*") or (
        isinstance(value, (list, tuple)) and tuple(value) == ("*",)
    ):
        return ("*",)
    return methods(value, name)


row_release_methods.expected = "comma-separated estimator class names, or *"


def raw_rows(value, name):
    """``true``, ``false`` or ``strict``."""
    if isinstance(value, str) and value.strip().lower() == "strict":
        return "strict"
    try:
        return flag(value, name)
    except ValueError:
        raise _refused(name, value, "true, false or strict") from None


def neighbouring(value, name):
    """``replace-one`` (``add-remove`` is refused with its reason)."""
    word = value.strip().lower() if isinstance(value, str) else None
    if word == "replace-one":
        return "replace-one"
    if word == "add-remove":
        raise ValueError(f"node config {name}={value!r}: {ADD_REMOVE_REASON}")
    raise _refused(name, value, "replace-one")


def ledger(value, name):
    """A directory, or ``none`` for no ledger (``False``)."""
    if value is False:
        return False
    if isinstance(value, str) and value.strip().lower() in ("none", "false"):
        return False
    if isinstance(value, str) and value.strip():
        return value.strip()
    if hasattr(value, "__fspath__"):
        return str(value)
    raise _refused(
        name,
        value,
        "a directory, or none to keep no ledger (a weaker node: its budget and its "
        "secure sums' rules then hold per fit)",
    )


def columns(value, name):
    """Distinct non-negative feature indices, as ``'0,1,2'`` (or a sequence of ints)."""
    expected = "distinct non-negative feature indices such as '0,1,2'"
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise _refused(name, value, expected)
    indices = [_int(c) for c in items]
    if any(i is None or i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise _refused(name, value, expected)
    return indices


def client_name(value, name):
    """An int or a non-empty string."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise _refused(name, value, "an integer or a non-empty name")


# --------------------------------------------------------------------------- #
# The table
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class NodeConfigField:
    """One node-config field.

    Attributes
    ----------
    name : str
        The field's key in the node config.
    parse : callable
        ``parse(value, name) -> value``; raises a :class:`ValueError` naming
        the field for a value it refuses.
    default : object
        What the node uses when the field is absent (parsed form; ``None``:
        the field's feature is off or not used, as ``default_doc`` says).
    default_doc : str
        The default in words, as the docs give it.
    doc : str
        One line: what the field sets.
    scope : {"policy", "node", "flower"}
        ``"policy"``: a field of :class:`~skfedclust.node.NodePolicy`
        (``attribute`` is its parameter); ``"node"``: read by the Flower
        node itself; ``"flower"``: put in the node config by Flower.
    attribute : str or None
        The :class:`NodePolicy` parameter the field sets.
    """

    name: str
    parse: Callable
    default: object
    default_doc: str
    doc: str
    scope: str
    attribute: str | None = None


def _policy(name, parse, default, default_doc, doc):
    return NodeConfigField(name, parse, default, default_doc, doc, "policy", name.replace("-", "_"))


def _node(name, parse, default, default_doc, doc, scope="node"):
    return NodeConfigField(name, parse, default, default_doc, doc, scope)


#: Fields of a node's policy (:class:`~skfedclust.node.NodePolicy`).
POLICY_FIELDS = (
    _policy(
        "allowed-methods",
        methods,
        None,
        "every method",
        "estimator class names the node takes part in a fit of",
    ),
    _policy(
        "min-rows-per-vector",
        integer(0, note=" (0 turns the rule off)"),
        2,
        "2",
        "fewest of the node's rows behind each vector it sends, on average",
    ),
    _policy(
        "refuse-raw-rows",
        raw_rows,
        True,
        "true",
        "refuse to send any of the node's rows; strict: also where a method releases rows",
    ),
    _policy(
        "raw-row-tolerance",
        real(0.0),
        1e-4,
        "1e-4",
        "how close to a row (in each feature's spread) a sent vector is that row",
    ),
    _policy(
        "dc-full-rank-maps",
        flag,
        False,
        "false",
        "let DC-Clustering map the rows to as many dimensions as they have features",
    ),
    _policy(
        "dp-epsilon",
        epsilon,
        None,
        "no budget",
        "the node's own differential-privacy budget (epsilon)",
    ),
    _policy(
        "dp-delta",
        real(0.0, 1.0, low_open=True, high_open=True),
        1e-5,
        "1e-5",
        "the delta of that budget",
    ),
    _policy(
        "dp-neighbouring",
        neighbouring,
        "replace-one",
        "replace-one",
        "the neighbouring relation of that budget (only replace-one)",
    ),
    _policy(
        "dp-trusted-shares",
        integer(1),
        1,
        "1",
        "how many clients' noise shares of a release the node counts on",
    ),
    _policy(
        "allow-clear-sums",
        flag,
        False,
        "false",
        "send one client's statistic made to be added outside a secure sum",
    ),
    _policy(
        "min-sum-participants",
        integer(2),
        3,
        "3",
        "fewest clients of a secure sum the node uploads to",
    ),
    _policy(
        "max-bound-queries",
        integer(0, note=" (0 turns the limit off)"),
        8,
        "8",
        "bound agreements per fit and step with different inputs",
    ),
    _policy(
        "privacy-ledger",
        ledger,
        None,
        "the per-user state directory",
        "the directory of the node's privacy ledger across fits; none keeps none",
    ),
    _policy(
        "max-fits",
        integer(1),
        None,
        "100",
        "with a ledger: the most fits the node takes part in, all its data sets together",
    ),
    _policy(
        "allow-row-release",
        row_release_methods,
        (),
        "none",
        "estimator class names whose by-design row releases the node runs (* for every method)",
    ),
    _policy(
        "allow-coordinator-centers",
        row_release_methods,
        (),
        "none",
        "estimator class names whose exact statistics for coordinator-chosen centers the "
        "node sends (* for every method)",
    ),
)

#: What a Flower node reads itself (:func:`skfedclust.flower.make_client_app`).
NODE_FIELDS = (
    _node(
        "data-path",
        text("the path of a .npy, .csv or .txt file"),
        None,
        "no data",
        "the file of the node's rows (a node without it holds no rows)",
    ),
    _node(
        "new-data-path",
        text("the path of a .npy, .csv or .txt file"),
        None,
        "none",
        "the file of the node's new rows for a predict run",
    ),
    _node(
        "labels-path",
        text("the path of a .npy, .csv or .txt file"),
        None,
        "not written",
        "where the node writes its labels",
    ),
    _node(
        "predicted-labels-path",
        text("the path of a .npy, .csv or .txt file"),
        None,
        "not written",
        "where the node writes the labels of its new rows (predict)",
    ),
    _node("client-name", client_name, None, "partition-id", "the name that orders the clients"),
    _node(
        "identity-key",
        text("the path of the node's identity key file"),
        None,
        "none",
        "the node's identity key (python -m skfedclust.flower keygen)",
    ),
    _node(
        "trusted-identities",
        text("the path of a file of trusted identities"),
        None,
        "none",
        "the identities of the federation's nodes",
    ),
    _node(
        "allow-unauthenticated",
        flag,
        False,
        "false",
        "take part without identity-key and trusted-identities",
    ),
    _node(
        "n-threads", integer(1), None, "the node's cores", "threads the node's client steps may use"
    ),
    _node(
        "private-seed",
        integer(0),
        None,
        "operating-system entropy",
        "fixes the node's private randomness (tests only)",
    ),
    _node(
        "row-group",
        integer(0),
        None,
        "none (horizontal)",
        "vertical or hybrid federation: the node's row group",
    ),
    _node(
        "columns",
        columns,
        None,
        "none (horizontal)",
        "vertical or hybrid federation: the global indices of the node's features",
    ),
    _node(
        "step-worker", flag, False, "false", "run the node's steps in one long-lived worker process"
    ),
    _node(
        "step-worker-idle",
        real(0.0, low_open=True),
        600.0,
        "600",
        "seconds an idle step worker waits before it exits",
    ),
)

#: Fields Flower itself puts in a node's config: its simulation gives every
#: node these two (``flwr``'s ``vce_api`` and ``ray_client_proxy``), and a
#: deployed SuperNode may be given them (``flower-supernode --help`` suggests
#: it) so that an app's loader picks a partition of a data set.
FLOWER_FIELDS = (
    _node(
        "partition-id",
        integer(0),
        None,
        "none",
        "the node's partition (set by Flower's simulation)",
        "flower",
    ),
    _node(
        "num-partitions",
        integer(1),
        None,
        "none",
        "the number of partitions (set by Flower's simulation)",
        "flower",
    ),
)

#: Every node-config field, by name.
NODE_CONFIG_FIELDS = {f.name: f for f in (*POLICY_FIELDS, *NODE_FIELDS, *FLOWER_FIELDS)}

#: Outputs a step may declare for the node's user; ``<prefix><output>-path``
#: is where the default writer puts it (``fit_on_flower(output_prefix=...)``:
#: ``kfed-labels-path``).
OUTPUTS = ("labels", "row position")
OUTPUT_PATH_SUFFIX = "-path"


def _output_path_field(key):
    """The field of an output path ``<prefix><output>-path`` (``kfed-labels-path``), or None.

    The prefix is the fit's ``output_prefix``, which any text may be; it is
    taken to end with ``-`` or ``_`` (``kfed-``), so that ``predicted-llabels-path``
    is a misspelling, not the labels of a fit prefixed ``predicted-l``.
    """
    if not key.endswith(OUTPUT_PATH_SUFFIX):
        return None
    stem = key[: -len(OUTPUT_PATH_SUFFIX)]
    for output in OUTPUTS:
        prefix = stem[: -len(output)]
        if stem.endswith(output) and (not prefix or prefix[-1] in "-_"):
            return NODE_CONFIG_FIELDS["labels-path"]
    return None


def _unknown(key, extra):
    known = sorted({*NODE_CONFIG_FIELDS, *extra})
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(known)}"
    return f"unknown node-config field {key!r} ({hint})"


#: Said once after the unknown fields of a node config.
_UNKNOWN_NOTE = (
    "a node refuses a field it does not read, so that a misspelt rule is not left at its "
    "default without a word (the fields an app's own loader reads are declared with "
    "make_client_app(node_config_fields=...))"
)


def check_node_config(node_config, extra=()):
    """Check every field of ``node_config``; return the parsed values of those it holds.

    Parameters
    ----------
    node_config : mapping
        The node config (Flower's ``context.node_config``, or a dict).
    extra : iterable of str, default=()
        Fields read by the node's own functions (its app's loader or writer),
        accepted as they are.

    Returns
    -------
    values : dict
        ``{name: parsed value}`` for every field of :data:`NODE_CONFIG_FIELDS`
        (or an output path) that ``node_config`` holds.

    Raises
    ------
    ValueError
        Naming every unknown field (with the closest known one) and every
        value refused (with what the field accepts).
    """
    extra = set(extra)
    values, problems, unknown = {}, [], []
    for key, value in dict(node_config).items():
        field = NODE_CONFIG_FIELDS.get(key) or _output_path_field(str(key))
        if field is None:
            if key not in extra:
                unknown.append(_unknown(key, extra))
            continue
        try:
            values[key] = field.parse(value, key)
        except ValueError as exc:
            problems.append(str(exc))
    if unknown:
        problems.append(f"{'; '.join(unknown)}: {_UNKNOWN_NOTE}")
    if problems:
        raise ValueError("; ".join(problems))
    return values


def node_config_value(node_config, name):
    """The parsed value of the field ``name`` of ``node_config``, or its default if absent."""
    field = NODE_CONFIG_FIELDS.get(name) or _output_path_field(name)
    if field is None:
        raise KeyError(f"{name!r} is not a node-config field")
    if name not in node_config:
        return field.default
    return field.parse(node_config[name], name)
