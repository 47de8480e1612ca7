"""The ``txnlog`` command line.

``txnlog dump FILE...`` prints what kafka-dump-log prints; ``txnlog coordinator --root URL``
runs the transaction coordinator; ``txnlog topics|groups|transactions|configs|get-offsets|
delete-records`` are Kafka's admin tools for a root (``admin_cli.py``). Each subcommand lives
with the component that owns it and is imported only when used, so ``txnlog dump`` never
pays for the coordinator's imports.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module with add_arguments(parser) and run(args) -> int
SUBCOMMANDS = {
    "dump": ("txnlog.log_format.codec.dump",
             "print log, index and txnindex files like kafka-dump-log"),
    "coordinator": ("txnlog.coordinator.server.process",
                    "run the transaction coordinator for a root"),
    "gateway": ("txnlog.coordinator.gateway.server",
                "serve a root to Kafka clients over Kafka's wire protocol"),
    "schema-registry": ("txnlog.coordinator.schema_registry.service",
                        "serve Confluent Schema Registry's REST API from the root's _schemas"),
    # Kafka's admin tools (admin_cli.py picks the flags by the subcommand's name)
    "topics": ("txnlog.coordinator.cli.admin_tools", "list/describe/create topics (kafka-topics)"),
    "groups": ("txnlog.coordinator.cli.admin_tools",
               "consumer groups: list, describe lag, reset offsets (kafka-consumer-groups)"),
    "transactions": ("txnlog.coordinator.cli.admin_tools",
                     "list/describe/abort transactions, find hanging (kafka-transactions)"),
    "configs": ("txnlog.coordinator.cli.admin_tools", "describe topic configs (kafka-configs)"),
    "get-offsets": ("txnlog.coordinator.cli.admin_tools",
                    "earliest/latest/max-timestamp/by-time offsets (kafka-get-offsets)"),
    "delete-records": ("txnlog.coordinator.cli.admin_tools",
                       "delete records below an offset (kafka-delete-records)"),
    "acls": ("txnlog.coordinator.cli.access_tools",
             "add/remove/list the root's ACLs (kafka-acls)"),
    "scram-credentials": ("txnlog.coordinator.cli.access_tools",
                          "set/delete/list users' SCRAM credentials in the root"),
    "principal-tokens": ("txnlog.coordinator.cli.access_tools",
                         "bearer tokens of the coordinator's API bound to principals"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="txnlog", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = (argv if argv is not None else sys.argv[1:])[:1]
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if chosen == [name]:
            importlib.import_module(module_name).add_arguments(p)
    args = parser.parse_args(argv)
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
