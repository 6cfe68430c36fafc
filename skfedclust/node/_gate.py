"""The node's one gate: every runtime serves a client step through :func:`serve_step`.

The coordinator names a step and its public constants; the node decides
whether the step runs and whether what it returns leaves. The in-process
runtime and the Flower node both call :func:`serve_step`, so a simulation of
deployed nodes (``InProcessRuntime(..., policy=NodePolicy())``) refuses
exactly what a deployed node refuses, with the same :class:`NodeRefusal`.

In order, a node:

1. admits the step (:func:`admit_step`): it belongs to the method agreed at
   the handshake and to a method the policy allows, it declares what it
   releases, its declaration allows it to run on its own, a summand runs on
   its own only where clear sums are allowed, and a step answering centers
   the coordinator chose only where its operator allows it;
2. runs it on its own rows, its inbox and a read-only view of its state,
   with steps it names (the vector of a secure sum) admitted by the same
   policy and method;
3. checks the reply against the policy, by the step's declaration (rows,
   vector counts, the DP budget) before anything is sent.
"""

from __future__ import annotations

import contextlib

from ._contract import _check_reply, check_role, serving, step_name
from ._declarations import declared_releases
from ._policy import agreed_method, charged_to_node
from ._refusal import NodeRefusal

__all__ = ["LOCKED_TO", "admit_step", "call_step", "serve_step"]

#: Kept by a step that commits the node to one protocol for the rest of the fit
#: (the coordinator-blind k-means): the modules whose steps the node still runs.
LOCKED_TO = "node: this fit runs only the steps of"


def call_step(step, data, inbox, state, party, public):
    """Run ``step`` as a client step: the plain call, with no thread limits of its own."""
    return step(data, inbox, state, party, **public)


def admit_step(step, policy, method=None, name=None):
    """Refuse ``step`` before it runs if the node's policy or its declaration excludes it.

    Parameters
    ----------
    step : callable
        The client step (already resolved from its name by the runtime).
    policy : NodePolicy
        The node's policy.
    method : str, default=None
        The estimator class name agreed at the handshake (``None``: a runtime
        without one, a user's own protocol).
    name : str, default=None
        The step's ``module:qualname`` (derived from ``step`` if not given).
    """
    name = step_name(step) if name is None else name
    policy.check_step(name, method=method)
    check_role(step, name, "top")
    policy.check_clear_sum(step)
    policy.check_coordinator_centers(step, method=method)
    if not declared_releases(step):
        raise NodeRefusal(
            "declared-release",
            f"client step {name} declares nothing of what it releases; a node runs only "
            "steps that declare it (skfedclust.node._declarations)",
        )


def serve_step(step, data, inbox, state, party, public, *, method=None, run=call_step):
    """Serve one client step on a node: admit it, run it, check its reply.

    Parameters
    ----------
    step : callable
        The client step.
    data : ndarray or None
        The node's rows.
    inbox : mapping
        The messages delivered to the node for this step.
    state : mapping
        What the node kept (the step gets it read-only through ``run``).
    party : Party
        The node (its ``policy`` is the node's policy).
    public : dict
        The step's public constants.
    method : str, default=None
        The method agreed at the handshake.
    run : callable, default=call_step
        How the runtime calls the step (thread limits, a step worker):
        ``run(step, data, inbox, state, party, public) -> Reply``.

    Returns
    -------
    reply : Reply
        What the step returned, cleared to leave the node.
    """
    policy = party.policy
    admit_step(step, policy, method)
    _check_lock(step, state)
    # A runtime that names no method leaves the agreement of its caller in force.
    agreement = agreed_method(method) if method is not None else contextlib.nullcontext()
    with agreement, serving(policy):
        reply = run(step, data, inbox, state, party, public)
    reply = _check_reply(reply, step, party.index)
    _check_nothing_sent(step, reply)
    policy.check_outgoing(
        data,
        reply.send,
        reply.to_peers,
        step,
        reveals=reply.reveals,
        charged=charged_to_node(reply, step, state),
        method=method,
    )
    return reply


def _check_lock(step, state):
    """Refuse a step outside the protocol the node committed this fit to (rule ``agreed-method``).

    Once a node set up a coordinator-blind fit, a step of the same method
    that would hand the coordinator per-iteration totals (its Lloyd
    statistics for centers the coordinator sends) is refused for the rest of
    the fit: the coordinator cannot switch protocols half-way.
    """
    modules = state.get(LOCKED_TO) if state is not None else None
    if modules and step.__module__ not in modules:
        raise NodeRefusal(
            "agreed-method",
            f"this node committed the fit to the steps of {', '.join(modules)}; "
            f"it runs no other step ({step_name(step)}) until the fit ends",
        )


def _check_nothing_sent(step, reply):
    """A step declared to release nothing sends nothing, to the server or to a peer."""
    if declared_releases(step) == {"nothing"} and (reply.send is not None or reply.to_peers):
        raise NodeRefusal(
            "declared-release",
            f"client step {step_name(step)} is declared to release nothing, yet it sends "
            + ("to the server" if reply.send is not None else "to its peers"),
        )
