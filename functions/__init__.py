"""The Tenant pipeline's functions, one module each, each a Flask app for gunicorn.

``install`` -> ``check_ready`` -> ``store_kubeconfig`` -> ``notify_api``, chained by reply events
through the broker; ``dead_letter`` receives what the broker gave up on. Each module exposes
``create_app()`` and keeps its decision logic in a plain ``handle`` function.
"""

MODULES = ("install", "check_ready", "store_kubeconfig", "notify_api", "dead_letter")
