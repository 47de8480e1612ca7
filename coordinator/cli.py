"""The ``txnlog`` command line: ``dump`` (kafka-dump-log's output) and ``coordinator``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="txnlog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "version":
        from importlib.metadata import version

        print(version("txnlog"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
