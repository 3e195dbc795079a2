"""MolSpec's engine: `from molspec_core import Predictor`, then `Predictor.load("forward").predict(...)` (README,
"Python API").

The names below, and the submodules (`molspec_core.roundtrip.check_round_trip`, as the README writes it), are
imported when first asked for, so that `import molspec_core.threads` (the training path, which has no RDKit) does
not load the service, torch's decoders and RDKit with them.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys

# name -> the module that defines it
_EXPORTS = {
    "Predictor": "service",
    "QueryResult": "service",
    "Prediction": "service",
    "SamplingOptions": "methods",
    "use_threads": "threads",
}

__all__ = list(_EXPORTS)


def _after_fork_in_child() -> None:
    if "torch" in sys.modules:  # torch not loaded: no step can hang, and none is imported here
        importlib.import_module(".threads", __name__).one_thread_after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


def __getattr__(name: str) -> object:
    if name == "__version__":  # the installed package's, as `pip show molspec` and evaluate's reports give it
        try:
            return importlib.metadata.version("molspec")
        except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
            return "unknown (not installed)"
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)  # a submodule not imported yet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
