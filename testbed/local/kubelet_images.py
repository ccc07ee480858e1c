"""The images the kubelet stand-in knows, as Knative's controllers name them in the Deployments they
make: the ApiServerSource's receive adapter and the PingSource's ``mtping`` run as host processes
(with exactly the environment and ServiceAccount the controller wrote into them); the in-memory
channel dispatcher is the process Knative Eventing's start already runs."""

from __future__ import annotations

from testbed.knative.adapter import AdapterConfig, AdapterReadyProbe
from testbed.knative.eventing import KO, KnativeEventing
from testbed.processes import LogProbe
from testbed.standins.kubelet import Image
from testbed.toolchain import Toolchain


def kubelet_images(tools: Toolchain, eventing: KnativeEventing) -> dict[str, Image]:
    """Image reference -> what runs for it."""
    return {
        KO + "apiserver_receive_adapter": Image(
            binary=tools.apiserver_adapter,
            args=("-v=2",),  # client-go logs "Caches populated": the readiness check below
            probe=lambda env: AdapterReadyProbe(AdapterConfig.from_environment(env)),
        ),
        KO + "mtping": Image(binary=tools.knative / "mtping", probe=lambda env: LogProbe.matching("Started workers")),
        KO + "in_memory/channel_dispatcher": Image(
            running=lambda: "imc-dispatcher" in eventing.processes and eventing.processes["imc-dispatcher"].running()
        ),
    }
