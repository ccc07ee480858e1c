"""Tenants at the edge of the schema, created for real on the test bed's kube-apiserver (v1.34)
with deploy/crd/tenants.yaml as shipped: the largest quota it admits and one unit more, the
shortest and longest tenantName, quantities written unusually, and absurd or negative ones, each
refused with the API server's own message naming the field (and, for a quota, the maximum).

Whatever is admitted is also read the way the product reads it (``Tenant.from_object``, then
``vcluster_values``): the quota reaches the Helm values unchanged, as requests and limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from shared.model import event_types, lifecycle
from shared.model.tenant import GROUP, PLURAL, VERSION, Tenant
from shared.model.values import vcluster_values

from .tenant_objects import admitted, create, refused, tenant_body

pytestmark = pytest.mark.integration

# The maximum deploy/crd/tenants.yaml ships (tests/deploy/test_tenant_crd.py ties it to the docs).
MAX_CPU = "16"
MAX_MEMORY = "64Gi"
MAX_MEMORY_BYTES = 64 * 2**30


@pytest.fixture
def namespace(tenant_crd: Path, test_namespace: str) -> str:
    return test_namespace


def reaches_helm_unchanged(obj: dict[str, Any]) -> None:
    """The product's reading of an admitted Tenant: its quota, as written, is the Helm values'
    requests and limits of the control plane."""
    tenant = Tenant.from_object(obj)
    quota = obj["spec"]["quota"]
    expected = {"cpu": str(quota["cpu"]), "memory": str(quota["memory"])}
    resources = vcluster_values(tenant, "test")["controlPlane"]["statefulSet"]["resources"]
    assert resources == {"requests": expected, "limits": expected}


@pytest.mark.parametrize(
    ("cpu", "memory"),
    [
        (MAX_CPU, MAX_MEMORY),
        (16, MAX_MEMORY_BYTES),  # integers, as `cpu: 16` in YAML sends them
        ("16000m", "65536Mi"),
        ("1.6e1", "0.0625Ti"),
        ("+16", "68719476736"),
    ],
)
def test_exactly_the_maximum_quota_is_admitted(
    custom_objects: k8s.CustomObjectsApi, namespace: str, cpu: str | int, memory: str | int
) -> None:
    obj = admitted(create(custom_objects, namespace, tenant_body("at-max", cpu=cpu, memory=memory)))
    assert obj["spec"]["quota"] == {"cpu": cpu, "memory": memory}  # stored as written
    reaches_helm_unchanged(obj)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cpu", "16001m", "16001m is more than 16, the maximum CPU of a Tenant"),  # 1m: CPU's smallest unit
        ("cpu", 17, "17 is more than 16, the maximum CPU of a Tenant"),
        ("memory", MAX_MEMORY_BYTES + 1, "68719476737 is more than 64Gi, the maximum memory of a Tenant"),
        ("memory", "65537Mi", "65537Mi is more than 64Gi, the maximum memory of a Tenant"),
    ],
)
def test_one_unit_over_the_maximum_is_refused(
    custom_objects: k8s.CustomObjectsApi, namespace: str, field: str, value: str | int, message: str
) -> None:
    quota: dict[str, Any] = {"cpu": MAX_CPU, "memory": MAX_MEMORY, field: value}
    refusal = refused(create(custom_objects, namespace, tenant_body("over-max", **quota)))
    assert [(c.reason, c.message) for c in refusal.causes] == [("FieldValueForbidden", f"Forbidden: {message}")]
    assert refusal.on(f"spec.quota.{field}")


def test_an_absurd_quota_is_refused_naming_each_field_and_its_maximum(
    custom_objects: k8s.CustomObjectsApi, namespace: str
) -> None:
    refusal = refused(create(custom_objects, namespace, tenant_body("absurd", cpu="999999Ei", memory="999999Ei")))
    assert refusal.message.startswith('Tenant.kubeopera.io "absurd" is invalid: ')
    assert "spec.quota.cpu: Forbidden: 999999Ei is more than 16, the maximum CPU of a Tenant" in refusal.message
    assert "spec.quota.memory: Forbidden: 999999Ei is more than 64Gi, the maximum memory of a Tenant" in refusal.message
    assert sorted((c.field, c.reason) for c in refusal.causes) == [
        ("spec.quota.cpu", "FieldValueForbidden"),
        ("spec.quota.memory", "FieldValueForbidden"),
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpu", "-1"),
        ("cpu", -3),
        ("cpu", "-500m"),
        ("memory", "-1Gi"),
        ("memory", "-0.5Ki"),
        ("cpu", "0"),  # a limit of 0 would mean no limit at all
        ("memory", 0),
        ("cpu", "1e99999999999999999999"),  # the pattern lets it pass; Kubernetes' parser does not
    ],
)
def test_negative_zero_and_unparseable_quantities_are_refused(
    custom_objects: k8s.CustomObjectsApi, namespace: str, field: str, value: str | int
) -> None:
    quota: dict[str, Any] = {"cpu": "1", "memory": "1Gi", field: value}
    refusal = refused(create(custom_objects, namespace, tenant_body("not-positive", **quota)))
    assert [(c.field, c.message) for c in refusal.causes] == [
        (f"spec.quota.{field}", f'Invalid value: "": {value} is not a quantity greater than zero')
    ]


WHOLE_BYTES = " is not a whole number of bytes (500m is half a byte; 500Mi is 500 mebibytes)"


@pytest.mark.parametrize(
    ("field", "value", "refusal"),
    [
        ("cpu", "1.5", None),
        ("cpu", "1500m", None),
        ("cpu", "1e1", None),
        ("cpu", "1e3", "Forbidden: 1e3 is more than 16, the maximum CPU of a Tenant"),  # a thousand CPUs
        ("cpu", "2Ki", "Forbidden: 2Ki is more than 16, the maximum CPU of a Tenant"),
        ("memory", "1e3", None),
        ("memory", "2Ki", None),
        ("memory", "1.5Gi", None),  # 1610612736 bytes
        ("memory", "0.0625Ti", None),  # 64Gi
        ("memory", "1.5k", None),
        ("memory", "1.5", 'Invalid value: "": ' + "1.5" + WHOLE_BYTES),
        ("memory", "1500m", 'Invalid value: "": ' + "1500m" + WHOLE_BYTES),
        ("memory", "1.2Gi", 'Invalid value: "": ' + "1.2Gi" + WHOLE_BYTES),  # 1288490188.8 bytes
    ],
)
def test_unusual_quantities_are_admitted_where_they_are_valid_for_the_field(
    custom_objects: k8s.CustomObjectsApi, namespace: str, field: str, value: str, refusal: str | None
) -> None:
    quota = {"cpu": "1", "memory": "1Gi", field: value}
    result = create(custom_objects, namespace, tenant_body("unusual", **quota))
    if refusal is None:
        obj = admitted(result)
        assert obj["spec"]["quota"][field] == value
        reaches_helm_unchanged(obj)
    else:
        assert [(c.field, c.message) for c in refused(result).causes] == [(f"spec.quota.{field}", refusal)]


def test_a_quota_that_is_not_a_quantity_is_refused_by_the_pattern_and_the_parser(
    custom_objects: k8s.CustomObjectsApi, namespace: str
) -> None:
    refusal = refused(create(custom_objects, namespace, tenant_body("not-quantity", memory="4 GB")))
    pattern, parser = refusal.on("spec.quota.memory")
    assert pattern.message.startswith('Invalid value: "4 GB": spec.quota.memory in body should match \'^(\\+|-)?')
    assert parser.message == 'Invalid value: "": 4 GB is not a quantity greater than zero'


def test_a_quantity_longer_than_64_characters_is_refused(custom_objects: k8s.CustomObjectsApi, namespace: str) -> None:
    admitted(create(custom_objects, namespace, tenant_body("long-ok", cpu="0" * 63 + "1")))
    refusal = refused(create(custom_objects, namespace, tenant_body("too-long", cpu="0" * 64 + "1")))
    assert [c.message for c in refusal.on("spec.quota.cpu")] == ["Too long: may not be more than 64 bytes"]


@pytest.mark.parametrize("length", [3, 32])
def test_tenant_names_of_3_and_32_characters_are_admitted(
    custom_objects: k8s.CustomObjectsApi, namespace: str, length: int
) -> None:
    name = ("t" + "0123456789" * 4)[: length - 1] + "z"
    obj = admitted(create(custom_objects, namespace, tenant_body(f"name-{length}", tenant_name=name)))
    names = Tenant.from_object(obj).spec.names
    assert names.release == f"vc-{name}" and len(names.release) <= 53
    assert names.namespace == f"vcluster-{name}" and len(names.namespace) <= 63


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ab", 'Invalid value: "ab": spec.tenantName in body should be at least 3 chars long'),
        ("t" + "0123456789" * 3 + "za", "Too long: may not be more than 32 bytes"),
    ],
)
def test_tenant_names_of_2_and_33_characters_are_refused(
    custom_objects: k8s.CustomObjectsApi, namespace: str, name: str, message: str
) -> None:
    refusal = refused(create(custom_objects, namespace, tenant_body("bad-name", tenant_name=name)))
    causes = refusal.on("spec.tenantName")
    assert [c.message for c in causes] == [message], refusal.message


# What cannot finish is refused at the door (issue 23): an upper-case cloudSpaceID (it names a
# Secret, and a Secret name is lower case) and a metadata.name that is no label value.

LOWER_CASE_ID = "cloudSpaceID must be a UUID in lower case, such as 7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b"


@pytest.mark.parametrize(
    "cloud_space_id",
    [
        "7E9D3A1B-2C4D-4E5F-9A6B-7C8D9E0F1A2B",
        "7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1A2b",  # one letter is enough
        "7e9d3a1b2c4d4e5f9a6b7c8d9e0f1a2b",  # a UUID without its dashes
        "{7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b}",
        "urn:uuid:7e9d3a1b-2c4d-4e5f-9a6b-7c8d9e0f1a2b",
    ],
)
def test_a_cloud_space_id_not_in_lower_case_uuid_form_is_refused_with_the_rule(
    custom_objects: k8s.CustomObjectsApi, namespace: str, cloud_space_id: str
) -> None:
    body = tenant_body("upper-id")
    body["spec"]["cloudSpaceID"] = cloud_space_id
    refusal = refused(create(custom_objects, namespace, body))
    messages = [c.message for c in refusal.on("spec.cloudSpaceID")]
    assert any(LOWER_CASE_ID in m and "tenant-<cloudSpaceID>-kubeconfig" in m for m in messages), refusal.message


def test_a_lower_case_cloud_space_id_is_admitted_and_names_a_valid_secret(
    custom_objects: k8s.CustomObjectsApi, namespace: str
) -> None:
    obj = admitted(create(custom_objects, namespace, tenant_body("lower-id")))
    secret = Tenant.from_object(obj).spec.names.kubeconfig_secret
    assert secret == secret.lower() and len(secret) <= 253


@pytest.mark.parametrize("length", [63, 64, 253])
def test_a_tenant_name_is_at_most_63_characters_a_label_value(
    custom_objects: k8s.CustomObjectsApi, namespace: str, length: int
) -> None:
    name = ("n" + "0123456789" * 26)[: length - 1] + "z"
    result = create(custom_objects, namespace, tenant_body(name, tenant_name="long-name"))
    if length <= 63:
        assert admitted(result)["metadata"]["name"] == name
        return
    refusal = refused(result)
    assert refusal.message == (
        f'Tenant.kubeopera.io "{name}" is invalid: <nil>: Invalid value: "object": '
        "metadata.name must be at most 63 characters (it is the value of the label kubeopera.io/owner-name)"
    )


def test_a_new_tenant_reads_pending_with_no_write_in_every_answer(
    custom_objects: k8s.CustomObjectsApi, namespace: str
) -> None:
    """Issue 29: a new Tenant's Pending is the CRD's default, not a status write. The API server
    puts it into the create's answer, every read, and the watch events the ApiServerSource sends
    on (which the router judges: ``lifecycle.accepted_by_install``); a status whose phase is
    removed reads Pending again."""
    listed = custom_objects.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    since = listed["metadata"]["resourceVersion"]
    made = admitted(create(custom_objects, namespace, tenant_body("defaulted")))
    assert made["status"] == {"phase": "Pending"}, "the create's answer"
    read = custom_objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "defaulted")
    assert read["status"] == {"phase": "Pending"} and read["metadata"]["generation"] == 1
    stream = watch.Watch().stream(
        custom_objects.list_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        resource_version=since,
        field_selector="metadata.name=defaulted",
        timeout_seconds=10,
    )
    added = next(e for e in stream if e["type"] == "ADDED")
    assert added["object"]["status"] == {"phase": "Pending"}, "the watch event"
    tenant = Tenant.from_object(added["object"])
    assert lifecycle.unwritten(tenant) and lifecycle.next_step(tenant) == event_types.INSTALL

    cleared = custom_objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "defaulted", {"status": {"phase": None}}  # a merge patch: removed
    )
    assert cleared["status"] == {"phase": "Pending"}
