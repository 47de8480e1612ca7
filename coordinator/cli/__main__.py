"""``python -m txnlog.coordinator.cli``: the ``txnlog`` command."""

import sys

from .main import main

sys.exit(main())
