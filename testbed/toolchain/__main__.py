"""``python -m testbed.toolchain``: see :func:`testbed.toolchain.main`."""

import sys

from testbed.toolchain import main

sys.exit(main())
