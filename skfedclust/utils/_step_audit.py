"""An audit of every client step of the package: what it may send, read from the code.

A client step is a module-level function whose first parameters are ``data,
inbox, state, party`` (what
:func:`~skfedclust.federation.resolve_client_step` accepts): the only code a
node runs on a coordinator's request. Each declares the kinds of what it
releases (:mod:`skfedclust.node._declarations`), from which the node's checks
follow. :func:`client_steps` lists them all with their kinds, and the
Security page's tables are rendered here at every docs build, so that the page
cannot miss a step, a rule or a default:

* :func:`audit_table_rst`: every step, by method, with its declared kinds;
* :func:`release_kinds_table_rst`: every kind of release and its decorator;
* :func:`rules_table_rst`: every rule a node enforces
  (:data:`skfedclust.node.RULES`);
* :func:`node_config_table_rst`: the node-config fields with the code's
  defaults.

``ClientStep.kind`` keeps the three classes the node's raw-row and count rules
tell apart (bound-only, releases rows by design, counted as summaries).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import pkgutil
import re

from ..node._declarations import RELEASE_KINDS, declared_releases
from ..node._policy import SHARED_STEP_MODULES

__all__ = [
    "ClientStep",
    "audit_table_rst",
    "client_steps",
    "node_config_table_rst",
    "release_kinds_table_rst",
    "rules_table_rst",
]

#: Modules whose client steps serve several methods: the node's own list, so that
#: the table shows as shared exactly what a node runs whatever the method.
SHARED_MODULES = SHARED_STEP_MODULES
SHARED = "shared"

BOUND_ONLY = "bound-only"
RELEASES_ROWS = "releases-rows"
SUMMARIES = "summaries"

_BOUND_ONLY_TEXT = (
    "only inside a bound agreement (binary orders of its largest entry leave the node)"
)
_SUMMARIES_TEXT = "summaries: counted by min-rows-per-vector, rows refused within raw-row-tolerance"


@dataclasses.dataclass(frozen=True)
class ClientStep:
    """One client step and what its declarations let it send.

    Attributes
    ----------
    module, name : str
        Where the step is defined: ``module:name`` is how a coordinator names it.
    method : str
        The estimator class whose module defines the step, ``"shared"`` for the
        modules that serve several methods, or the module itself when neither.
    kind : str
        ``"bound-only"``, ``"releases-rows"`` or ``"summaries"``.
    role : str
        What leaves the node, in words (with the declared reason for a step that
        releases rows).
    per_client_inputs : tuple of str
        The server messages the step declares may differ from client to client.
    summary : str
        The first sentence of the step's docstring.
    releases : tuple of str
        The release kinds the step declares
        (:func:`~skfedclust.node.declared_releases`), sorted.
    """

    module: str
    name: str
    method: str
    kind: str
    role: str
    per_client_inputs: tuple
    summary: str
    releases: tuple = ()

    @property
    def qualified_name(self):
        """``module:name``, as a coordinator names the step."""
        return f"{self.module}:{self.name}"


def _flower_importable():
    try:
        return importlib.util.find_spec("flwr") is not None
    except (ImportError, ValueError):
        return False


def _modules():
    import skfedclust

    skip_flower = not _flower_importable()

    def skipped(name):
        return skip_flower and (name + ".").startswith("skfedclust.flower.")

    def onerror(name):
        if not skipped(name):
            raise ImportError(f"cannot import {name} to list its client steps")

    yield skfedclust
    for info in pkgutil.walk_packages(skfedclust.__path__, "skfedclust.", onerror=onerror):
        if not skipped(info.name):
            yield importlib.import_module(info.name)


def _estimator_modules():
    from .discovery import all_estimators

    estimators = all_estimators()
    owners = {cls.__module__: name for name, cls in estimators}
    # A method may keep its client steps in modules of their own (FederatedKMeans'
    # _fedkmeans_steps); a module that defines another estimator stays that one's.
    for name, cls in estimators:
        for module in getattr(cls, "_client_step_modules", ()):
            owners.setdefault(module, name)
    return owners


def _method(module, estimator_modules):
    if module in estimator_modules:
        return estimator_modules[module]
    if any(module == m or module.startswith(m + ".") for m in SHARED_MODULES):
        return SHARED
    return module


_ROLE = re.compile(r":[\w:.-]+:`([^`]+)`")


def _plain_role(match):
    # A role's target may be relative to the step's module, which the table is not in:
    # keep the name it shows, as a literal.
    text = match[1]
    if "<" in text and text.endswith(">"):
        return text[: text.index("<")].strip()
    shown = text.lstrip("~").rstrip("()")
    if text.startswith("~"):
        shown = shown.rsplit(".", 1)[-1]
    return f"``{shown}``"


def _first_sentence(function):
    doc = inspect.getdoc(function) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    # A sentence ends at a full stop followed by a capital (not "Eq. 43", "e.g. x").
    match = re.search(r"[.!?](?=\s+[A-Z(])", paragraph)
    sentence = paragraph if match is None else paragraph[: match.end()]
    return _ROLE.sub(_plain_role, sentence)


def _declarations(function):
    if getattr(function, "__skfedclust_bound_only__", False):
        return BOUND_ONLY, _BOUND_ONLY_TEXT
    reason = getattr(function, "__skfedclust_releases_rows__", None)
    if reason is not None:
        return RELEASES_ROWS, f"releases rows by design: {reason}"
    return SUMMARIES, _SUMMARIES_TEXT


def _is_client_step(module, name, obj):
    from ..federation._runtime import resolve_client_step

    if not inspect.isfunction(obj) or obj.__module__ != module or obj.__qualname__ != name:
        return False
    try:
        # Role "bound" accepts every client step, bound-only ones included.
        return resolve_client_step(f"{module}:{name}", ("skfedclust",), role="bound") is obj
    except PermissionError:
        return False


def client_steps():
    """Every client step of :mod:`skfedclust`, grouped by method.

    Imports every module of the package (those of :mod:`skfedclust.flower`
    only when Flower is installed) and lists each module-level function that
    :func:`~skfedclust.federation.resolve_client_step` accepts as a client
    step.

    Returns
    -------
    steps : list of ClientStep
        One record per step: the estimators' steps by class name, then the
        shared ones, each group in module and source order.
    """
    estimator_modules = _estimator_modules()
    found = {}
    for module in _modules():
        for name, obj in vars(module).items():
            if not _is_client_step(module.__name__, name, obj):
                continue
            kind, role = _declarations(obj)
            step = ClientStep(
                module=module.__name__,
                name=name,
                method=_method(module.__name__, estimator_modules),
                kind=kind,
                role=role,
                per_client_inputs=tuple(sorted(getattr(obj, "__skfedclust_per_client__", ()))),
                summary=_first_sentence(obj),
                releases=tuple(sorted(declared_releases(obj))),
            )
            found[step.qualified_name] = (obj.__code__.co_firstlineno, step)

    def order(item):
        line, step = item
        group = (1, "") if step.method == SHARED else (0, step.method)
        return (*group, step.module, line)

    return [step for _, step in sorted(found.values(), key=order)]


def _escape(text):
    return re.sub(r"([\\*`|_])", r"\\\1", str(text))


def _releases_cell(step):
    kinds = ", ".join(f"``{kind}``" for kind in step.releases) or "**none** (refused)"
    if step.kind == RELEASES_ROWS:
        kinds += ": " + _escape(step.role.partition(": ")[2])
    return kinds


def audit_table_rst(steps=None):
    """The audit as an RST ``list-table``, one row per client step, grouped by method.

    Parameters
    ----------
    steps : list of ClientStep or None, default=None
        The steps to show (default: :func:`client_steps`).

    Returns
    -------
    table : str
        The ``list-table`` directive; the method is named on the first row of
        its group.
    """
    steps = client_steps() if steps is None else steps
    estimators = set(_estimator_modules().values())
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 14 24 26 12 24",
        "   :class: skfedclust-step-audit",
        "",
        "   * - Method",
        "     - Client step",
        "     - Declared release",
        "     - Per-client server messages",
        "     - What it does",
    ]
    previous = None
    for step in steps:
        if step.method == previous:
            method = ""
        elif step.method in estimators:
            method = f":class:`~skfedclust.{step.method}`"
        else:
            method = _escape(step.method)
        previous = step.method
        inputs = ", ".join(_escape(tag) for tag in step.per_client_inputs) or "none"
        lines += [
            f"   * - {method}".rstrip(),
            f"     - ``{step.qualified_name}``",
            f"     - {_releases_cell(step)}",
            f"     - {inputs}",
            f"     - {step.summary or '(no docstring)'}",
        ]
    return "\n".join(lines) + "\n"


def _list_table(header, rows, widths):
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        f"   :widths: {' '.join(str(w) for w in widths)}",
        "",
    ]
    for row in [header, *rows]:
        lines.append(f"   * - {row[0]}".rstrip())
        lines += [f"     - {cell}".rstrip() for cell in row[1:]]
    return "\n".join(lines) + "\n"


def rules_table_rst():
    """Every rule a node enforces (:data:`skfedclust.node.RULES`) as an RST ``list-table``.

    Returns
    -------
    table : str
        One row per rule: its name, what the node refuses, and the node-config
        field that sets it (``-`` for a rule no field turns off).
    """
    from ..node._refusal import RULES

    rows = [
        (f"``{rule}``", _escape(refuses), ", ".join(f"``{f.strip()}``" for f in field.split(",")))
        if field
        else (f"``{rule}``", _escape(refuses), "-")
        for rule, (refuses, field) in RULES.items()
    ]
    return _list_table(("Rule", "What the node refuses", "Node-config field"), rows, (20, 58, 22))


def release_kinds_table_rst():
    """Every kind of release a step can declare (:data:`~skfedclust.node.RELEASE_KINDS`).

    Returns
    -------
    table : str
        One row per kind: its name, the decorator that declares it, and what
        the node lets out for it.
    """
    from ..node import _declarations

    decorators = {}
    for name in _declarations.__all__:
        function = getattr(_declarations, name)
        if callable(function) and name not in ("contradictions", "declared_releases"):
            probe = function("a reason") if name == "releases_rows" else function
            kinds = declared_releases(probe(lambda data, inbox, state, party: None))
            for kind in kinds:
                decorators[kind] = name
    rows = [
        (
            f"``{kind}``",
            f"``@{decorators[kind]}(reason)``"
            if kind == "rows-by-design"
            else f"``@{decorators[kind]}``",
            _escape(text),
        )
        for kind, text in RELEASE_KINDS.items()
    ]
    return _list_table(("Kind", "Declared by", "What the node lets out"), rows, (18, 24, 58))


def node_config_table_rst():
    """The node-config fields of :class:`~skfedclust.node.NodePolicy`, with their defaults.

    Read from the signature and the docstring of ``NodePolicy``: the field is
    the parameter's name with dashes, the default is the code's.

    Returns
    -------
    table : str
        One row per field: its name, its default (as the code has it:
        ``None`` is the absence of a value, whose meaning the field's text
        gives) and what it sets.
    """
    from numpydoc.docscrape import NumpyDocString

    from ..node._policy import NodePolicy

    documented = {
        p.name: " ".join(" ".join(p.desc).split())
        for p in NumpyDocString(inspect.getdoc(NodePolicy))["Parameters"]
    }
    # A field the node config does not set yet is a NodePolicy parameter only: said so,
    # rather than listed as something an operator can write.
    read = inspect.getsource(NodePolicy.from_node_config)
    rows = []
    for name, parameter in inspect.signature(NodePolicy).parameters.items():
        field = name.replace("_", "-")
        text = _ROLE.sub(_plain_role, documented.get(name, ""))
        if f'"{field}"' not in read:
            text += f" (``NodePolicy({name}=...)`` only: not read from the node config yet.)"
        rows.append((f"``{field}``", f"``{parameter.default!r}``", text))
    return _list_table(("Node-config field", "Default", "What it sets"), rows, (22, 16, 62))
