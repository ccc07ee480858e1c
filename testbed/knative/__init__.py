"""Knative Eventing on the test bed: its own controllers and broker (:mod:`.eventing`), the
ApiServerSource's receive adapter (:mod:`.adapter`), and what the broker delivered
(:mod:`.broker_watch`)."""
