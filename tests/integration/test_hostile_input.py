"""Hostile input (issue 14): a property-based fuzz (Hypothesis) of every function's HTTP endpoint
and of the event parser, with the test bed's real kube-apiserver behind the functions.

Each function's app is built from parts (``Runtime(settings=..., kube=..., helm=..., ...)``, as
``tests/unit/test_create_app.py`` does) around the real ``shared.adapters.kube.Kube`` adapter talking to
the real API server; only helm, kubeopera-api and resync's broker sink are small recording
stand-ins (nothing hostile may ever get that far). Requests go through Flask's test client (the
WSGI app as gunicorn calls it); header values are what a WSGI server hands over: the wire's
bytes as latin-1, so a header with invalid UTF-8 is one with characters 0x80-0xFF.

**The world.** The Tenant CRD (``deploy/crd``), a fresh namespace the functions use as theirs
(``Settings.tenant_namespace``; fresh rather than ``kubeopera-system`` so that resync, which
passes over *every* Tenant of that namespace, sees only these) holding three real Tenants: one
``Ready`` (generation 3, with its vCluster StatefulSet and its pod ready, the chart's namespace policies and its
stored kubeconfig Secret, so nothing about it needs repair), one ``Provisioning`` (generation 2)
and one being deleted (finalizer, ``deletionTimestamp``); and a decoy Tenant, named like the
Ready one, in a second namespace.

**The events** (``cases``) start from a valid event of a type the function takes (our own events
as ``shared.delivery.events.make`` builds them, the ApiServerSource's carrying the whole Tenant object,
resync's PingSource tick), written in binary mode (``events.to_binary``) or structured mode
(JSON), and are then mutated:

- the Tenant reference (``RefSpec``): another namespace (the decoy's, ``kubeopera-system``,
  ``default``, garbage), a Tenant that does not exist, another Tenant's uid or a random one, an
  old or a future generation, generation 0 or missing (with a wrong uid), wrong JSON types, a
  name with path characters (``..``, ``.``, ``/``, ``%2F``, NUL, unicode, a lone surrogate);
- the event: a type the function does not take, wrong or missing ``ce-*`` attributes, a wrong
  specversion, a bad time, odd extension names, wrong content types, invalid UTF-8, a body
  around the 1 MiB limit (up to ``2 MiB``: past it, 413), deeply nested JSON, raw bytes.

Only events that **must not cause a write** are sent: a reference that names a live Tenant at
its uid and its generation (or generation 0, "any") is a valid event, which may legitimately make
a function act, so ``cases`` never delivers one (``hypothesis.assume``); the one such reference
that must still change nothing, a live Tenant outside the functions' namespace, is asked directly
(``test_an_exact_reference_to_a_tenant_outside_the_functions_namespace_changes_nothing``). Resync ignores the
tick's content and passes over its namespace, so its accepted tick *is* delivered, over a world
that needs no repair: the property there is that such a pass writes nothing, whatever the tick
carries (its sends to the broker go to the recording sink; they are not writes).

**The properties**, per delivery: the answer is 204 (a no-op) or a 4xx with a JSON ``{"error":
...}`` body, never a 200 (a reply means the step acted), never a 5xx (a 500 is a bug; a 503 would
say the real API server refused, which nothing here provokes, so it fails too); a body past
1 MiB is answered 413, one within it never is; the functions' client sent no request but GET
(recorded at the HTTP client, ``rest_client.request``), and helm and kubeopera-api were not
called. After each function's run, the **API server's audit log** (the test bed's policy records
everything a ``system:serviceaccounts:kubeopera-system`` member does, Events and Leases
included) holds no create, update, patch or delete from the functions' identity: a client
certificate of its own, user ``kubeopera-fuzz-<hex>`` in ``system:masters`` (so that the API
server refuses nothing: a write the functions attempt lands, and shows) and in that
ServiceAccount group (so that all of it is audited), each function with its own user agent
``kubeopera-fuzz/<function>``; and the seeded Tenants' resourceVersions did not move.

Case counts: ``FUZZ_EXAMPLES`` (default 300) deliveries in all across the seven functions
(``FUZZ_EXAMPLES // 7`` each), plus ``FUZZ_EXAMPLES`` parser cases. Runs are derandomized and
keep no example database, so a run is the same on every machine and a failure shrinks the same
way each time. The nightly size:

    FUZZ_EXAMPLES=10000 tools/isolated .venv/bin/pytest -q tests/integration/test_hostile_input.py
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from flask import Flask
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from functions import check_ready, cleanup, dead_letter, install, notify_api, resync, router, store_kubeconfig
from shared.adapters.kube import Kube
from shared.adapters.kubeopera_api import CallbackResult, CloudSpaceUpdate
from shared.delivery import events
from shared.delivery.http import MAX_BODY_BYTES
from shared.errors import BadEvent
from shared.model import event_types, lifecycle
from shared.model.isolation import policy_objects
from shared.model.naming import DEFAULT_TENANT_NAMESPACE, KUBECONFIG_KEY
from shared.model.release import ReleaseState
from shared.model.tenant import FINALIZER, GROUP, KIND, PLURAL, VERSION, TenantRef
from shared.runtime import Runtime
from shared.settings import Settings
from testbed.controlplane import (
    ControlPlane,
    create_namespace,
    delete_namespace,
    kubeconfig_for_user,
    kubectl,
    wait_established,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TENANT_CRD = REPO / "deploy" / "crd" / "tenants.yaml"

EXAMPLES = max(7, int(os.environ.get("FUZZ_EXAMPLES", "300")))
PER_FUNCTION = max(1, EXAMPLES // 7)
COMMON = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "print_blob": False,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
FUNCTION_SETTINGS = settings(max_examples=PER_FUNCTION, **COMMON)  # type: ignore[arg-type]
PARSER_SETTINGS = settings(max_examples=EXAMPLES, **COMMON)  # type: ignore[arg-type]

CREATE_APPS: dict[str, Callable[[Runtime], Flask]] = {
    "router": router.create_app,
    "install": install.create_app,
    "check-ready": check_ready.create_app,
    "store-kubeconfig": store_kubeconfig.create_app,
    "notify-api": notify_api.create_app,
    "dead-letter": dead_letter.create_app,
    "cleanup": cleanup.create_app,
    "resync": resync.create_app,
}
# What each function takes (each module's Step; test_each_function_takes_these_types checks it).
ACCEPTS: dict[str, tuple[str, ...]] = {
    "router": (event_types.APISERVER_ADD, event_types.APISERVER_UPDATE, event_types.APISERVER_DELETE),
    "install": (event_types.INSTALL,),
    "check-ready": (event_types.PROVISIONING,),
    "store-kubeconfig": (event_types.READY,),
    "notify-api": (event_types.KUBECONFIG_STORED,),
    "dead-letter": (  # every type a Trigger with the dead-letter sink delivers, resync's re-drives too
        event_types.APISERVER_ADD,
        event_types.APISERVER_UPDATE,
        event_types.APISERVER_DELETE,
        event_types.INSTALL,
        event_types.PROVISIONING,
        event_types.READY,
        event_types.KUBECONFIG_STORED,
        event_types.CLEANUP,
    ),
    "cleanup": (event_types.CLEANUP,),
    "resync": (event_types.PING,),
}
ALL_TYPES = (
    *sorted(event_types.APISERVER_TYPES),
    event_types.PROVISIONING,
    event_types.READY,
    event_types.KUBECONFIG_STORED,
    event_types.INSTALL,
    event_types.CLEANUP,
    event_types.PING,
)
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
AUDIT_GROUP = f"system:serviceaccounts:{DEFAULT_TENANT_NAMESPACE}"  # what the test bed's policy audits in full
KUBECONFIG = b"apiVersion: v1\nkind: Config\nclusters: []\n"


# --- the world: real Tenants on the real API server ------------------------------------------


@dataclass(frozen=True)
class Seeded:
    """A Tenant as the API server stored it."""

    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    obj: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class World:
    """Where the functions live: their namespace, the decoy's, the seeded Tenants by role
    (``ready``, ``provisioning``, ``deleting``, ``decoy``) and a name no Tenant has."""

    tenant_namespace: str
    decoy_namespace: str
    tenants: Mapping[str, Seeded]
    unknown_name: str


ROLES = ("ready", "provisioning", "deleting", "decoy")


def _tenant_body(name: str, tenant_name: str | None = None, *, ids: int | None = None) -> dict[str, Any]:
    """A Tenant's body; ``ids`` makes its userID and cloudSpaceID fixed rather than fresh."""

    def some_id(n: int) -> str:
        return str(uuid.uuid4() if ids is None else uuid.UUID(int=ids * 16 + n))

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "userID": some_id(1),
            "tenantName": tenant_name or name,
            "cloudSpaceID": some_id(2),
            "quota": {"cpu": "1", "memory": "1Gi"},
        },
    }


