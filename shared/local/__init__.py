"""Local stand-ins for the cluster parts (Knative Broker) used by tests and the local runner."""
