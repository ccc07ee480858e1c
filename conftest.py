"""The test bed's fixtures and failure reports, for every test folder (``tests/``, ``testbed/tests/``)."""

pytest_plugins = ["testbed.fixtures"]
