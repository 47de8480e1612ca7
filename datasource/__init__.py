"""txnlog.datasource: the PySpark Python Data Source ``txnlog``."""