def _on_paper(namespace: str, name: str, number: int, generation: int) -> Seeded:
    obj = _tenant_body(name, ids=number)
    obj["metadata"] |= {"namespace": namespace, "uid": str(uuid.UUID(int=number)), "generation": generation}
    return Seeded(namespace, name, str(uuid.UUID(int=number)), generation, "1", obj)


# A world on paper, for the parser's fuzz (no API server).
PAPER = World(
    tenant_namespace="fuzz-tenants",
    decoy_namespace="fuzz-decoy",
    tenants={
        "ready": _on_paper("fuzz-tenants", "t-ready", 1, 3),
        "provisioning": _on_paper("fuzz-tenants", "t-provisioning", 2, 2),
        "deleting": _on_paper("fuzz-tenants", "t-deleting", 3, 2),
        "decoy": _on_paper("fuzz-decoy", "t-ready", 4, 1),
    },
    unknown_name="t-unknown",
)


# --- the cases: a valid event, then mutated -----------------------------------------------------

MISSING = "@missing"  # the field is left out of the event's data


@dataclass(frozen=True)
class RefSpec:
    """The Tenant reference an event carries, symbolically: ``@target`` is the ``target``
    Tenant's value, ``@other`` another seeded Tenant's, ``@old``/``@future`` a generation below
    or above the target's, ``@missing`` no such field; anything else is used as it is."""

    target: str  # a role of World.tenants, or "unknown"
    namespace: Any
    name: Any
    uid: Any
    generation: Any


@dataclass(frozen=True)
class Case:
    """One delivery: a valid event of ``event_type`` about ``ref``, in ``mode``, then ``mutations``.

    ``shape`` is how the data names the Tenant: ``ours`` ({namespace, name, uid, generation}),
    ``apiserver`` (the whole Tenant object, ``kind`` as given, a ``deletionTimestamp`` when
    ``deleting``), or ``raw`` (``raw`` itself, any JSON)."""

    event_type: str
    shape: str
    ref: RefSpec
    mode: str  # "binary" | "structured"
    kind: Any = KIND
    deleting: bool = False
    raw: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    extensions: Mapping[str, str] = field(default_factory=dict)
    mutations: tuple[tuple[Any, ...], ...] = ()


@dataclass(frozen=True)
class Wire:
    """A request as the function's app receives it."""

    headers: dict[str, str]
    body: bytes

    def __repr__(self) -> str:
        shown = self.body if len(self.body) <= 300 else self.body[:300] + f"... ({len(self.body)} bytes)".encode()
        return f"Wire(headers={self.headers!r}, body={shown!r})"


