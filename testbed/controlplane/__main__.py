"""``python -m testbed.controlplane``: see :func:`testbed.controlplane.main`."""

import sys

from testbed.controlplane import main

sys.exit(main())
