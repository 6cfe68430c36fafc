"""A node's refusal, and the table of the rules a node enforces.

Every refusal a node makes is a :class:`NodeRefusal` (a
:class:`PermissionError`) carrying the name of its rule; ``RULES`` lists
each rule with what it guards and the node-config field that sets it. The
Security page renders its rule table from ``RULES``, so the page and the
code cannot disagree.
"""

from __future__ import annotations

__all__ = ["RULES", "NodeRefusal", "refuse"]

#: ``rule: (what the node refuses, the node-config field that sets it or "")``.
RULES = {
    "allowed-methods": (
        "a fit of a method its operator did not allow, or a step of another method's module",
        "allowed-methods",
    ),
    "agreed-method": (
        "a step that belongs to another method than the one agreed at the handshake",
        "",
    ),
    "step-contract": (
        "a name that is not a module-level client step (data, inbox, state, party) of "
        "the packages the node runs",
        "",
    ),
    "declared-release": (
        "a client step that declares no kind of release, or runs in a role its "
        "declaration excludes (a bound-only step on its own, a sum-only step in the clear)",
        "",
    ),
    "clear-sum": (
        "one client's statistic made to be added, asked for outside a secure sum",
        "allow-clear-sums",
    ),
    "min-rows-per-vector": (
        "a summary whose vectors summarise fewer of the node's rows each than the minimum",
        "min-rows-per-vector",
    ),
    "raw-row": (
        "a vector within the tolerance of one of the node's rows, sent or computable "
        "from what is sent",
        "refuse-raw-rows",
    ),
    "coordinator-centers": (
        "exact statistics for centers the coordinator chose (the Lloyd steps of "
        'coordinator="sees-totals", an array start of a blind fit), for a method the '
        "operator did not name",
        "allow-coordinator-centers",
    ),
    "row-release": (
        "a step that releases rows by its method's design, for a method the operator did not name",
        "allow-row-release",
    ),
    "dp-only": (
        "on a node with a budget: any value (any dtype) that is not a charged noisy "
        "release, data-independent, or computed from rows it privatised",
        "dp-epsilon",
    ),
    "dp-budget": (
        "a noisy release the node's budget (across fits, with a ledger) cannot pay",
        "dp-epsilon, dp-delta",
    ),
    "dp-noise": ("a release announced without noise, or with noise it cannot check", ""),
    "noise-share": (
        "unmasking a sum with fewer survivors than the noise shares it trusts",
        "dp-trusted-shares",
    ),
    "dp-bounds": ("a bound agreement on a node with a budget (its bounds are the public box)", ""),
    "min-sum-participants": (
        "a secure sum of fewer clients than the minimum",
        "min-sum-participants",
    ),
    "threshold-floor": (
        "a secure sum whose self-mask threshold is below its floor",
        "min-sum-participants",
    ),
    "fresh-sum": ("a secure sum id used before in the fit (a mask key used twice)", ""),
    "one-sum-per-input": (
        "the same statistic (keyed by its inputs and by its decoded values, whatever their "
        "shift, scale or dtype) summed over clients that would let the server isolate fewer "
        "than the minimum",
        "min-sum-participants, privacy-ledger",
    ),
    "stage": ("a secure sum's stages out of order (unmask before upload, twice)", ""),
    "consistent-view": (
        "revealing pair keys for an announcement its peers did not attest",
        "",
    ),
    "well-formed": ("a malformed secure-sum request", ""),
    "sampling": ("a participant sample not drawn from the nodes' committed randomness", ""),
    "bound-queries": (
        "more bound agreements per fit and step than the limit",
        "max-bound-queries",
    ),
    "max-fits": ("a fit beyond the most the node takes part in (100 by default)", "max-fits"),
    "ledger-damaged": (
        "running with a ledger that was written and is now missing, empty or damaged",
        "privacy-ledger",
    ),
    "lcc-noise": ("coded shares without the privacy noise the threshold needs", ""),
    "one-offset": ("a second OmniFC offset in one fit", ""),
    "dc-full-rank-maps": (
        "a DC map that keeps every dimension of the node's rows",
        "dc-full-rank-maps",
    ),
    "roster": ("a roster, key or signature the node cannot verify", ""),
    "dp-inputs": (
        "on a node with a budget: a charged step's server input it cannot project into its "
        "public box (NaN centers, a box that is not finite or has no width, a bandwidth that "
        "is not a finite positive number) or an option its sensitivity does not cover",
        "dp-epsilon",
    ),
}


class NodeRefusal(PermissionError):
    """A node refuses a request that breaks one of its rules.

    Parameters
    ----------
    rule : str
        The name of the rule (a key of ``RULES``).
    message : str
        What was refused and why.

    Attributes
    ----------
    rule : str
        The name of the rule.
    """

    def __init__(self, rule, message):
        super().__init__(f"refused by rule {rule!r}: {message}")
        self.rule = rule

    def __reduce__(self):
        # Picklable across processes (a step worker, joblib's loky) with its rule.
        return (type(self), (self.rule, str(self).partition(": ")[2]))


def refuse(rule, message):
    """Raise a :class:`NodeRefusal` of ``rule`` (which must be in ``RULES``)."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}")
    raise NodeRefusal(rule, message)