def _resolve_ref(world: World, spec: RefSpec) -> tuple[dict[str, Any], bool]:
    """The reference's fields, and whether they name a live Tenant exactly (a valid event)."""
    target = world.tenants.get(spec.target)
    others = [t for role, t in world.tenants.items() if role != spec.target]
    values: dict[str, Any] = {}
    for key, raw in (("namespace", spec.namespace), ("name", spec.name), ("uid", spec.uid)):
        if raw == "@target":
            if key == "namespace":
                values[key] = target.namespace if target else world.tenant_namespace
            elif key == "name":
                values[key] = target.name if target else world.unknown_name
            else:
                values[key] = target.uid if target else str(uuid.UUID(int=0xBAD))
        elif raw == "@tenants":
            values[key] = world.tenant_namespace
        elif raw == "@decoy":
            values[key] = world.decoy_namespace
        elif raw == "@other":
            values[key] = getattr(others[0], key) if key != "namespace" else world.decoy_namespace
        elif raw != MISSING:
            values[key] = raw
    current = target.generation if target else 1
    symbols = {"@current": current, "@old": max(current - 1, 0), "@future": current + 1}
    generation = symbols.get(spec.generation) if isinstance(spec.generation, str) else None
    if generation is not None:
        values["generation"] = generation
    elif spec.generation != MISSING:
        values["generation"] = spec.generation
    return values, any(_names_exactly(values, tenant) for tenant in world.tenants.values())


def _names_exactly(values: Mapping[str, Any], tenant: Seeded) -> bool:
    generation = values.get("generation", 0)
    return (
        values.get("namespace") == tenant.namespace
        and values.get("name") == tenant.name
        and values.get("uid") == tenant.uid
        and type(generation) is int
        and generation in (0, tenant.generation)
    )


