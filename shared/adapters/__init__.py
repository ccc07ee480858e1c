"""One adapter per outside system: the Kubernetes API, helm (and helm's own record of a release),
kubeopera-api, and a vCluster's own API. Each speaks in the model's values and raises the
project's errors.
"""
