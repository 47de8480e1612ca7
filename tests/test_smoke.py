"""The packages import under their installed names and Spark can discover the format."""

import pkgutil


def test_components_import() -> None:
    import txnlog.coordinator
    import txnlog.datasource
    import txnlog.log_format  # noqa: F401


def test_pyspark_module_is_discoverable() -> None:
    names = {m.name for m in pkgutil.iter_modules()}
    assert "pyspark_txnlog" in names