def render(world: World, case: Case) -> tuple[Wire, bool]:
    """The request for ``case``, and whether it is a valid event about a live Tenant."""
    ref_fields, exact = _resolve_ref(world, case.ref)
    data: Any
    if case.shape == "apiserver":
        target = world.tenants.get(case.ref.target)
        obj = copy.deepcopy(dict(target.obj)) if target else _tenant_body(world.unknown_name, ids=0)
        meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("namespace", "name", "uid", "generation")}
        obj["metadata"] = meta | ref_fields
        obj["kind"] = case.kind
        if case.deleting:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        exact = exact and case.kind == KIND
        data = obj
    elif case.shape == "ours":
        data = ref_fields | dict(case.extra)
    else:
        data = case.raw
        exact = False
    # A valid event of the type, as our own code writes one (events.make), carrying this data.
    made = events.make(case.event_type, "fuzz", TenantRef(world.tenant_namespace, "x", "x", 1))
    attributes = dict(made.get_attributes()) | dict(case.extensions)
    if case.event_type in event_types.APISERVER_TYPES:
        attributes["source"] = "https://127.0.0.1:6443"
    event = CloudEvent(attributes=attributes, data=None)
    if case.mode == "binary":
        headers, _ = events.to_binary(event)
        wire = Wire({k.lower(): v for k, v in headers.items()}, _json(data))
    else:
        envelope = json.loads(JSONFormat().write(event)) | {"data": data}
        wire = Wire({"content-type": "application/cloudevents+json"}, _json(envelope))
    return _mutate(wire, case), exact


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _header_value(value: Any) -> str:
    """A value as a WSGI server hands a header over: its UTF-8 bytes read as latin-1."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.encode("utf-8", "surrogatepass").decode("latin-1")


def _mutate(wire: Wire, case: Case) -> Wire:
    headers, body = dict(wire.headers), wire.body
    structured = case.mode == "structured"
    for mutation in case.mutations:
        op = mutation[0]
        if op in ("drop", "attr", "ext"):
            attr = mutation[1]
            if structured:
                with contextlib.suppress(ValueError, RecursionError):
                    envelope = json.loads(body)
                    if isinstance(envelope, dict):
                        if op == "drop":
                            envelope.pop(attr, None)
                        else:
                            envelope[attr] = mutation[2]
                        body = _json(envelope)
            elif op == "drop":
                headers.pop("content-type" if attr == "datacontenttype" else f"ce-{attr}", None)
            elif attr == "datacontenttype":
                headers["content-type"] = _header_value(mutation[2])
            else:
                headers[f"ce-{attr}"] = _header_value(mutation[2])
        elif op == "header":
            headers[mutation[1]] = _header_value(mutation[2])
        elif op == "content-type":
            if mutation[1] is None:
                headers.pop("content-type", None)
            else:
                headers["content-type"] = _header_value(mutation[1])
        elif op == "body":
            body = _body(body, mutation[1], mutation[2], structured)
        elif op == "bytes":
            body = mutation[1]
    return Wire(headers, body)


def _nested(kind: str, depth: int) -> bytes:
    if kind == "nested-list":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"{}" + b"}" * depth


def _body(body: bytes, kind: str, n: int, structured: bool) -> bytes:
    if kind in ("nested-list", "nested-object"):
        nested = _nested(kind, n)
        if structured and body.startswith(b"{") and body.endswith(b"}"):
            return body[:-1] + b', "data": ' + nested + b"}"  # a valid envelope around deep data
        return nested
    if kind == "invalid-utf8":
        cut = n % (len(body) + 1)
        return body[:cut] + b"\xc3\x28\xff\xfe" + body[cut:]
    if kind == "truncate":
        return body[: n % (len(body) + 1)]
    if kind == "size":
        return _padded(body, n)
    raise AssertionError(f"unknown body mutation {kind}")


def _padded(body: bytes, size: int) -> bytes:
    """``body`` grown to exactly ``size`` bytes, still the same JSON where it was an object."""
    if body.startswith(b"{") and body.endswith(b"}"):
        head, tail = b'{"pad": "', b'"' + (b", " + body[1:] if body != b"{}" else b"}")
        room = size - len(head) - len(tail)
        if room >= 0:
            return head + b"x" * room + tail
    return (body + b" " * size)[:size] if len(body) <= size else body[:size]


# Strategies ----------------------------------------------------------------------------------

# What can sit in a header: no CR, LF or NUL (an HTTP server refuses those before any app).
HEADER_TEXT = st.text(st.characters(min_codepoint=0x01, max_codepoint=0xFF, exclude_characters="\r\n"), max_size=40)
TEXT = st.text(max_size=40)
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT)
JSON = st.recursive(
    JSON_LEAF,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
PATHY = (
    ".",
    "..",
    "../",
    "/",
    "a/b",
    "../kubeopera-system",
    "%2F",
    "%2e%2e",
    "..%2F..",
    "\x00",
    "x\x00y",
    "tenants",
    "a b",
    "?x=1",
    "#",
    "*",
    "é",
    "ｔｅｎａｎｔ",
    "\u202egnp.exe",
    "\ud800",
    "x" * 300,
)
DNS_NAMES = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")
# A well-typed reference (strings, a whole generation) gets past the parser to the API server:
# most references are such, wrong only in what they name. The rest may be anything.
WELL_TYPED_NAMESPACES = st.one_of(
    st.just("@target"),
    st.just("@target"),
    st.just("@target"),
    st.sampled_from(("@decoy", "@tenants", DEFAULT_TENANT_NAMESPACE, "default", "kube-system")),
    st.sampled_from(PATHY),
    DNS_NAMES,
)
WELL_TYPED_NAMES = st.one_of(
    st.just("@target"),
    st.just("@target"),
    st.just("@target"),
    st.just("@other"),
    st.sampled_from(PATHY),
    DNS_NAMES,
    TEXT.filter(bool),
)
WELL_TYPED_UIDS = st.one_of(st.sampled_from(("@other", "@target")), st.uuids().map(str), TEXT.filter(bool))
WELL_TYPED_GENERATIONS = st.one_of(
    st.sampled_from(("@old", "@future", "@current", MISSING, 0)),
    st.integers(min_value=0),
    st.just(2**63),
)
TARGETS = st.sampled_from((*ROLES, "unknown"))
WELL_TYPED_REFS = st.builds(
    RefSpec,
    target=TARGETS,
    namespace=WELL_TYPED_NAMESPACES,
    name=WELL_TYPED_NAMES,
    uid=WELL_TYPED_UIDS,
    generation=WELL_TYPED_GENERATIONS,
)
ANY_REFS = st.builds(
    RefSpec,
    target=TARGETS,
    namespace=st.one_of(WELL_TYPED_NAMESPACES, TEXT, JSON, st.just(MISSING)),
    name=st.one_of(WELL_TYPED_NAMES, TEXT, JSON, st.just(MISSING)),
    uid=st.one_of(WELL_TYPED_UIDS, TEXT, JSON, st.just(MISSING)),
    generation=st.one_of(
        WELL_TYPED_GENERATIONS, st.sampled_from((-1, True, False, 1.0, "1", None, 10**30)), st.integers(), JSON
    ),
)
REFS = st.one_of(WELL_TYPED_REFS, WELL_TYPED_REFS, WELL_TYPED_REFS, ANY_REFS)

ATTRIBUTES = ("specversion", "id", "type", "source", "subject", "time", "datacontenttype", "dataschema")
SPECVERSIONS = ("0.3", "1", "1.0.0", "2.0", "", " 1.0", "1.0 ", "v1.0", "1.0\t")
TIMES = ("yesterday", "2026-13-45T99:99:99Z", "", "0", "1e99", "2026-01-01", "T", "2026-01-01T00:00:00+25:00")
CONTENT_TYPES = (
    "application/json",
    "text/json",
    "application/problem+json",
    "application/json; charset=latin-1",
    "application/json; charset=utf-16",
    "text/plain",
    "application/xml",
    "application/octet-stream",
    "multipart/form-data; boundary=x",
    "application/cloudevents+json",
    "application/cloudevents+json; charset=utf-8",
    "application/cloudevents-batch+json",
    "application/cloudevents+xml",
    "",
    "garbage",
)
EXTENSION_NAMES = st.one_of(
    st.from_regex(r"\A[a-z0-9]{1,20}\Z"),
    st.sampled_from(("knativeerrorcode", "knativeerrordata", "knativeerrordest", "traceparent", "tracestate")),
    st.sampled_from(("Upper", "with-dash", "under_score", "", "x" * 100, "données", "data", "data_base64")),
)
HEADER_NAMES = st.one_of(
    st.sampled_from(
        ("traceparent", "tracestate", "ce-", "ce-x", "CE-Type", "Ce-Id", "authorization", "x-forwarded-for")
    ),
    st.from_regex(r"\A(ce-)?[A-Za-z0-9!#$&'*+.^_`|~-]{1,20}\Z").filter(
        lambda n: n.lower() not in ("content-length", "transfer-encoding", "host", "content-type")
    ),
)
MAX = MAX_BODY_BYTES
DEPTHS = st.sampled_from((50, 999, 1000, 1001, 5000, 100_000))
SIZES = st.sampled_from((MAX - 1, MAX, MAX + 1, MAX + 4096, 2 * MAX))

MUTATION = st.one_of(
    st.tuples(st.just("drop"), st.sampled_from(ATTRIBUTES)),
    st.tuples(st.just("attr"), st.just("specversion"), st.sampled_from(SPECVERSIONS) | HEADER_TEXT | JSON),
    st.tuples(st.just("attr"), st.just("time"), st.sampled_from(TIMES) | HEADER_TEXT | JSON),
    st.tuples(st.just("attr"), st.just("type"), st.sampled_from(ALL_TYPES) | HEADER_TEXT | JSON),
    st.tuples(st.just("attr"), st.sampled_from(ATTRIBUTES), HEADER_TEXT | JSON),
    st.tuples(st.just("ext"), EXTENSION_NAMES, HEADER_TEXT | JSON),
    st.tuples(st.just("header"), HEADER_NAMES, HEADER_TEXT),
    st.tuples(st.just("content-type"), st.sampled_from(CONTENT_TYPES) | HEADER_TEXT | st.none()),
    st.tuples(st.just("body"), st.sampled_from(("nested-list", "nested-object")), DEPTHS),
    st.tuples(st.just("body"), st.sampled_from(("invalid-utf8", "truncate")), st.integers(0, 10_000)),
    st.tuples(st.just("body"), st.just("size"), SIZES),
    st.tuples(st.just("bytes"), st.binary(max_size=64)),
)


def _error_extensions() -> st.SearchStrategy[dict[str, str]]:
    """What Knative adds to a dead-lettered event, honest or not."""
    data = st.one_of(
        st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
        st.sampled_from(('{"error": "boom"}', "")).map(lambda s: base64.b64encode(s.encode()).decode()),
        st.from_regex(r"\A[A-Za-z0-9+/=]{0,20}\Z"),
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "knativeerrorcode": st.sampled_from(("500", "503", "422", "0", "-1", "x")),
            "knativeerrordata": data,
            "knativeerrordest": st.sampled_from(
                (
                    "http://tenant-install.kubeopera-system.svc.cluster.local",
                    "http://tenant-cleanup/",
                    "http://tenant-router.kubeopera-system.svc.cluster.local",
                    "x",
                    "",
                )
            ),
        },
    )


@st.composite
def cases(draw: st.DrawFn, function: str) -> Case:
    """A delivery for ``function``: mostly a type it takes and an intact envelope, so that most
    cases get past the parser to the reference, which never names a live Tenant exactly."""
    accepted = ACCEPTS[function]
    # Weights as a drawn integer: one_of and sampled_from are not uniform enough to weigh by repeating.
    event_type = draw(st.sampled_from(accepted if draw(st.integers(0, 3)) else ALL_TYPES))
    natural = "apiserver" if event_type in event_types.APISERVER_TYPES else "ours"
    shape = natural if draw(st.integers(0, 4)) else draw(st.sampled_from(("apiserver", "ours", "raw")))
    mutations = () if draw(st.integers(0, 2)) else tuple(draw(st.lists(MUTATION, min_size=1, max_size=3)))
    extensions = draw(_error_extensions()) if function == "dead-letter" else {}
    return Case(
        event_type=event_type,
        shape=shape,
        ref=draw(REFS),
        mode=draw(st.sampled_from(("binary", "binary", "structured"))),
        kind=draw(st.one_of(st.just(KIND), st.just(KIND), st.just(KIND), JSON)) if shape == "apiserver" else KIND,
        deleting=draw(st.booleans()) if shape == "apiserver" else False,
        raw=draw(JSON) if shape == "raw" else None,
        extra=draw(st.dictionaries(st.text(max_size=10), JSON, max_size=2)) if shape == "ours" else {},
        extensions=extensions,
        mutations=mutations,
    )


# --- the functions, built from parts around the real Kube adapter -------------------------------


class Tripwire(Exception):
    """A stand-in was asked to act: hostile input got past every guard."""


@dataclass
class Recorder:
    """What the functions did outside the Kubernetes reads: HTTP requests of their client, calls
    of the stand-ins."""

    requests: list[tuple[str, str]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)

    def clear(self) -> None:
        self.requests.clear()
        self.calls.clear()
        self.sent.clear()


class RecordingHelm:
    """helm: the chart is at hand (install's readiness); any other call is recorded and refused."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def chart(self) -> dict[str, str]:
        return {"name": "vcluster", "version": "0.21.2"}

    def release(self, name: str, namespace: str) -> ReleaseState | None:
        self._recorder.calls.append(f"helm release {namespace}/{name}")
        raise Tripwire("helm.release")

    def install_or_upgrade(self, name: str, namespace: str, *args: Any, **kwargs: Any) -> ReleaseState:
        self._recorder.calls.append(f"helm install_or_upgrade {namespace}/{name}")
        raise Tripwire("helm.install_or_upgrade")

    def uninstall(self, name: str, namespace: str, *args: Any, **kwargs: Any) -> bool:
        self._recorder.calls.append(f"helm uninstall {namespace}/{name}")
        raise Tripwire("helm.uninstall")


class RecordingApi:
    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def report(self, update: CloudSpaceUpdate) -> CallbackResult:
        self._recorder.calls.append(f"kubeopera-api report {update}")
        raise Tripwire("kubeopera-api report")


class WorkingVCluster:
    """The seeded Ready Tenant's vCluster API, as resync and check-ready ask it through a
    kubeconfig: no vCluster runs here, and the world says it is up, so it answers. Asking it
    changes nothing, so it is not a call the tests look for."""

    def missing(self, kubeconfig: bytes) -> str | None:
        return None


class RecordingSink:
    """resync's broker: records what it is sent (resync's re-drives are sends, not writes)."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def send(self, event: Any) -> None:
        self._recorder.sent.append(str(event.get_type()))


@dataclass
class FunctionUnderTest:
    name: str
    app: Flask
    kube: Kube
    recorder: Recorder
    user_agent: str


def _record_requests(api_client: k8s.ApiClient, recorder: Recorder) -> None:
    """Note every HTTP request the client sends (method, URL), then send it as it was."""
    rest = api_client.rest_client
    send = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        recorder.requests.append((method, url))
        return send(method, url, *args, **kwargs)

    rest.request = request


# --- the audit log --------------------------------------------------------------------------------


def audit_entries(control_plane: ControlPlane, user: str) -> list[dict[str, Any]]:
    """Every completed request of ``user`` in the audit log (and its rotated backup, if any)."""
    log = control_plane.audit_log
    found = []
    for path in sorted(log.parent.glob(f"{log.stem}*{log.suffix}")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("user", {}).get("username") == user and entry.get("stage") == "ResponseComplete":
                    found.append(entry)
    return found


def audited_after_sentinel(
    control_plane: ControlPlane, fut: FunctionUnderTest, world: World, user: str
) -> list[dict[str, Any]]:
    """The fuzz identity's entries, read once a request made after the run is in the log (the
    log is written as requests complete; the sentinel shows this read saw all of the run)."""
    sentinel = f"audit-sentinel-{secrets.token_hex(4)}"
    assert fut.kube.get_tenant(world.tenant_namespace, sentinel) is None
    deadline = time.monotonic() + 30
    while True:
        entries = audit_entries(control_plane, user)
        if any((e.get("objectRef") or {}).get("name") == sentinel for e in entries):
            return entries
        assert time.monotonic() < deadline, f"the sentinel request {sentinel} never reached the audit log"
        time.sleep(0.2)


def describe(entry: Mapping[str, Any]) -> str:
    ref = entry.get("objectRef") or {}
    what = "/".join(p for p in (ref.get("resource"), ref.get("subresource")) if p)
    code = (entry.get("responseStatus") or {}).get("code")
    return (
        f"{entry['verb']} {what} {ref.get('namespace', '')}/{ref.get('name', '')} -> {code} ({entry.get('userAgent')})"
    )


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    client = k8s_config.new_client_from_config(config_file=str(control_plane.admin_kubeconfig))
    yield client
    client.close()


@pytest.fixture(scope="module")
def world(control_plane: ControlPlane, admin: k8s.ApiClient) -> Iterator[World]:
    """The Tenant CRD, the functions' namespace with three Tenants, the decoy's namespace."""
    kubectl(control_plane, "apply", "--server-side", "--field-manager=kubeopera-integration", "-f", str(TENANT_CRD))
    wait_established(control_plane, "crd/tenants.kubeopera.io")
    token = secrets.token_hex(3)
    homes = (f"fuzz-tenants-{token}", f"fuzz-decoy-{token}", f"vcluster-fz{token}-ready")
    for namespace in homes:
        create_namespace(control_plane, namespace)
    custom: Any = k8s.CustomObjectsApi(admin)
    made: list[tuple[str, str]] = []
    try:
        yield _seed(admin, token, *homes, made)
    finally:
        for namespace, name in made:  # the finalizers go, so the namespaces can
            with contextlib.suppress(k8s.ApiException):
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": None}}
                )
        for namespace in homes:
            delete_namespace(control_plane, namespace)


def _seed(
    admin: k8s.ApiClient, token: str, home: str, decoy_home: str, vcluster_home: str, made: list[tuple[str, str]]
) -> World:
    custom: Any = k8s.CustomObjectsApi(admin)
    core: Any = k8s.CoreV1Api(admin)
    apps: Any = k8s.AppsV1Api(admin)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def seed(namespace: str, name: str, tenant_name: str, edits: int, status: dict[str, Any], final: bool) -> Seeded:
        body = _tenant_body(name, tenant_name)
        if final:
            body["metadata"]["finalizers"] = [FINALIZER]
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        made.append((namespace, name))
        for cpu in range(2, 2 + edits):  # each spec change is a new generation
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"spec": {"quota": {"cpu": str(cpu)}}}
            )
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        generation = obj["metadata"]["generation"]
        filled = json.loads(json.dumps(status).replace('"@generation"', str(generation)))
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": filled})
        return _seeded(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))

    def condition(type_: str, reason: str) -> dict[str, Any]:
        return {
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": reason,
            "observedGeneration": "@generation",
            "lastTransitionTime": stamp,
        }

    ready_name = f"fz{token}-ready"
    ready = seed(
        home,
        ready_name,
        ready_name,
        2,
        {
            "phase": "Ready",
            "observedGeneration": "@generation",
            "lastSyncedAt": stamp,
            "message": "vCluster ready",
            "vclusterName": f"vc-{ready_name}",
            "namespace": vcluster_home,
            "conditions": [
                condition("ReleaseInstalled", "Installed"),
                condition("KubeconfigStored", "Stored"),
                condition("CallbackDelivered", "Delivered"),
                condition("Ready", "VClusterReady"),
                condition("VClusterAvailable", "ControlPlaneReady"),
            ],
        },
        final=True,
    )
    provisioning = seed(
        home,
        f"fz{token}-provisioning",
        f"fz{token}-prov",
        1,
        {
            "phase": "Provisioning",
            "observedGeneration": "@generation",
            "lastSyncedAt": stamp,
            "conditions": [condition("ReleaseInstalled", "Installed")],
        },
        final=True,
    )
    deleting_name = f"fz{token}-deleting"
    seed(home, deleting_name, deleting_name, 0, {"phase": "Ready", "observedGeneration": "@generation"}, final=True)
    custom.delete_namespaced_custom_object(GROUP, VERSION, home, PLURAL, deleting_name)
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, home, PLURAL, deleting_name, {"status": {"phase": "Deleting", "lastSyncedAt": stamp}}
    )
    deleting = _seeded(custom.get_namespaced_custom_object(GROUP, VERSION, home, PLURAL, deleting_name))
    assert deleting.obj["metadata"].get("deletionTimestamp")
    decoy = seed(
        decoy_home,
        ready_name,
        f"fz{token}-decoy",
        0,
        {"phase": "Provisioning", "lastSyncedAt": stamp, "observedGeneration": "@generation"},
        final=False,
    )

    # The Ready Tenant needs no repair (resync): its vCluster's StatefulSet and its kubeconfig.
    labels = {"app": "vcluster"}
    apps.create_namespaced_stateful_set(
        vcluster_home,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": f"vc-{ready_name}"},
            "spec": {
                "selector": {"matchLabels": labels},
                "serviceName": "",
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "vcluster", "image": "vcluster"}]},
                },
            },
        },
    )
    # ... with its pod ready, as the StatefulSet controller would report it (none runs here), so
    # that resync finds the vCluster available, as the Tenant says (shared.model.health) ...
    ready_pod = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}
    apps.patch_namespaced_stateful_set_status(f"vc-{ready_name}", vcluster_home, {"status": ready_pod})
    # ... and the chart's namespace policies, which resync looks for (shared.model.isolation)
    networking: Any = k8s.NetworkingV1Api(admin)
    for made_policy in policy_objects(f"vc-{ready_name}"):
        meta = {"name": made_policy.name, "labels": labels}
        if made_policy.kind == "ResourceQuota":
            core.create_namespaced_resource_quota(vcluster_home, {"metadata": meta, "spec": {"hard": {"pods": "20"}}})
        elif made_policy.kind == "LimitRange":
            limit = {"type": "Container", "default": {"cpu": "1"}}
            core.create_namespaced_limit_range(vcluster_home, {"metadata": meta, "spec": {"limits": [limit]}})
        else:
            policy = {"podSelector": {}, "policyTypes": ["Egress"]}
            networking.create_namespaced_network_policy(vcluster_home, {"metadata": meta, "spec": policy})
    core.create_namespaced_secret(
        home,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"tenant-{ready.obj['spec']['cloudSpaceID']}-kubeconfig"},
            "data": {KUBECONFIG_KEY: base64.b64encode(KUBECONFIG).decode()},
        },
    )
    return World(
        tenant_namespace=home,
        decoy_namespace=decoy_home,
        tenants={"ready": ready, "provisioning": provisioning, "deleting": deleting, "decoy": decoy},
        unknown_name=f"fz{token}-unknown",
    )


def _seeded(obj: Mapping[str, Any]) -> Seeded:
    meta = obj["metadata"]
    return Seeded(meta["namespace"], meta["name"], meta["uid"], int(meta["generation"]), meta["resourceVersion"], obj)


@pytest.fixture(scope="module")
def fuzz_user(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The functions' identity: a client certificate of its own (see the module's docstring)."""
    user = f"kubeopera-fuzz-{secrets.token_hex(3)}"
    path = tmp_path_factory.mktemp("fuzz") / "functions.kubeconfig"
    return user, kubeconfig_for_user(
        control_plane, user, ("system:masters", "system:serviceaccounts", AUDIT_GROUP), path
    )


