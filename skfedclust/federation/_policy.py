"""What a node agrees to do: its policy, set by its operator (a node config on Flower).

The coordinator chooses the method and its parameters, and some choices make
a node give away more than its operator may accept: fuzzy c-means seeded with
``n_clusters`` equal to a node's row count uploads every one of its rows. A
node therefore checks each request against its own policy before it answers:

``allowed-methods``
    Comma-separated estimator class names (``"KFed,FeCA,GOLDClustering"``).
    The node refuses the handshake of a fit of any other method, and any step
    that belongs to another method's module.
``min-rows-per-vector``
    The node refuses to send a message holding more than ``n_rows / m``
    vectors of its feature width (centroids, seeds) in one array: each vector
    it sends then summarises at least ``m`` of its rows on average.
``refuse-raw-rows``
    ``true``: the node refuses to send any message containing one of its own
    rows verbatim (to the server or to another party).
``min-sum-participants``
    The fewest clients a secure sum may add up (default 3). A sum of two
    tells each of them the other's vector, and a sum of one is the vector:
    the node refuses to upload to a smaller sum, whatever the server asks.

Every party has a policy: a Flower node reads it from its node config, a
simulated party gets the default one (:attr:`Party.policy
<skfedclust.federation.Party>`), so the checks that run inside client steps
(the secure sum's) hold in-process as on a deployment.

A refusal is a :class:`PermissionError` with the reason; the server raises it
as a :class:`~skfedclust.flower.FlowerNodeError` naming the node.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_MIN_SUM_PARTICIPANTS", "NodePolicy"]

#: A secure sum of two clients tells each the other's vector.
DEFAULT_MIN_SUM_PARTICIPANTS = 3

#: Modules whose client steps serve several methods (labelling by nearest
#: center, federated scalers, secret sharing): allowed whatever the method.
SHARED_STEP_MODULES = (
    "skfedclust.methods._centroid_steps",
    "skfedclust.preprocessing",
    "skfedclust.secure",
    "skfedclust.federation",
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _flag(value, field):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise ValueError(f"node config {field}={value!r}: expected true or false")


def _method_module(name):
    import skfedclust

    cls = getattr(skfedclust, name, None)
    if not isinstance(cls, type):
        known = ", ".join(n for n in skfedclust.__all__ if n[0].isupper())
        raise ValueError(f"node config allowed-methods names {name!r}; known: {known}")
    return cls.__module__


def _arrays(payload):
    if isinstance(payload, np.ndarray):
        yield payload
    elif isinstance(payload, dict):
        for value in payload.values():
            yield from _arrays(value)
    elif isinstance(payload, (list, tuple)):
        for value in payload:
            yield from _arrays(value)


class NodePolicy:
    """A node's policy (see the module docstring), read from its node config.

    Parameters
    ----------
    allowed_methods : list of str or None, default=None
        Estimator class names; ``None`` allows every method.
    min_rows_per_vector : int or None, default=None
        Smallest average number of the node's rows behind each vector it sends.
    refuse_raw_rows : bool, default=False
        Refuse to send any of the node's rows verbatim.
    min_sum_participants : int, default=3
        Fewest clients of a secure sum this node uploads to (at least 2).
    """

    def __init__(
        self,
        allowed_methods=None,
        min_rows_per_vector=None,
        refuse_raw_rows=False,
        min_sum_participants=DEFAULT_MIN_SUM_PARTICIPANTS,
    ):
        self.allowed_methods = None if allowed_methods is None else list(allowed_methods)
        self._modules = (
            None
            if allowed_methods is None
            else {_method_module(name): name for name in self.allowed_methods}
        )
        if min_rows_per_vector is not None and int(min_rows_per_vector) < 1:
            raise ValueError(f"min-rows-per-vector must be >= 1, got {min_rows_per_vector!r}")
        self.min_rows_per_vector = None if min_rows_per_vector is None else int(min_rows_per_vector)
        self.refuse_raw_rows = bool(refuse_raw_rows)
        if isinstance(min_sum_participants, bool) or int(min_sum_participants) < 2:
            raise ValueError(
                f"min-sum-participants must be an int >= 2 (a sum of one client is its "
                f"vector), got {min_sum_participants!r}"
            )
        self.min_sum_participants = int(min_sum_participants)

    @classmethod
    def from_node_config(cls, node_config):
        """The policy set by the node-config fields of the module docstring."""
        methods = node_config.get("allowed-methods")
        if methods is not None:
            methods = [m.strip() for m in str(methods).split(",") if m.strip()]
        minimum = node_config.get("min-rows-per-vector")
        participants = node_config.get("min-sum-participants")
        return cls(
            allowed_methods=methods,
            min_rows_per_vector=None if minimum in (None, "") else int(minimum),
            refuse_raw_rows=_flag(node_config.get("refuse-raw-rows", False), "refuse-raw-rows"),
            min_sum_participants=(
                DEFAULT_MIN_SUM_PARTICIPANTS if participants in (None, "") else int(participants)
            ),
        )

    def check_method(self, method):
        """Refuse a fit of ``method`` (an estimator class name) that the policy does not allow."""
        if self.allowed_methods is not None and method not in self.allowed_methods:
            raise PermissionError(
                f"this node's policy allows the methods {', '.join(self.allowed_methods)}; "
                f"it does not take part in a fit of {method}"
            )

    def check_step(self, step_name):
        """Refuse a client step (``module:function``) of a method the policy does not allow."""
        if self._modules is None:
            return
        module = step_name.partition(":")[0]
        if module in self._modules or any(
            module == shared or module.startswith(shared + ".") for shared in SHARED_STEP_MODULES
        ):
            return
        raise PermissionError(
            f"this node's policy allows the methods {', '.join(self.allowed_methods)}; "
            f"step {step_name} belongs to none of them"
        )

    def check_outgoing(self, data, to_server, to_peers, step_name):
        """Refuse to send what a step sends if it breaks the policy.

        The vector count applies to what goes to the server (summaries such as
        centroids); secret shares to other parties are not summaries. Raw rows
        are refused on both.
        """
        if data is None or (self.min_rows_per_vector is None and not self.refuse_raw_rows):
            return
        n_rows, width = data.shape
        rows = None
        for payload, counted in ((to_server, True), (to_peers, False)):
            for array in _arrays(payload):
                if array.ndim != 2 or array.shape[1] != width or array.shape[0] == 0:
                    continue
                if counted:
                    self._check_count(array.shape[0], n_rows, step_name)
                if self.refuse_raw_rows:
                    if rows is None:
                        rows = {r.tobytes() for r in np.ascontiguousarray(data, dtype=np.float64)}
                    sent = np.ascontiguousarray(array, dtype=np.float64)
                    if any(r.tobytes() in rows for r in sent):
                        raise PermissionError(
                            f"step {step_name} would send rows of this node verbatim, which "
                            "its policy (refuse-raw-rows) forbids"
                        )

    def _check_count(self, n_vectors, n_rows, step_name):
        minimum = self.min_rows_per_vector
        if minimum is not None and n_vectors * minimum > n_rows:
            raise PermissionError(
                f"step {step_name} would send {n_vectors} vectors summarising this node's "
                f"{n_rows} rows (fewer than {minimum} rows each, its policy's "
                "min-rows-per-vector)"
            )

    def __repr__(self):
        return (
            f"NodePolicy(allowed_methods={self.allowed_methods!r}, "
            f"min_rows_per_vector={self.min_rows_per_vector!r}, "
            f"refuse_raw_rows={self.refuse_raw_rows!r}, "
            f"min_sum_participants={self.min_sum_participants!r})"
        )
