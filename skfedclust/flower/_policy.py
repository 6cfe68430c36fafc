"""A node's policy: see :mod:`skfedclust.federation._policy` (kept here for old imports)."""

from ..federation._policy import NodePolicy, method_step_modules

__all__ = ["NodePolicy", "method_step_modules"]
