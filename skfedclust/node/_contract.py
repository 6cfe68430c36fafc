"""The client-step contract: what a client step is, what it returns, and how a node names one.

A client step is a module-level function ``step(data, inbox, state, party,
**public) -> Reply``. A node runs steps by name (``module:qualname``) and only
from the packages it allows; :func:`resolve_client_step` is the one place a
name becomes a function, with the role checks its declaration implies.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect

from ._refusal import NodeRefusal

__all__ = [
    "Inbox",
    "Reply",
    "allowed_step_modules",
    "check_role",
    "client_step_name",
    "resolve_client_step",
    "step_name",
]


class Reply:
    """What a client step returns: what it sends, keeps and hands its own user.

    Parameters
    ----------
    send : object, default=None
        The message to the server (arrays, scalars, tuples or dicts of them).
        ``None`` sends nothing.
    keep : dict, default=None
        Updates to the client's private state, available to its later steps
        as ``state[key]`` and never sent.
    to_peers : dict, default=None
        Messages to other parties, ``{party: payload}``, delivered to each
        recipient's inbox for its next step as ``inbox[tag][sender]``.
    output : dict, default=None
        What the party hands its own user at the end of the fit (its labels
        under ``"labels"``, one per row it holds). Never sent: in a simulation
        the user plays every party and gets them through
        :meth:`Runtime.hand_back`; a deployed node writes its own.
    reveals : object, default=None
        Vectors the server computes from ``send`` with what it already holds,
        never sent themselves: the mean of a cluster, from the sum of its
        rows' deviations from a center the server chose and their count. The
        node's policy (``refuse-raw-rows``) searches them for its rows as if
        they were sent, when ``send`` goes to the server in the clear. A
        function of no argument computing them is called only where the
        policy searches them.
    """

    __slots__ = ("send", "keep", "to_peers", "output", "reveals")

    def __init__(self, send=None, *, keep=None, to_peers=None, output=None, reveals=None):
        self.send = send
        self.keep = dict(keep) if keep else {}
        self.to_peers = dict(to_peers) if to_peers else {}
        self.output = dict(output) if output else {}
        self.reveals = reveals


class Inbox(dict):
    """The messages delivered to a party for its step: ``{tag: payload}``.

    A server message is ``inbox[tag]``; peer messages are
    ``inbox[tag][sender]``. ``server_tags`` names the tags the server sent, so
    that a step can tell the server's (public, the same for every client it
    broadcast to) messages from its peers'.
    """

    __slots__ = ("server_tags",)

    def __init__(self, messages=(), server_tags=()):
        super().__init__(messages)
        self.server_tags = frozenset(server_tags)


#: Packages whose client steps may be run by name in this context: ``None``
#: allows any module-level client step (a simulation); a Flower node sets its
#: allow-list while it runs a step, so a step that names another one (a secure
#: sum wrapping the step whose vector it adds) cannot name a step it refuses.
_ALLOWED_STEP_MODULES = contextvars.ContextVar("skfedclust_allowed_step_modules", default=None)

_STEP_PARAMETERS = ["data", "inbox", "state", "party"]


def _allowed(module, allowed_modules):
    if allowed_modules is None:
        return True
    return any(module == m or module.startswith(m + ".") for m in allowed_modules)


def client_step_name(step, allowed_modules=None):
    """``module:qualname`` of a client step, checked as :func:`resolve_client_step` checks it."""
    module = getattr(step, "__module__", None)
    qualname = getattr(step, "__qualname__", None)
    if not inspect.isfunction(step) or module is None or "<locals>" in (qualname or "<locals>"):
        raise TypeError(
            f"client step {step!r} must be a module-level function, so that a node can "
            "run it by name"
        )
    name = f"{module}:{qualname}"
    # The role is checked where the step is run, by the node.
    resolve_client_step(name, allowed_modules, role="bound")
    return name


#: Roles a client step may be run in, by what runs it: on its own (``"top"``),
#: as the vector of a secure sum (``"summand"``), or inside a bound agreement,
#: where only the binary order of its largest entry leaves the node
#: (``"bound"``).
_ROLES = ("top", "summand", "bound")


@functools.lru_cache(maxsize=1024)
def _leading_parameters(function):
    # inspect.signature costs more than the rest of a check made at every step.
    return list(inspect.signature(function).parameters)[:4]


def resolve_client_step(name, allowed_modules=None, role="top"):
    """The client step called ``name`` (``module:qualname``), if it may run here.

    Only module-level functions whose first parameters are ``data, inbox,
    state, party`` are client steps, and only those of ``allowed_modules``
    (default: the allow-list of the context, set by a Flower node while it
    runs a step; any module in a simulation). Anything else (a builtin, a
    class, a function of another package) is refused with a
    :class:`PermissionError`, and so is a :func:`bound_only` step asked for in
    any other ``role`` than ``"bound"``.
    """
    if allowed_modules is None:
        allowed_modules = _ALLOWED_STEP_MODULES.get()
    policy = _SERVING.get()
    if policy is not None:
        # A step naming another (a secure sum wrapping the step whose vector it
        # adds) names one of the method the node agreed to (the gate's
        # agreed_method), as the gate checks for the steps the coordinator names.
        policy.check_step(str(name))
    module, sep, qualname = str(name).partition(":")
    if not sep or not module or not qualname or "<locals>" in qualname:
        raise NodeRefusal(
            "step-contract", f"{name!r} does not name a client step (module:function)"
        )
    if not _allowed(module, allowed_modules):
        raise NodeRefusal(
            "step-contract",
            f"client step {name!r} is outside the packages this node runs "
            f"({', '.join(allowed_modules)})",
        )
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise NodeRefusal(
            "step-contract",
            f"client step {name!r} does not exist on this node (is the same skfedclust "
            f"version installed everywhere?): {exc}",
        ) from exc
    if not inspect.isfunction(obj) or not _allowed(obj.__module__, allowed_modules):
        raise NodeRefusal("step-contract", f"{name!r} is not a function of the allowed packages")
    if policy is not None:
        # A secure sum's vector answers the coordinator's centers as a step of
        # its own would: the same rule.
        policy.check_coordinator_centers(obj)
    params = _leading_parameters(obj)
    if params != _STEP_PARAMETERS:
        raise NodeRefusal(
            "step-contract",
            f"{name!r} is not a client step: its parameters start with {params}, not "
            "(data, inbox, state, party)",
        )
    if role not in _ROLES:
        raise ValueError(f"role must be one of {_ROLES}, got {role!r}")
    check_role(obj, name, role)
    return obj


#: The policy of the node serving a step (set by its gate).
_SERVING = contextvars.ContextVar("skfedclust_serving", default=None)


@contextlib.contextmanager
def serving(policy):
    """Steps named by the step being served are checked against ``policy``."""
    token = _SERVING.set(policy)
    try:
        yield
    finally:
        _SERVING.reset(token)


@contextlib.contextmanager
def allowed_step_modules(modules):
    """Restrict the client steps that a step may name to ``modules``."""
    token = _ALLOWED_STEP_MODULES.set(tuple(modules))
    try:
        yield
    finally:
        _ALLOWED_STEP_MODULES.reset(token)


def _check_reply(reply, step, client):
    if reply is None:
        return Reply()
    if not isinstance(reply, Reply):
        raise TypeError(
            f"client step {step.__name__} returned {type(reply).__name__} on client {client}; "
            "a client step returns a Reply(send=..., keep=..., to_peers=..., output=...)"
        )
    return reply


def step_name(step):
    """``module:qualname`` of a step (a name given as a string stays as it is)."""
    if isinstance(step, str):
        return step
    return f"{getattr(step, '__module__', '?')}:{getattr(step, '__qualname__', step)}"


def check_role(step, name, role):
    """Refuse ``step`` in a ``role`` its declaration excludes (rule ``declared-release``).

    A ``sum_only`` step runs only inside a secure sum (as its vector or its
    bound); a ``bound_only`` step only inside a bound agreement, which sends
    the binary order of its largest entry and nothing else.
    """
    if role not in _ROLES:
        raise ValueError(f"role must be one of {_ROLES}, got {role!r}")
    if getattr(step, "__skfedclust_sum_only__", False) and role == "top":
        raise NodeRefusal(
            "declared-release",
            f"client step {name!r} sends values only their sum over the clients may reveal; "
            "refused as a step of its own (it runs only inside a secure sum)",
        )
    if getattr(step, "__skfedclust_bound_only__", False) and role != "bound":
        raise NodeRefusal(
            "declared-release",
            f"client step {name!r} sends row-level values and runs only inside a bound "
            "agreement (which sends the binary order of its largest entry); refused as "
            + ("a step of its own" if role == "top" else "the vector of a secure sum"),
        )
