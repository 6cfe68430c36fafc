"""A node's policy: see :mod:`skfedclust.node._policy` (kept here for old imports)."""

from ..node._policy import NodePolicy, method_step_modules

__all__ = ["NodePolicy", "method_step_modules"]
