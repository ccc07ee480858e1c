"""The building blocks the functions' steps are made of: the rules every step keeps (reconcile),
ownership checks against the cluster (claims), the functions' access in a Tenant's namespace, the
per-namespace work lock, and certificate rotation.
"""
