"""The ``txnlog`` PySpark data source: the entry point Spark instantiates.

Spark builds this object in short-lived planner workers and pickles it, so it holds only
the options; readers and writers are built per query and import their heavy dependencies
(pyarrow, the codec, storage) lazily, keeping ``pyspark_txnlog``'s import cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from .options import InvalidOptionError
from .schema import read_ddl

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType


class TxnlogDataSource(DataSource):
    """``spark.read/write/readStream/writeStream.format("txnlog")``."""

    @classmethod
    def name(cls) -> str:
        return "txnlog"

    def schema(self) -> str | StructType:
        headers = (self.options.get("includeHeaders") or "false").strip().lower() == "true"
        if self.options.get("value.format") or self.options.get("key.format"):
            from .options import parse_read_options
            from .read.projection import full_read_schema
            from .read.value_decoding import plan_all

            decodings = plan_all(parse_read_options(self.options))
            types = {c: d.value_type() for c, d in decodings.items()}
            return full_read_schema(headers, types.get("value"), types.get("key"))
        return read_ddl(include_headers=headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        from .options import parse_read_options
        from .read.batch_reader import TxnlogBatchReader, TxnlogFilteringBatchReader

        opts = parse_read_options(self.options)
        cls = TxnlogFilteringBatchReader if opts.push_filters else TxnlogBatchReader
        return cls(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidOptionError(
                "txnlog is an append-only log: mode('overwrite') would have to delete "
                "committed records; use mode('append')")
        from .options import parse_write_options
        from .write.batch_writer import TxnlogBatchWriter

        return TxnlogBatchWriter(parse_write_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .options import parse_read_options
        from .read.stream_reader import TxnlogStreamReader

        return TxnlogStreamReader(parse_read_options(self.options, streaming=True), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            raise InvalidOptionError(
                "txnlog streams support outputMode('append') only: complete/update modes "
                "would rewrite an append-only log")
        from .options import parse_write_options
        from .write.stream_writer import TxnlogStreamWriter

        return TxnlogStreamWriter(parse_write_options(self.options, streaming=True), schema)
