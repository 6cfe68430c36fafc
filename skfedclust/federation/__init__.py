"""The federation: who holds what, the protocol runtime and the message ledger.

A federated method is a protocol written once against a :class:`Runtime`:
client steps ``step(data, inbox, state, party, **public) -> Reply`` run on the
clients, what they send reaches the server as :class:`Received` (exactly what
the :class:`Ledger` recorded), and the server's messages go back through
``broadcast`` and ``send``. :class:`Runtime` is the interface every runtime
implements (:class:`InProcessRuntime` here, the Flower runtime in
:mod:`skfedclust.flower`); :func:`use_runtime` makes estimators fit on another.
See the user guide's "Writing a method" page.
"""

from ..node._declarations import (
    bound_only,
    data_independent,
    dp_release,
    on_private_rows,
    releases_nothing,
    releases_rows,
    sum_only,
    summand,
    summary,
)
from ._federation import Federation
from ._inputs import (
    DEFAULT_N_CLIENTS,
    FEDERATED_PARAMETER_CONSTRAINTS,
    INPUT_FORMS,
    build_federation,
    input_form,
    layout_from_partition,
)
from ._ledger import SERVER, Ledger, Message, payload_nbytes
from ._runtime import (
    InProcessRuntime,
    Party,
    Received,
    Reply,
    Runtime,
    Session,
    current_runtime_factory,
    logger,
    per_client_inputs,
    private_entropy,
    progress,
    reads,
    side_by_side,
    use_runtime,
)

__all__ = [
    "DEFAULT_N_CLIENTS",
    "FEDERATED_PARAMETER_CONSTRAINTS",
    "INPUT_FORMS",
    "SERVER",
    "Federation",
    "InProcessRuntime",
    "Ledger",
    "Message",
    "Party",
    "Received",
    "Reply",
    "Runtime",
    "Session",
    "bound_only",
    "data_independent",
    "dp_release",
    "on_private_rows",
    "summary",
    "sum_only",
    "summand",
    "build_federation",
    "current_runtime_factory",
    "input_form",
    "layout_from_partition",
    "logger",
    "payload_nbytes",
    "per_client_inputs",
    "private_entropy",
    "progress",
    "reads",
    "releases_nothing",
    "releases_rows",
    "side_by_side",
    "use_runtime",
]
