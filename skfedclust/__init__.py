"""skfedclust: federated clustering for scikit-learn.

Each estimator simulates a multi-party protocol faithfully (what each client
computes, what crosses the wire, what the server learns) behind the usual
``fit`` / ``predict`` / ``labels_`` API.
"""

from . import clusterers, datasets, federation, metrics, model_selection, partition, preprocessing
from .federation import SERVER, Federation, Ledger
from .methods import (
    BaseFederatedClustering,
    DCClustering,
    FeCA,
    FederatedFuzzyCMeans,
    FederatedKMeans,
    FedSpectralClustering,
    GOLDClustering,
    KFed,
    KumarFederatedKMeans,
    MAvg,
    OmniFCClustering,
    feca_aggregate,
)
from .model_selection import select_n_clusters
from .preprocessing import FederatedMinMaxScaler, FederatedStandardScaler

__version__ = "0.1.0.dev0"

__all__ = [
    "BaseFederatedClustering",
    "DCClustering",
    "FeCA",
    "FedSpectralClustering",
    "FederatedFuzzyCMeans",
    "FederatedKMeans",
    "FederatedMinMaxScaler",
    "FederatedStandardScaler",
    "Federation",
    "GOLDClustering",
    "KFed",
    "KumarFederatedKMeans",
    "Ledger",
    "MAvg",
    "OmniFCClustering",
    "SERVER",
    "__version__",
    "feca_aggregate",
    "select_n_clusters",
    "clusterers",
    "datasets",
    "federation",
    "metrics",
    "model_selection",
    "partition",
    "preprocessing",
]
