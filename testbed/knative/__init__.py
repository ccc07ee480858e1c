"""Knative Eventing on the test bed, its own upstream binaries as host processes.

- :mod:`.eventing`: ``KnativeEventing`` and ``start_eventing`` (install, start, restart the data
  plane, stop); :mod:`.install` puts its CRDs, config maps, RBAC, Services and Deployments in
  place; :mod:`.process_table` says which six processes run and with what environment;
  :mod:`.readiness` waits for an object's Ready condition; :mod:`.names` has the namespace and
  ``ko://`` image names;
- :mod:`.adapter`: the ApiServerSource's receive adapter, from its Deployment's environment;
- :mod:`.broker_watch`: what the broker delivered and what each function answered, read off the
  service proxy;
- :mod:`.kubectl`: the one ``kubectl`` helper the installer and the local stack call.
"""