@pytest.fixture(scope="module")
def functions(world: World, fuzz_user: tuple[str, Path]) -> Iterator[dict[str, FunctionUnderTest]]:
    settings_ = Settings(tenant_namespace=world.tenant_namespace, provision_timeout_seconds=7 * 24 * 3600)
    built: dict[str, FunctionUnderTest] = {}
    for name, create_app in CREATE_APPS.items():
        recorder = Recorder()
        api_client = k8s_config.new_client_from_config(config_file=str(fuzz_user[1]))
        api_client.user_agent = f"kubeopera-fuzz/{name}"
        _record_requests(api_client, recorder)
        kube = Kube(api_client, component=f"tenant-{name}")
        runtime = Runtime(
            settings=settings_,
            kube=kube,
            helm=cast(Any, RecordingHelm(recorder)),
            kubeopera_api=cast(Any, RecordingApi(recorder)),
            sink=cast(Any, RecordingSink(recorder)),
            vcluster_api=WorkingVCluster(),
        )
        built[name] = FunctionUnderTest(name, create_app(runtime), kube, recorder, api_client.user_agent)
    yield built
    for fut in built.values():
        fut.kube.close()


# --- the tests ------------------------------------------------------------------------------------


def deliver(fut: FunctionUnderTest, wire: Wire) -> tuple[int, dict[str, str], bytes]:
    fut.recorder.clear()
    response = fut.app.test_client().post("/", headers=wire.headers, data=wire.body)
    return response.status_code, dict(response.headers), response.get_data()


