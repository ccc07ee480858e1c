"""The pipeline's event types: the contract between the functions (design.md section 3).

Knative fixes the ApiServerSource's and the PingSource's types; the ``io.kubeopera.tenant.*`` types
are ours. Which function takes and answers each is the step table's (``shared.model.lifecycle``);
how an event is read and written on the wire is ``shared.delivery.events``'.
"""

from __future__ import annotations

from typing import Final

APISERVER_ADD: Final = "dev.knative.apiserver.resource.add"
APISERVER_UPDATE: Final = "dev.knative.apiserver.resource.update"
APISERVER_DELETE: Final = "dev.knative.apiserver.resource.delete"
PROVISIONING: Final = "io.kubeopera.tenant.provisioning"
READY: Final = "io.kubeopera.tenant.ready"
KUBECONFIG_STORED: Final = "io.kubeopera.tenant.kubeconfig.stored"
# install's and cleanup's own types: the router's replies to the ApiServerSource, and resync's re-drives.
INSTALL: Final = "io.kubeopera.tenant.install"
CLEANUP: Final = "io.kubeopera.tenant.cleanup"
# The vCluster watch's hint that a Tenant's vCluster changed (its StatefulSet's rollout;
# functions.vcluster_watch): check-ready looks at once instead of at its next poll.
VCLUSTER_CHANGED: Final = "io.kubeopera.tenant.vcluster.changed"
# The PingSource's tick (its type is fixed by Knative); data is the PingSource's own.
PING: Final = "dev.knative.sources.ping"

APISERVER_TYPES: Final = frozenset({APISERVER_ADD, APISERVER_UPDATE, APISERVER_DELETE})
