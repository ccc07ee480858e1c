"""``python -m testbed.local``: the same as ``kubeopera-tenants local``."""

import sys

from testbed.local.cli import main

sys.exit(main())
