"""Every `rowbeam adapt` format: the ADAPTER_FORMATS tuple (rowbeam.adapters.adapter.AdapterFormat) of each
module of this package, found by listing the package. Adding a format is one module (plus its tests and its docs page entry)."""
from __future__ import annotations

import importlib
import pkgutil

from rowbeam.adapters.adapter import AdapterFormat

PACKAGE = "rowbeam.adapters"


def adapter_formats() -> dict[str, AdapterFormat]:
    """{name: format} over the package's modules in name order, each module's formats in its own order."""
    package = importlib.import_module(PACKAGE)
    found: dict[str, AdapterFormat] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        for fmt in getattr(module, "ADAPTER_FORMATS", ()):
            if fmt.name in found:
                raise ValueError(f"adapter format {fmt.name!r} is declared twice ({PACKAGE}.{info.name})")
            found[fmt.name] = fmt
    return found
