"""kubeopera-tenants' own library: what every function shares, in layers a reader sees in the tree.

From the bottom: ``errors``; ``observability`` (logs, metrics, traces); ``model`` (the Tenant and
its rules, pure); ``settings``; ``delivery`` (HTTP, CloudEvents, sender identity, the sink);
``adapters`` (one per outside system); ``steps`` (the building blocks of the functions' steps);
then ``runtime`` and ``cli``. A module imports only from its own layer or one below it
(``tests/unit/test_layers.py``).
"""