def check_answer(fut: FunctionUnderTest, wire: Wire, status: int, headers: Mapping[str, str], body: bytes) -> None:
    """The per-delivery property (the module's docstring)."""
    if fut.name == "router" and status == 200:
        # The router's reply is a hint for install or cleanup, about the very Tenant the event named:
        # they re-read it (their own fuzz runs show what a hint about no live Tenant does).
        reply = events.parse(dict(headers), body)
        assert reply.get_type() in lifecycle.ROUTER.replies, reply.get_type()
        assert events.tenant_ref(reply) == events.tenant_ref(events.parse(wire.headers, wire.body))
    else:
        assert status == 204 or 400 <= status < 500, f"{fut.name} answered {status}: {body[:500]!r}"
    if status not in (200, 204):
        payload = json.loads(body)
        assert isinstance(payload, dict) and isinstance(payload.get("error"), str), body[:500]
    if len(wire.body) > MAX_BODY_BYTES:
        assert status == 413, f"a body of {len(wire.body)} bytes was answered {status}"
    else:
        assert status != 413, f"a body of {len(wire.body)} bytes (within the limit) was answered 413"
    sent = [(method, url) for method, url in fut.recorder.requests if method != "GET"]
    assert sent == [], f"{fut.name} sent {sent}"
    assert fut.recorder.calls == [], f"{fut.name} called {fut.recorder.calls}"
    if fut.name != "resync":
        assert fut.recorder.sent == [], f"{fut.name} sent events {fut.recorder.sent}"


