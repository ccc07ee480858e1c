"""Nothing secret leaks: a whole life of a Tenant on the real stack, then a search of everything
the stack said about it for the credentials that went through it.

The life (one Tenant, ``INTERNAL_SERVICE_TOKEN`` configured): created and Ready; a quota change,
Ready again at generation 2; vcluster's certificates rotated (the ``vc-<release>`` Secret gets a
kubeconfig with a freshly made CA, client certificate and key, and resync has store-kubeconfig
copy it); a failure (the stored kubeconfig Secret replaced by a hand-made copy: store-kubeconfig
refuses it, which leaves a Ready Tenant Ready, and the next quota change stops there: Failed,
``OwnershipConflict``); the runbook's retry once the copy is removed, Ready at generation 3;
deleted, cleanup done, Tenant gone. The vCluster stand-in boots in 2 s, polls are 1 s.

The needles: the client certificate, client key and CA of both kubeconfigs vcluster wrote (the
stand-in's placeholders and the rotated real ones), each as the base64 in the kubeconfig and as
its decoded PEM body; the whole kubeconfig base64 as stored in the Secrets (and the hand-made
copy's); the ``INTERNAL_SERVICE_TOKEN``; every bearer token Knative's broker and the sources
carried on the wire (sender identity); and any ``Bearer <token>`` or JWT-shaped string at all.

The haystacks: every file under the stack's ``logs/`` (every process the supervisor ran: control
plane including kube-apiserver's audit log, registry, Knative's controllers and data plane, the
sources' adapters, the functions, the vCluster stand-in), read after the stack stopped; this
process's own log records and the ``make run`` live view (the runner's lines, rendered over the
same stack); every Tenant status seen (polled); every Kubernetes Event in every namespace
(polled, so a deleted namespace's Events count too); every hop the service proxy forwarded (the
``ce-*`` headers the test bed records, plus request and answer bodies and all headers, tapped
here) except each hop's ``Authorization`` header; and every request the kubeopera-api stand-in
recorded except its ``Authorization`` header (where the token belongs, checked to be exactly
``Bearer <token>``). kube-apiserver's own log is searched too, and so is its audit log, though
the test bed's policy (``testbed/controlplane/startup.py``) records every request at level
Metadata: no Secret's body is in it to find.

A hit is reported as source, file or record, line and column, with what precedes it and only
the first characters of the needle.
"""

from __future__ import annotations

import base64
import datetime
import io
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from shared.adapters.kube import Kube
from testbed.live import LiveView
from testbed.local import runner
from testbed.local.stack import TENANT_NAMESPACE, Stack, StackOptions, start_stack
from testbed.standins.service_proxy import Exchange, ServiceProxy

from .support import phase_of, tenant_yaml, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

NAME = "nora"
CS = "5ec7e700-1ea0-4000-8000-000000000001"
NAMESPACE = f"vcluster-{NAME}"
RELEASE = f"vc-{NAME}"
VC_SECRET = f"vc-{RELEASE}"
STORED_SECRET = f"tenant-{CS}-kubeconfig"
TOKEN = "nsl-" + secrets.token_urlsafe(32)  # INTERNAL_SERVICE_TOKEN of this run

