"""Stand-ins, each named as one, for what cannot run on this machine: the vCluster pod
(:mod:`.vcluster`), kubeopera-api (:mod:`.kubeopera_api`), the kubelet for the sources'
Deployments (:mod:`.kubelet`), Knative Serving's status for the function Services
(:mod:`.serving`), and cluster DNS with kube-proxy (:mod:`.service_proxy`)."""