@pytest.mark.parametrize("function", sorted(CREATE_APPS))
def test_hostile_deliveries_answer_a_no_op_or_4xx_and_write_nothing(
    function: str,
    world: World,
    functions: dict[str, FunctionUnderTest],
    fuzz_user: tuple[str, Path],
    control_plane: ControlPlane,
    admin: k8s.ApiClient,
) -> None:
    fut = functions[function]
    statuses: Counter[int] = Counter()
    reached_api = 0

    @FUNCTION_SETTINGS
    @given(case=cases(function))
    def fuzz(case: Case) -> None:
        nonlocal reached_api
        wire, exact = render(world, case)
        assume(not exact)  # a valid event about a live Tenant may legitimately act
        note(repr(wire))
        status, headers, body = deliver(fut, wire)
        statuses[status] += 1
        reached_api += bool(fut.recorder.requests)
        check_answer(fut, wire, status, headers, body)

    started = time.monotonic()
    failure: BaseException | None = None
    try:
        fuzz()
    except BaseException as err:  # the audit log is read all the same: did the failing run write?
        failure = err
    elapsed = time.monotonic() - started
    total = sum(statuses.values())
    print(
        f"\n{function}: {total} deliveries (shrinking included) in {elapsed:.1f}s ({total / elapsed:.1f}/s), "
        f"{reached_api} reached the API server; answers {dict(sorted(statuses.items()))}"
    )

    entries = audited_after_sentinel(control_plane, fut, world, fuzz_user[0])
    mine = [e for e in entries if e.get("userAgent", "").startswith(fut.user_agent)]
    writes = [describe(e) for e in mine if e["verb"] in WRITE_VERBS]
    if failure is not None:
        if writes:
            failure.add_note(f"and {function} wrote during the fuzz run: {writes}")
        raise failure
    assert mine, f"no request of {fut.user_agent} in the audit log: the filter finds nothing"
    assert writes == [], f"{function} wrote during the fuzz run: {writes}"
    custom: Any = k8s.CustomObjectsApi(admin)
    for role, seeded in world.tenants.items():
        now = custom.get_namespaced_custom_object(GROUP, VERSION, seeded.namespace, PLURAL, seeded.name)
        assert now["metadata"]["resourceVersion"] == seeded.resource_version, f"the {role} Tenant changed"


