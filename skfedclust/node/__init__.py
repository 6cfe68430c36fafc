"""What a node is: the step contract, its policy, its secure-sum guard, its ledger and DP budget.

A node runs the client steps of a fit on its own rows and decides what leaves
it. Every client step declares what it releases (:mod:`._declarations`); the
node's policy (:class:`NodePolicy`, its operator's node config) says what it
accepts; the secure-sum guard (:class:`SumRecord`) and the privacy ledger
(:class:`NodeLedger`) remember what it already revealed; its DP budget is
charged before any noise is drawn. Every refusal is a :class:`NodeRefusal`
naming its rule in ``RULES``.

This package sits below the runtimes: ``skfedclust.federation`` (in process)
and ``skfedclust.flower`` both serve client steps through it, and it imports
neither.
"""

from ._declarations import (
    RELEASE_KINDS,
    bound_only,
    coded_shares,
    data_independent,
    declared_releases,
    dp_release,
    masked_sum,
    on_private_rows,
    peer_masked,
    releases_nothing,
    releases_rows,
    sum_only,
    summand,
    summary,
)
from ._dp import MIN_SURVIVORS, charge_node, private_normal
from ._gate import admit_step, serve_step
from ._ledger import NodeLedger, data_fingerprint, ledger_summaries, reset_ledger
from ._node_config import NODE_CONFIG_FIELDS, NodeConfigField, check_node_config
from ._policy import (
    DEFAULT_MAX_FITS,
    DEFAULT_MIN_SUM_PARTICIPANTS,
    NODE_ACCOUNTANT,
    PRIVATE_ROWS,
    NodePolicy,
    agreed_method,
    charged_to_node,
    default_ledger_directory,
    method_step_modules,
)
from ._refusal import RULES, NodeRefusal, refuse
from ._sum_guard import SumRecord, SumRefusal

__all__ = [
    "DEFAULT_MAX_FITS",
    "DEFAULT_MIN_SUM_PARTICIPANTS",
    "MIN_SURVIVORS",
    "NODE_ACCOUNTANT",
    "NODE_CONFIG_FIELDS",
    "PRIVATE_ROWS",
    "RELEASE_KINDS",
    "RULES",
    "admit_step",
    "serve_step",
    "NodeConfigField",
    "NodeLedger",
    "NodePolicy",
    "NodeRefusal",
    "SumRecord",
    "SumRefusal",
    "agreed_method",
    "bound_only",
    "coded_shares",
    "masked_sum",
    "peer_masked",
    "charge_node",
    "charged_to_node",
    "check_node_config",
    "data_fingerprint",
    "data_independent",
    "declared_releases",
    "default_ledger_directory",
    "dp_release",
    "ledger_summaries",
    "method_step_modules",
    "on_private_rows",
    "private_normal",
    "refuse",
    "releases_nothing",
    "releases_rows",
    "reset_ledger",
    "sum_only",
    "summand",
    "summary",
]
