"""The federated clustering methods: one module per method.

Each module holds one method's client steps, its server steps and its
estimator side by side, written against the protocol runtime of
:mod:`skfedclust.federation`; the reusable algorithms they run live in
:mod:`skfedclust.clusterers` and the privacy primitives in
:mod:`skfedclust.secure`.

Names load on first use (PEP 562): running one method's client step
imports that method, not the others.
"""

import importlib

#: Where each estimator lives.
_NAMES = {
    "BaseFederatedClustering": "_base",
    "CentroidPredictMixin": "_base",
    "DCClustering": "_dc",
    "FeCA": "_feca",
    "feca_aggregate": "_feca",
    "FederatedKMeans": "_fedkmeans",
    "FedSpectralClustering": "_fedsc",
    "FederatedFuzzyCMeans": "_ffcm",
    "GOLDClustering": "_gold",
    "KFed": "_kfed",
    "KumarFederatedKMeans": "_kumar",
    "MAvg": "_mavg",
    "OmniFCClustering": "_omnifc",
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
