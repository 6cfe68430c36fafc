"""skfedclust: federated clustering for scikit-learn.

Each estimator simulates a multi-party protocol faithfully (what each client
computes, what crosses the wire, what the server learns) behind the usual
``fit`` / ``predict`` / ``labels_`` API.

The package's names are loaded on first use (PEP 562): ``from skfedclust
import KFed`` imports the k-FED module and what it needs, not every method. A
Flower node starts a process per message, so what an import costs is paid
at every protocol round.
"""

import importlib

__version__ = "0.1.0.dev0"

#: Where each public name lives.
_NAMES = {
    "BaseFederatedClustering": "skfedclust.methods",
    "DCClustering": "skfedclust.methods",
    "FeCA": "skfedclust.methods",
    "FedSpectralClustering": "skfedclust.methods",
    "FederatedFuzzyCMeans": "skfedclust.methods",
    "FederatedKMeans": "skfedclust.methods",
    "GOLDClustering": "skfedclust.methods",
    "KFed": "skfedclust.methods",
    "KumarFederatedKMeans": "skfedclust.methods",
    "MAvg": "skfedclust.methods",
    "OmniFCClustering": "skfedclust.methods",
    "feca_aggregate": "skfedclust.methods",
    "FederatedMinMaxScaler": "skfedclust.preprocessing",
    "FederatedStandardScaler": "skfedclust.preprocessing",
    "Federation": "skfedclust.federation",
    "Ledger": "skfedclust.federation",
    "SERVER": "skfedclust.federation",
    "select_n_clusters": "skfedclust.model_selection",
}
_SUBMODULES = (
    "clusterers",
    "datasets",
    "federation",
    "metrics",
    "model_selection",
    "partition",
    "preprocessing",
)

__all__ = sorted([*_NAMES, *_SUBMODULES, "__version__"], key=lambda n: (n.islower(), n))


def __getattr__(name):
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
