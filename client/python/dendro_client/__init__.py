"""Python client for Dendro, the hierarchical clustering service (dendrod).

    from dendro_client import Client
    client = Client("127.0.0.1:50051")          # default: $DENDRO_SERVER
    model = client.fit_l2h(logits, name="cifar").wait()
    Z = model.tree().linkage                    # SciPy linkage matrix

The import name is ``dendro_client`` (the distribution is ``dendro-client``):
the wire format's own package is ``dendro.v1``, so a top-level ``dendro``
would collide with stubs generated from proto/ by other tools. The gRPC
stubs are generated from proto/ at build time, or on first use in a source
checkout (see ``dendro_client._stubs``).
"""
from .client import Client, Dataset
from .errors import DendroError
from .jobs import Job, ProgressBar
from .models import Classes, Model, Prediction, parse_model_ref
from .tree import Tree

__version__ = "0.1.0"

__all__ = ["Client", "Classes", "Dataset", "DendroError", "Job", "Model", "Prediction",
           "ProgressBar", "Tree", "parse_model_ref", "__version__"]
