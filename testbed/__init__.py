"""The test bed: what runs on a laptop or in CI, never in a cluster.

The envtest way, and further: real parts on loopback for the tests, ``kubeopera-tenants local``
and the benchmarks. It is its own distribution (``testbed/pyproject.toml``,
``kubeopera-tenants-testbed``), installed by ``make`` beside the runtime and never into the image.

- :mod:`testbed.toolchain`: builds the pinned Go tools (etcd, kube-apiserver, helm, the registry,
  Knative Eventing, ...) from the module proxy into a cache outside the clone;
- :mod:`testbed.processes`: the supervisor every long-running part is started under;
- :mod:`testbed.controlplane`: etcd, kube-apiserver and kube-controller-manager, with a PKI;
- :mod:`testbed.registry`: an OCI registry holding the stand-in vCluster chart (``chart/``);
- :mod:`testbed.knative`: Knative Eventing's own controllers and broker, the ApiServerSource
  adapter, and a watch of the broker's deliveries;
- :mod:`testbed.standins`: each a named stand-in for what cannot run here (the vCluster pod,
  kubeopera-api, the kubelet, Knative Serving's status, cluster DNS and kube-proxy);
- :mod:`testbed.local`: the whole pipeline as one stack, its live view and the ``local`` command.
"""