def test_each_function_takes_these_types(world: World, functions: dict[str, FunctionUnderTest]) -> None:
    """ACCEPTS is what the functions take: a type in it about a Tenant nobody has is a no-op
    (204), every other type is refused (400). Keeps the fuzz's notion of "accepted" honest."""
    for function, fut in functions.items():
        for event_type in ALL_TYPES:
            ref = RefSpec("unknown", "@tenants", "@target", "@target", 1)
            shape = "apiserver" if event_type in event_types.APISERVER_TYPES else "ours"
            wire, exact = render(world, Case(event_type, shape, ref, "binary", deleting=True))
            assert not exact
            status, _, body = deliver(fut, wire)
            # the router may answer an accepted change with its hint (200): a deleted Tenant's cleanup
            expected = ({200, 204} if function == "router" else {204}) if event_type in ACCEPTS[function] else {400}
            assert status in expected, f"{function} answered {event_type} with {status}: {body!r}"


def test_resync_writes_nothing_on_a_tick_over_this_world(world: World, functions: dict[str, FunctionUnderTest]) -> None:
    """The fuzz's premise for resync: an honest tick over the seeded world is a pass that writes
    nothing (so any write seen in its fuzz run comes from what the tick carried)."""
    fut = functions["resync"]
    case = Case(event_types.PING, "raw", RefSpec("unknown", "@tenants", "@target", "@target", 1), "binary")
    wire, _ = render(world, case)
    status, _, body = deliver(fut, wire)
    assert status == 204, body
    assert [m for m, _ in fut.recorder.requests if m != "GET"] == []
    assert fut.recorder.requests, "resync read nothing: the tick did not run a pass"


def test_an_exact_reference_to_a_tenant_outside_the_functions_namespace_changes_nothing(
    world: World,
    functions: dict[str, FunctionUnderTest],
    admin: k8s.ApiClient,
    control_plane: ControlPlane,
    test_namespace: str,
) -> None:
    """The one reference the fuzz leaves out, asked directly: a Tenant that exists, at its uid and
    generation, but outside the functions' namespace (``Settings.tenant_namespace``). The
    ApiServerSource watches only that namespace, so such an event is forged, and every function
    ignores it (204) before it reads anything (``shared.delivery.http.Step.namespace``). The functions'
    identity here may do anything, so whatever a function did with it would be seen."""
    custom: Any = k8s.CustomObjectsApi(admin)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    prefix = world.tenants["ready"].name[: -len("-ready")]
    made: list[tuple[str, str]] = []  # (Tenant, its tenantName)
    acted = []
    try:
        for function, fut in sorted(functions.items()):
            for event_type in ACCEPTS[function]:
                # A fresh Provisioning Tenant for each delivery, so that no answer depends on another's.
                name, tenant_name = f"{prefix}-else{len(made)}", f"{prefix}-else{len(made)}"
                body = _tenant_body(name, tenant_name)
                custom.create_namespaced_custom_object(GROUP, VERSION, test_namespace, PLURAL, body)
                made.append((name, tenant_name))
                status_ = {"phase": "Provisioning", "observedGeneration": 1, "lastSyncedAt": stamp}
                custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, test_namespace, PLURAL, name, {"status": status_}
                )
                obj = custom.get_namespaced_custom_object(GROUP, VERSION, test_namespace, PLURAL, name)
                elsewhere = World(world.tenant_namespace, test_namespace, {"elsewhere": _seeded(obj)}, "")
                shape = "apiserver" if event_type in event_types.APISERVER_TYPES else "ours"
                ref = RefSpec("elsewhere", "@target", "@target", "@target", "@current")
                wire, exact = render(elsewhere, Case(event_type, shape, ref, "binary"))
                assert exact
                status, _, answer = deliver(fut, wire)
                did = [f"{method} {url.split('/', 3)[-1]}" for method, url in fut.recorder.requests if method != "GET"]
                if did or fut.recorder.calls or not (status == 204 or 400 <= status < 500):
                    acted.append(f"{function} {event_type}: {status} {answer[:100]!r}; {did + fut.recorder.calls}")
    finally:
        for name, tenant_name in made:
            with contextlib.suppress(k8s.ApiException):
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, test_namespace, PLURAL, name, {"metadata": {"finalizers": None}}
                )
            delete_namespace(control_plane, f"vcluster-{tenant_name}")
    assert acted == [], "acted on a Tenant outside its namespace:\n" + "\n".join(acted)


@PARSER_SETTINGS
@given(
    case=st.sampled_from(sorted(ACCEPTS)).flatmap(cases),
    headers=st.dictionaries(HEADER_NAMES, HEADER_TEXT, max_size=6),
    body=st.binary(max_size=200),
    which=st.sampled_from(("case", "case", "case", "random")),
)
def test_the_parser_refuses_with_bad_event_or_parses(
    case: Case, headers: dict[str, str], body: bytes, which: str
) -> None:
    """``events.parse`` and ``events.tenant_ref`` on their own: an event, a ``TenantRef`` of the
    right types, or ``BadEvent``, never another exception (which the HTTP layer answers 500)."""
    if which == "case":
        wire, _ = render(PAPER, case)
        headers, body = wire.headers, wire.body
    try:
        event = events.parse(headers, body)
    except BadEvent:
        return
    try:
        ref = events.tenant_ref(event)
    except BadEvent:
        return
    assert all(isinstance(v, str) and v for v in (ref.namespace, ref.name, ref.uid))
    assert type(ref.generation) is int and ref.generation >= 0