BEARER = re.compile(r"Bearer [A-Za-z0-9._-]{20,}")
JWT = re.compile(r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.")
WINDOW = 48  # the length of the substring searched for a long secret
CREDENTIALS = ("client-certificate-data", "client-key-data", "certificate-authority-data")


# -- what is searched, and for what -----------------------------------------------------------


@dataclass(frozen=True)
class Haystack:
    source: str  # e.g. "process logs"
    where: str  # a file or a record
    text: str


@dataclass(frozen=True)
class Hit:
    source: str
    where: str
    line: int
    column: int
    what: str
    before: str  # up to 40 characters before the match, on its line
    shown: str  # the first characters of the match only

    def __str__(self) -> str:
        where = f"{self.source}: {self.where}:{self.line}:{self.column}"
        return f"{where}: {self.what}: ...{self.before!r} + {self.shown!r}..."


def window(value: str) -> str:
    """A distinctive substring of a secret: its middle ``WINDOW`` characters (the ends of a PEM or
    its base64 are the armour every certificate shares), or all of it if it is shorter."""
    if len(value) <= WINDOW:
        return value
    middle = len(value) // 2
    return value[middle - WINDOW // 2 : middle + WINDOW // 2]


def pem_body_line(pem: str) -> str:
    """The middle line of a PEM's body (64 characters at most: no newline, however it is escaped;
    its first line starts with the ASN.1 header every key of a kind shares)."""
    lines = [line.strip() for line in pem.strip().splitlines() if line.strip() and not line.startswith("-----")]
    assert lines, f"not a PEM: {pem[:30]!r}"
    return lines[len(lines) // 2]


def add_needle(needles: dict[str, str], name: str, value: str) -> None:
    """``needles``: value searched for -> what it is (one value can be several things: the
    stand-in's CA and client certificate are the same placeholder)."""
    assert len(value) >= 12, f"{name}: a needle of {len(value)} characters would find too much"
    needles[value] = f"{needles[value]} = {name}" if value in needles else name


def kubeconfig_needles(needles: dict[str, str], label: str, kubeconfig: bytes) -> None:
    doc = yaml.safe_load(kubeconfig)
    found = {
        "certificate-authority-data": [c["cluster"].get("certificate-authority-data") for c in doc["clusters"]],
        "client-certificate-data": [u["user"].get("client-certificate-data") for u in doc["users"]],
        "client-key-data": [u["user"].get("client-key-data") for u in doc["users"]],
    }
    for key in CREDENTIALS:
        values = [v for v in found[key] if v]
        assert values, f"{label} kubeconfig has no {key}"
        for value in values:
            add_needle(needles, f"{label} {key} (base64 in the kubeconfig)", window(value))
            pem = base64.b64decode(value).decode()
            add_needle(needles, f"{label} {key} (decoded PEM body)", window(pem_body_line(pem)))


def find(haystack: Haystack, needles: dict[str, str]) -> list[Hit]:
    hits: list[tuple[int, int, str]] = []
    text = haystack.text
    for value, what in needles.items():
        start = text.find(value)
        while start != -1:
            hits.append((start, len(value), what))
            start = text.find(value, start + 1)
    for pattern, what in ((BEARER, "a bearer token"), (JWT, "a JWT-shaped string")):
        hits.extend((m.start(), m.end() - m.start(), what) for m in pattern.finditer(text))
    found = []
    for start, length, what in sorted(hits):
        line_start = text.rfind("\n", 0, start) + 1
        found.append(
            Hit(
                haystack.source,
                haystack.where,
                text.count("\n", 0, start) + 1,
                start - line_start + 1,
                what,
                context_before(text[line_start:start]),
                text[start : start + min(6, length // 4)],
            )
        )
    return found


SECRETISH = re.compile(r"(?:[A-Za-z0-9+/=_.-]|\\n|\n)+$")  # base64, PEM or token text, escaped newlines too


def context_before(before: str) -> str:
    """What precedes a match on its line, without the run of secret-looking characters right
    before it (most likely more of the same secret): up to 40 characters, and how many were cut."""
    run = SECRETISH.search(before)
    cut = len(run.group()) if run else 0
    shown = before[: len(before) - cut][-40:]
    return f"{shown}<{cut} secret-looking chars cut>" if cut else shown


def leaks(haystacks: list[Haystack], needles: dict[str, str]) -> list[Hit]:
    return [hit for haystack in haystacks for hit in find(haystack, needles)]


def summary(hits: list[Hit], limit: int = 30) -> str:
    lines = [str(hit) for hit in hits[:limit]]
    if len(hits) > limit:
        lines.append(f"... and {len(hits) - limit} more")
    return f"{len(hits)} secret(s) found:\n" + "\n".join(lines)


# -- watching the life ------------------------------------------------------------------------


class Wiretap:
    """Every exchange the service proxy makes with a Service, bodies included (the test bed's
    :class:`~testbed.standins.service_proxy.Hop` keeps only ``ce-*`` headers and ``Retry-After``):
    the proxy's tap, on this one instance; nothing is changed."""

    def __init__(self, proxy: ServiceProxy) -> None:
        self.hops: list[Exchange] = []
        self._lock = threading.Lock()
        proxy.tap(self._seen)

    def _seen(self, exchange: Exchange) -> None:
        with self._lock:
            self.hops.append(exchange)

    def recorded(self) -> list[Exchange]:
        with self._lock:
            return list(self.hops)


class LogRecords(logging.Handler):
    """This process's own log records while the stack runs (the stand-ins and watchers that live
    in it: service proxy, kubelet stand-in, supervisor, kubeopera-api stand-in)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a record that cannot be formatted is noted, not lost silently
            self.lines.append(f"(unformattable record from {record.name})")


class Observer:
    """Polls, while the life runs: every Tenant's status (each distinct one kept), every
    Kubernetes Event in every namespace (each distinct version kept: a deleted namespace takes
    its Events with it), and the ``make run`` live view over the same stack."""

    def __init__(self, stack: Stack) -> None:
        self._stack = stack
        self._kube = Kube.connect(stack.admin_kubeconfig)
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=str(stack.admin_kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        self._api_client = k8s.ApiClient(configuration)
        self._core = k8s.CoreV1Api(self._api_client)
        self.statuses: dict[tuple[str, str], float] = {}  # (tenant, status JSON) -> first seen
        self.messages: set[str] = set()  # status.message and each condition's message
        self.events: dict[tuple[str, str], str] = {}  # (uid, resourceVersion) -> the Event's JSON
        self.phases: list[str] = []  # NAME's phases in the order seen, repeats folded
        self.live_view = io.StringIO()
        self._view = runner._Watch(LiveView(self.live_view))
        self.errors: list[str] = []
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="no-leaks-observer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.poll(events=True)  # the last word
        self._kube.close()
        self._api_client.close()  # type: ignore[no-untyped-call]

    def _run(self) -> None:
        rounds = 0
        while not self._stop.wait(0.25):
            rounds += 1
            self.poll(events=rounds % 8 == 0)

    def poll(self, events: bool) -> None:
        steps: list[tuple[str, Callable[[], None]]] = [
            ("tenants", self._tenants),
            ("live view", lambda: runner._poll(self._stack, self._kube, self._view, self.live_view, None)),
        ]
        if events:
            steps.append(("events", self._events))
        for what, step in steps:
            try:
                step()
            except Exception as err:  # the API server busy for a moment: the next round will see it
                self.errors.append(f"{what}: {type(err).__name__}: {str(err)[:200]}")

    def _tenants(self) -> None:
        for obj in self._kube.list_tenant_objects(TENANT_NAMESPACE):
            name = obj["metadata"]["name"]
            status = obj.get("status") or {}
            self.statuses.setdefault((name, json.dumps(status, sort_keys=True)), time.monotonic() - self.started)
            self.messages.update(m for m in [status.get("message")] if m)
            self.messages.update(c["message"] for c in status.get("conditions") or [] if c.get("message"))
            phase = status.get("phase") or "(none)"
            if name == NAME and (not self.phases or self.phases[-1] != phase):
                self.phases.append(phase)

    def _events(self) -> None:
        response: Any = self._core.list_event_for_all_namespaces(_preload_content=False)
        for event in json.loads(response.data)["items"]:
            key = (event["metadata"]["uid"], event["metadata"]["resourceVersion"])
            self.events.setdefault(key, json.dumps(event, sort_keys=True))


# -- the life ---------------------------------------------------------------------------------


def get_secret(pipeline: Stack, namespace: str, name: str) -> dict[str, Any] | None:
    out = pipeline.kubectl("get", "secret", name, "-n", namespace, "--ignore-not-found", "-o", "json")
    return json.loads(out) if out.strip() else None


def stored_kubeconfig(pipeline: Stack) -> str | None:
    """The base64 of key ``kubeconfig`` of the stored Secret, as the API holds it."""
    secret = get_secret(pipeline, TENANT_NAMESPACE, STORED_SECRET)
    return None if secret is None else (secret.get("data") or {}).get("kubeconfig")


def quota(pipeline: Stack, cpu: str, memory: str) -> None:
    patch = {"spec": {"quota": {"cpu": cpu, "memory": memory}}}
    pipeline.kubectl("patch", "kt", NAME, "-n", TENANT_NAMESPACE, "--type=merge", "-p", json.dumps(patch))


def ready(kube: Kube, generation: int, timeout: float = 180) -> None:
    def probe() -> bool:
        tenant = phase_of(kube, NAME, "Ready")
        return tenant is not None and tenant.status.observed_generation == generation

    wait_for(f"{NAME} Ready at generation {generation}", probe, timeout=timeout)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def rotated_credentials() -> tuple[bytes, bytes, bytes]:
    """A new CA, and a client certificate and key it signed, as vcluster makes when it rotates
    its certificates: (CA PEM, certificate PEM, key PEM), unique to this run."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("vcluster-ca"))
        .issuer_name(_name("vcluster-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "system:admin"),
                ]
            )
        )
        .issuer_name(_name("vcluster-ca"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.PEM), key_pem


def rotate(pipeline: Stack, written: bytes) -> bytes:
    """Give ``vc-<release>`` a kubeconfig of the same shape and server as ``written`` with freshly
    made credentials (and its PEM keys to match), as vcluster does when its certificates rotate;
    returns the new kubeconfig."""
    ca, cert, key = rotated_credentials()
    doc = yaml.safe_load(written)
    for cluster in doc["clusters"]:
        cluster["cluster"]["certificate-authority-data"] = base64.b64encode(ca).decode()
    for user in doc["users"]:
        user["user"]["client-certificate-data"] = base64.b64encode(cert).decode()
        user["user"]["client-key-data"] = base64.b64encode(key).decode()
    config = yaml.safe_dump(doc, sort_keys=False).encode()
    secret = get_secret(pipeline, NAMESPACE, VC_SECRET)
    assert secret is not None
    secret["data"].update(
        {
            "config": base64.b64encode(config).decode(),
            "certificate-authority": base64.b64encode(ca).decode(),
            "client-certificate": base64.b64encode(cert).decode(),
            "client-key": base64.b64encode(key).decode(),
        }
    )
    pipeline.kubectl("replace", "-f", "-", input=json.dumps(secret))  # on stdin: never in an argv
    return config


@dataclass
class Evidence:
    needles: dict[str, str] = field(default_factory=dict)
    haystacks: dict[str, list[Haystack]] = field(default_factory=dict)
    phases: list[str] = field(default_factory=list)
    failed_message: str = ""
    api_authorization: list[str | None] = field(default_factory=list)
    hop_tokens: int = 0
    steps: list[tuple[str, float]] = field(default_factory=list)
    observer_errors: list[str] = field(default_factory=list)
    log_dir: Path = Path()

    def add(self, source: str, where: str, text: str) -> None:
        self.haystacks.setdefault(source, []).append(Haystack(source, where, text))


def live(pipeline: Stack, evidence: Evidence, observer: Observer) -> None:
    kube = Kube.connect(pipeline.admin_kubeconfig)
    started = time.monotonic()

    def step(what: str) -> None:
        evidence.steps.append((what, time.monotonic() - started))

    try:
        pipeline.kubectl("apply", "-f", "-", input=tenant_yaml(NAME, CS, cpu="1", memory="2Gi"))
        ready(kube, 1)
        step("created, Ready")
        vc = get_secret(pipeline, NAMESPACE, VC_SECRET)
        assert vc is not None, f"{NAMESPACE}/{VC_SECRET} is missing at Ready"
        written = base64.b64decode(vc["data"]["config"])
        kubeconfig_needles(evidence.needles, "stand-in's", written)
        add_needle(
            evidence.needles, "the stand-in's kubeconfig (base64, in vc-<release>)", window(vc["data"]["config"])
        )
        stored = stored_kubeconfig(pipeline)
        assert stored is not None
        add_needle(evidence.needles, "the stand-in's kubeconfig (base64, as stored)", window(stored))

        quota(pipeline, cpu="2", memory="3Gi")
        ready(kube, 2)
        step("quota changed, Ready at generation 2")

        config = rotate(pipeline, written)
        rotated = base64.b64encode(config).decode()
        kubeconfig_needles(evidence.needles, "rotated", config)
        add_needle(evidence.needles, "the rotated kubeconfig (base64, as stored)", window(rotated))
        pipeline.tick()  # resync: the stored kubeconfig is not what vcluster wrote any more
        wait_for("the rotated kubeconfig stored", lambda: stored_kubeconfig(pipeline) == rotated, timeout=60)
        assert pipeline.watch.wait_idle(60)
        step("certificates rotated, stored again")

        # The failure: someone replaced the stored Secret with a copy of their own. resync sees
        # it is not what vcluster wrote and store-kubeconfig refuses it (a Ready Tenant is left
        # Ready); the next quota change runs the chain again, and it stops there: Failed.
        pipeline.kubectl("delete", "secret", STORED_SECRET, "-n", TENANT_NAMESPACE)
        copy = base64.b64encode(config + b"# copied by hand\n").decode()
        add_needle(evidence.needles, "the hand-made copy of the kubeconfig (base64)", window(copy))
        hand_made = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": STORED_SECRET, "namespace": TENANT_NAMESPACE},
            "type": "Opaque",
            "data": {"kubeconfig": copy},
        }
        pipeline.kubectl("create", "-f", "-", input=json.dumps(hand_made))  # on stdin: never in an argv
        pipeline.tick()
        assert pipeline.watch.wait_idle(60)
        assert phase_of(kube, NAME, "Ready") is not None, "a refusal while Ready leaves the Tenant Ready"
        quota(pipeline, cpu="2", memory="4Gi")
        failed = wait_for(f"{NAME} Failed", lambda: phase_of(kube, NAME, "Failed"), timeout=120)
        evidence.failed_message = failed.status.message
        assert "was not made by kubeopera-tenants" in failed.status.message, failed.status.message
        assert stored_kubeconfig(pipeline) == copy, "the hand-made Secret was not touched"
        # The observer samples; Failed lasts until the retry below, so let it see it first.
        wait_for("the observer to see Failed", lambda: "Failed" in observer.phases, timeout=30, interval=0.1)
        step("Failed at generation 3: the stored Secret was made by hand")

        # The runbook: remove what is in the way, patch the Failed Tenant to Pending.
        pipeline.kubectl("delete", "secret", STORED_SECRET, "-n", TENANT_NAMESPACE)
        pipeline.kubectl(
            "patch",
            "kt",
            NAME,
            "-n",
            TENANT_NAMESPACE,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"phase": "Pending"}}),
        )
        ready(kube, 3)
        vc = get_secret(pipeline, NAMESPACE, VC_SECRET)
        assert vc is not None
        current = vc["data"]["config"]
        wait_for("vcluster's kubeconfig stored again", lambda: stored_kubeconfig(pipeline) == current)
        step("retried, Ready at generation 3")

        pipeline.kubectl("delete", "kt", NAME, "-n", TENANT_NAMESPACE, "--wait=false")
        wait_for(f"{NAME} gone", lambda: kube.get_tenant(TENANT_NAMESPACE, NAME) is None, timeout=180)
        assert not pipeline.kubectl("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name").strip()
        assert get_secret(pipeline, TENANT_NAMESPACE, STORED_SECRET) is None
        step("deleted, cleanup done, Tenant gone")
        assert pipeline.watch.wait_idle(60), "the broker still had deliveries in flight"
        step("broker idle")
    finally:
        kube.close()


def hop_text(hop: Exchange) -> tuple[str, str | None]:
    """A tapped hop as text, without its Authorization header (returned apart)."""
    authorization = None
    lines = [f"{hop.method} {hop.host}{hop.path} -> {hop.status}"]
    for key, value in hop.request_headers:
        if key.lower() == "authorization":
            authorization = value
        else:
            lines.append(f"> {key}: {value}")
    lines.append("> " + hop.request_body.decode("utf-8", errors="replace"))
    lines.extend(f"< {key}: {value}" for key, value in hop.response_headers)
    lines.append("< " + hop.response_body.decode("utf-8", errors="replace"))
    return "\n".join(lines), authorization


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> Evidence:
    run_dir = tmp_path_factory.mktemp("no-secret-leaks")
    options = StackOptions(
        api_token=TOKEN,
        vcluster_boot_seconds=2,
        ready_poll_seconds=1,
        cleanup_poll_seconds=1,
        run_dir=run_dir,
    )
    found = Evidence(log_dir=run_dir / "logs")
    records = LogRecords()
    root = logging.getLogger()
    level = root.level
    root.addHandler(records)
    root.setLevel(min(level, logging.INFO) if level else logging.INFO)
    try:
        with start_stack(options) as pipeline:
            tap = Wiretap(pipeline.proxy)
            observer = Observer(pipeline)
            observer.start()
            try:
                live(pipeline, found, observer)
            finally:
                observer.stop()
            found.phases = observer.phases
            found.observer_errors = observer.errors
            for (tenant, status), seen in sorted(observer.statuses.items(), key=lambda item: item[1]):
                found.add("Tenant status", f"Tenant {tenant} status seen at +{seen:.1f}s", status)
            found.add("Tenant status", "every status and condition message", "\n".join(sorted(observer.messages)))
            for (uid, version), event in observer.events.items():
                found.add("Kubernetes Events", f"Event {uid} v{version}", event)
            found.add("runner output", "the live view of `make run`", observer.live_view.getvalue())
            for n, hop in enumerate(pipeline.proxy.hops()):
                record = {
                    "host": hop.host,
                    "path": hop.path,
                    "status": hop.status,
                    "request": dict(hop.request),
                    "response": dict(hop.response),
                }
                found.add("broker hops (test bed's record)", f"hop #{n}", json.dumps(record))
            tokens: set[str] = set()
            for n, tapped in enumerate(tap.recorded()):
                text, authorization = hop_text(tapped)
                found.add("broker hops (bodies, tapped)", f"hop #{n} {tapped.method} {tapped.host}", text)
                if authorization:
                    tokens.add(authorization.split(" ", 1)[-1])
            found.hop_tokens = len(tokens)
            for token in sorted(tokens):
                add_needle(
                    found.needles, "a sender-identity token the broker carried", window(token.rsplit(".", 1)[-1])
                )
            add_needle(found.needles, "INTERNAL_SERVICE_TOKEN", TOKEN)
            assert pipeline.api is not None
            for n, request in enumerate(pipeline.api.requests()):
                found.api_authorization.append(request.header("Authorization"))
                headers = [f"{k}: {v}" for k, v in request.headers if k.lower() != "authorization"]
                text = "\n".join([f"{request.method} {request.path}?{request.query}", *headers, request.body])
                found.add("kubeopera-api stand-in requests", f"request #{n}", text)
        # The stack has stopped: every process's log is complete.
        for path in sorted(p for p in found.log_dir.rglob("*") if p.is_file()):
            text = path.read_bytes().decode("utf-8", errors="replace")
            found.add("process logs", str(path.relative_to(run_dir)), text)
    finally:
        root.removeHandler(records)
        root.setLevel(level)
    found.add("this process's log records", "pytest process (in-process stand-ins)", "\n".join(records.lines))

    print(f"\nNO-LEAKS life: {NAME} phases {found.phases}")
    for what, at in found.steps:
        print(f"NO-LEAKS step +{at:6.1f}s {what}")
    for source, stacks in found.haystacks.items():
        size = sum(len(h.text.encode()) for h in stacks)
        lines = sum(h.text.count("\n") + 1 for h in stacks if h.text)
        print(f"NO-LEAKS source {source}: {len(stacks)} records/files, {lines} lines, {size} bytes")
    print(
        f"NO-LEAKS {len(found.needles)} needles: "
        + "; ".join(f"{w} ({len(v)} chars)" for v, w in found.needles.items())
    )
    print(f"NO-LEAKS {found.hop_tokens} distinct bearer tokens carried on the broker's hops (Authorization, excluded)")
    if found.observer_errors:
        print(f"NO-LEAKS observer misses: {len(found.observer_errors)}, first: {found.observer_errors[0]}")
    return found


SOURCES = [
    "process logs",
    "this process's log records",
    "runner output",
    "Tenant status",
    "Kubernetes Events",
    "broker hops (test bed's record)",
    "broker hops (bodies, tapped)",
    "kubeopera-api stand-in requests",
]


def test_the_life_went_through_every_phase(evidence: Evidence) -> None:
    phases = evidence.phases
    assert {"Provisioning", "Ready", "Failed", "Deleting"} <= set(phases), phases
    assert phases.index("Failed") > phases.index("Ready") and "Ready" in phases[phases.index("Failed") :], phases
    assert "made by hand" in evidence.failed_message or "not made by" in evidence.failed_message
    assert [what for what, _ in evidence.steps][-1] == "broker idle"


def test_the_token_was_configured_and_sent_only_where_it_belongs(evidence: Evidence) -> None:
    assert evidence.api_authorization, "kubeopera-api was never called"
    assert set(evidence.api_authorization) == {f"Bearer {TOKEN}"}


def test_the_needles_are_there_to_find(evidence: Evidence) -> None:
    kinds = " ".join(evidence.needles.values())
    for credential in CREDENTIALS:
        assert kinds.count(f"rotated {credential}") == 2, credential  # base64 and PEM body
        assert f"stand-in's {credential}" in kinds, credential
    assert "INTERNAL_SERVICE_TOKEN" in kinds and "as stored" in kinds
    for source in SOURCES:
        assert evidence.haystacks.get(source), f"nothing to search in {source}"


@pytest.mark.parametrize("source", SOURCES)
def test_nothing_secret_in(evidence: Evidence, source: str) -> None:
    hits = leaks(evidence.haystacks[source], evidence.needles)
    assert not hits, summary(hits)
