"""The cluster tier of the test bed: a real one-node Kubernetes with real Knative Serving and Eventing."""
