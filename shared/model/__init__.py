"""The Tenant and its rules, as values and pure functions: the resource, its names, its lifecycle and
the pipeline's steps, ownership, isolation, the Helm values. No I/O and no outside client here.
"""
