"""``from txnlog import ...``: every public name resolves to its defining module's object, and
importing the package (which every ``txnlog.*`` import runs first) loads nothing heavy."""

from __future__ import annotations

import importlib
import subprocess
import sys

import txnlog


def test_every_exported_name_is_its_modules_object():
    assert txnlog.__all__ == sorted(txnlog._EXPORTS)
    for name, module in txnlog._EXPORTS.items():
        assert getattr(txnlog, name) is getattr(importlib.import_module(module), name), name


def test_an_unknown_name_is_an_attribute_error():
    try:
        txnlog.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("txnlog.NoSuchThing resolved")


def test_importing_the_package_and_a_component_stays_cheap():
    code = ("import sys, txnlog, txnlog.log_format, txnlog.coordinator, txnlog.datasource; "
            "print(sorted(m for m in ('pyarrow', 'numba', 'numpy', 's3fs', 'urllib3', "
            "'pyspark', 'aiohttp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
