"""The Tenant pipeline's functions, one module each, each a Flask app for gunicorn.

``install`` -> ``check_ready`` -> ``store_kubeconfig`` -> ``notify_api``, chained by reply events
through the broker; ``dead_letter`` receives what the broker gave up on; ``cleanup`` removes a
deleted Tenant's vCluster; ``resync``, on the PingSource's tick, re-drives every Tenant whose
events were lost. Each module exposes ``create_app(runtime=None)`` and keeps its decisions in
plain functions (``handle``, and pure rules beside it). gunicorn calls ``create_app()``, which
builds its ``shared.runtime.Runtime`` from the environment; a test passes one made of stand-ins.
"""
