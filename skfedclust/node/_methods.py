"""The package's methods as a node knows them: each estimator's client-step modules.

A node checks that a step belongs to the method it agreed to; it knows the
methods by name from this registry, which each estimator class of the
package fills when it is defined (``BaseFederatedClustering.__init_subclass__``
and the federated scalers'). The node package sits below the estimators and
imports none of them: a look-up of a name not yet known loads that one
estimator by name (the packages load their names on first use), as a node
loads a client step by name, so that a node serving one method imports that
method only.
"""

from __future__ import annotations

import importlib

__all__ = ["package_method", "package_method_names", "register_method"]

_REGISTRY = {}
#: Where the package's estimators are defined, each loaded by name on first use.
_PACKAGES = ("skfedclust.methods", "skfedclust.preprocessing")


def register_method(cls, modules=()):
    """Record ``cls`` (an estimator class of the package) and the modules of its client steps."""
    if cls.__module__.startswith("skfedclust."):
        _REGISTRY[cls.__name__] = (cls.__module__, *modules)
    return cls


def package_method(name):
    """The modules of the client steps of the package's method ``name`` (``None``: no such method).

    The estimator's own module first, then those it declares
    (``_client_step_modules``: FederatedKMeans' k-FED start).
    """
    name = str(name)
    if name not in _REGISTRY:
        for package in _PACKAGES:
            module = importlib.import_module(package)
            if name in getattr(module, "__all__", ()):
                getattr(module, name)  # defining the class registers it
    return _REGISTRY.get(name)


def package_method_names():
    """The names of every method of the package (loads them all: for messages only)."""
    for package in _PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            if name[:1].isupper():
                getattr(module, name)
    return sorted(_REGISTRY)
