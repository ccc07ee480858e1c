"""The whole pipeline on this machine: what ``kubeopera-tenants local``, the end-to-end tests and
the benchmarks run.

- :mod:`.stack`: ``start_stack`` (everything, in order) and the running ``Stack``; its parts:
  :mod:`.options`, :mod:`.manifests` (``deploy/`` as admitted, the routes, the Service → module
  map), :mod:`.function_processes` (each function under gunicorn), :mod:`.identities` (a
  kubeconfig per ServiceAccount), :mod:`.kubelet_images` (what the kubelet stand-in may run),
  :mod:`.project` (paths in the clone), :mod:`.errors`;
- :mod:`.runner`: the live view of ``local``; :mod:`.ticker`: the resync PingSource's event;
- :mod:`.cli`: the ``local`` command (an entry point of ``kubeopera_tenants.commands``).
"""
