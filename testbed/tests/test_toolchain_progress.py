"""The toolchain's progress lines, estimates and timings file, on a fake clock and without Go."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from testbed import toolchain
from testbed.toolchain import gobuild
from testbed.toolchain import progress as bp


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


KUBE = (bp.Step("kubernetes", "kube-apiserver"), bp.Step("kubernetes", "kubectl"))
HELM = (bp.Step("helm", "helm"),)


def make_progress(recorded: dict[str, float] | None = None) -> tuple[bp.Progress, FakeClock, list[str]]:
    clock, lines = FakeClock(), list[str]()
    progress = bp.Progress({"kubernetes": KUBE, "helm": HELM}, recorded or {}, clock, lines.append)
    return progress, clock, lines


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.4, "0s"),
        (44.6, "45s"),
        (60, "1m00s"),
        (135, "2m15s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (3929, "1h05m"),
        (-3, "0s"),
    ],
)
def test_durations_read_like_a_clock(seconds: float, text: str) -> None:
    assert bp.format_duration(seconds) == text


def test_the_usual_time_is_the_recorded_one_then_the_default_then_a_guess() -> None:
    step = bp.Step("kubernetes", "kube-apiserver")
    assert bp.usual_seconds(step, {"kube-apiserver": 200.0}) == 200.0
    assert bp.usual_seconds(step, {}) == 333.0
    assert bp.usual_seconds(bp.Step("new", "new"), {}) == bp.UNKNOWN_SECONDS


def test_every_binary_the_toolchain_builds_has_a_default_and_a_name_of_its_own() -> None:
    steps = [step for build in toolchain.BUILDS.values() for step in toolchain.steps(build)]
    assert {step.binary for step in steps} == set(bp.DEFAULT_SECONDS)
    assert len(steps) == len(bp.DEFAULT_SECONDS)  # the binary alone names a step in timings.json


def test_timings_are_recorded_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "cache" / bp.TIMINGS_FILE
    assert bp.load_timings(path) == {}
    bp.record_timing(path, "helm", 101.26)
    bp.record_timing(path, "etcd", 39.0)
    bp.record_timing(path, "helm", 99.0)
    assert bp.load_timings(path) == {"etcd": 39.0, "helm": 99.0}
    assert [p.name for p in path.parent.iterdir()] == [bp.TIMINGS_FILE]  # no temporary file left


@pytest.mark.parametrize("content", ["not json", "[1, 2]", ""])
def test_an_unreadable_timings_file_counts_as_nothing_recorded(tmp_path: Path, content: str) -> None:
    path = tmp_path / bp.TIMINGS_FILE
    path.write_text(content)
    assert bp.load_timings(path) == {}
    bp.record_timing(path, "helm", 5.0)
    assert json.loads(path.read_text()) == {"helm": 5.0}


def test_entries_that_are_not_durations_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / bp.TIMINGS_FILE
    path.write_text(json.dumps({"helm": 90, "etcd": "fast", "kubectl": -1, "registry": True, "x": 1.5}))
    assert bp.load_timings(path) == {"helm": 90.0, "x": 1.5}


def test_time_left_counts_steps_not_started_and_the_rest_of_the_running_one() -> None:
    assert bp.remaining_seconds([100.0, 50.0]) == 150.0
    assert bp.remaining_seconds([50.0], current=100.0, elapsed=30.0) == 120.0
    assert bp.remaining_seconds([50.0], current=100.0, elapsed=130.0) == 50.0  # overrun: not negative


def test_a_cold_build_says_what_it_builds_how_far_along_it_is_and_what_is_left() -> None:
    progress, clock, lines = make_progress()
    progress.announce(Path("/cache"))
    assert lines[-1] == (
        "toolchain: 2 tool(s) to build from the Go module proxy (kubernetes, helm), usually ~8m25s; "
        "once only, later runs find them in /cache"
    )
    progress.tool_started("kubernetes", "v1.34.4")
    assert lines[-1] == (
        "toolchain: building kubernetes v1.34.4 (kube-apiserver, kubectl), usually ~6m33s; ~8m25s left in all"
    )
    progress.step_started(KUBE[0])
    clock.advance(135)
    progress.tick()
    assert lines[-1] == "toolchain: kube-apiserver 2m15s of ~5m33s, ~6m10s left in all"
    clock.advance(300)
    progress.tick()
    assert lines[-1] == "toolchain: kube-apiserver 7m15s of ~5m33s (longer than usual), ~2m52s left in all"
    assert progress.step_finished() == 435
    assert lines[-1] == "toolchain: built kube-apiserver in 7m15s (usually ~5m33s); ~2m52s left in all"
    progress.step_started(KUBE[1])
    clock.advance(60)
    assert progress.step_finished() == 60
    progress.tool_finished("kubernetes")
    assert lines[-1] == "toolchain: built kubernetes in 8m15s (usually ~6m33s); ~1m52s left in all"
    progress.tool_started("helm", "v3.16.4")
    progress.step_started(HELM[0])
    clock.advance(100)
    progress.step_finished()
    assert lines[-1].startswith("toolchain: building helm")  # a tool of one step: one line when done
    progress.tool_finished("helm")
    assert lines[-1] == "toolchain: built helm in 1m40s (usually ~1m52s); nothing left to build"


def test_recorded_timings_replace_the_defaults_in_the_estimates() -> None:
    progress, _, _ = make_progress({"kube-apiserver": 100.0, "kubectl": 10.0, "helm": 20.0})
    assert progress.total_seconds() == 130.0


def test_no_tick_line_between_steps() -> None:
    progress, clock, lines = make_progress()
    progress.tick()
    clock.advance(10)
    progress.tick()
    assert lines == []


def test_a_failed_step_says_nothing_and_stops_ticking() -> None:
    progress, clock, lines = make_progress()
    progress.step_started(KUBE[0])
    clock.advance(20)
    assert progress.step_finished(failed=True) == 20
    progress.tick()
    assert lines == []


def test_a_tool_another_process_built_no_longer_counts() -> None:
    progress, _, _ = make_progress()
    progress.tool_skipped("kubernetes")
    assert progress.left() == 112.0


def test_nothing_to_build_announces_nothing() -> None:
    lines: list[str] = []
    bp.Progress({}, {}, FakeClock(), lines.append).announce(Path("/cache"))
    assert lines == []


def test_the_ticker_calls_back_until_its_block_ends() -> None:
    ticked = threading.Event()
    count = [0]

    def tick() -> None:
        count[0] += 1
        if count[0] >= 3:
            ticked.set()

    with bp.Ticker(0.001, tick):
        assert ticked.wait(5)
    after = count[0]
    ticked.clear()
    assert not ticked.wait(0.05)
    assert count[0] == after


def test_our_own_go_sources_are_found_in_the_clones_tools_folder() -> None:
    source = toolchain.BUILDS["knative-check"].source_dir
    assert source is not None
    assert (source / "main.go").is_file()
    assert source.parent == Path(__file__).resolve().parents[2] / "tools"


def test_a_tool_is_built_one_binary_at_a_time() -> None:
    assert [s.binary for s in toolchain.steps(toolchain.BUILDS["kubernetes"])] == ["kube-apiserver", "kubectl"]


FAKE = toolchain.GoBuild(
    name="fake",
    version="v1",
    requires=(("example.com/fake", "v1"),),
    packages=(("one", "example.com/fake/cmd/one"), ("two", "example.com/fake/cmd/two")),
    copies=(toolchain.ModuleCopy("example.com/fake", "v1", "config", "config/fake"),),
)


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A cache in tmp_path, a read-only fake module, and `go build` that writes the binaries."""
    module = tmp_path / "modcache" / "fake@v1"
    (module / "config" / "core" / "300-resources").mkdir(parents=True)
    (module / "config" / "core" / "crd.yaml").write_text("kind: CustomResourceDefinition\n")
    for path in (module / "config" / "core" / "crd.yaml", module / "config" / "core", module / "config"):
        path.chmod(0o555 if path.is_dir() else 0o444)
    built: list[str] = []

    def go_build(build: toolchain.GoBuild, step: bp.Step, src: Path, bin_dir: Path, env: object) -> None:
        time.sleep(0.1)  # timings are recorded to a tenth of a second
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / step.binary).write_text("#!/bin/sh\n")
        built.append(step.binary)

    monkeypatch.setenv("KUBEOPERA_TOOLS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(toolchain.BUILDS, "fake", FAKE)
    monkeypatch.setattr(gobuild, "_write_module", lambda build, src, env: src.mkdir())
    monkeypatch.setattr(gobuild, "_go_build", go_build)
    monkeypatch.setattr(gobuild, "_module_dir", lambda module_path, version, cwd, env: module)
    return built


def test_a_cold_ensure_builds_copies_records_and_reports(
    fake_go: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bin_dir = toolchain.ensure("fake")
    tool = tmp_path / "cache" / "tools" / "fake-v1"
    assert bin_dir == tool / "bin"
    assert fake_go == ["one", "two"]
    assert sorted(p.name for p in bin_dir.iterdir()) == ["one", "two"]
    copied = tool / "config" / "fake" / "core" / "crd.yaml"
    assert copied.read_text() == "kind: CustomResourceDefinition\n"
    assert oct(copied.stat().st_mode & 0o777) == "0o644"
    assert oct(copied.parent.stat().st_mode & 0o777) == "0o755"
    assert set(bp.load_timings(tmp_path / "cache" / bp.TIMINGS_FILE)) == {"one", "two"}
    err = capsys.readouterr().err
    assert "toolchain: building fake v1 (one, two), usually ~2m00s" in err
    assert "toolchain: built fake in 0s (usually ~2m00s); nothing left to build" in err


def test_a_warm_ensure_builds_nothing_and_says_nothing(fake_go: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    first = toolchain.ensure("fake")
    capsys.readouterr()
    assert toolchain.ensure("fake") == first
    assert fake_go == ["one", "two"]
    assert capsys.readouterr().err == ""


def test_a_tool_folder_without_its_copies_is_built_again(fake_go: list[str], tmp_path: Path) -> None:
    import shutil

    shutil.rmtree(toolchain.ensure("fake").parent / "config")
    toolchain.ensure("fake")
    assert fake_go == ["one", "two", "one", "two"]


def test_a_failed_build_leaves_no_tool_folder_and_records_nothing(
    fake_go: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: object) -> None:
        raise toolchain.ToolchainError("compile error")

    monkeypatch.setattr(gobuild, "_go_build", failing)
    with pytest.raises(toolchain.ToolchainError):
        toolchain.ensure("fake")
    assert list((tmp_path / "cache" / "tools").iterdir()) == []
    assert bp.load_timings(tmp_path / "cache" / bp.TIMINGS_FILE) == {}


def test_a_cold_ensure_all_announces_its_plan_and_fills_in_knative(
    fake_go: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assets = tmp_path / "envtest"
    assets.mkdir()
    for binary in ("etcd", "kube-apiserver", "kubectl"):
        (assets / binary).write_text("")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    tools = toolchain.ensure_all()
    knative = tmp_path / "cache" / "tools" / f"knative-eventing-{toolchain.KNATIVE_EVENTING_VERSION}"
    assert tools.kubectl == assets / "kubectl"
    assert tools.knative == knative / "bin"
    assert (tools.knative / "mtping").is_file()
    assert tools.knative_config == knative / "config"
    assert (tools.knative_config / "eventing" / "core" / "crd.yaml").is_file()
    assert (tools.knative_config / "serving-crds").is_dir()
    assert fake_go[-10:-3] == list(toolchain.BUILDS["knative-eventing"].binaries)
    tools_dir = tmp_path / "cache" / "tools"
    assert tools.service_proxy.parent.parent.name.startswith("service-proxy-1-")  # named by its source's digest
    assert tools.service_proxy.name == "service-proxy" and tools.service_proxy.is_file()
    assert tools.promtool == tools_dir / f"promtool-{toolchain.PROMETHEUS_VERSION}" / "bin" / "promtool"
    assert tools.jaeger == tools_dir / f"jaeger-{toolchain.JAEGER_VERSION}" / "bin" / "jaeger"
    assert fake_go[-3:] == ["service-proxy", "promtool", "jaeger"]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(
        "toolchain: 8 tool(s) to build from the Go module proxy (kube-controller-manager, helm, registry, "
        "apiserver-adapter, knative-eventing, service-proxy, promtool, jaeger), usually ~"
    )
    assert err[-1].endswith("; nothing left to build")


@pytest.fixture
def go_commands(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The commands gobuild would run, recorded instead of run."""
    commands: list[list[str]] = []

    def run(args: list[str], cwd: Path, env: object) -> str:
        commands.append(args)
        return ""

    monkeypatch.setattr(gobuild, "_go", lambda: "go")
    monkeypatch.setattr(gobuild, "_run", run)
    return commands


def test_build_tags_and_version_stamps_reach_the_go_build(go_commands: list[list[str]], tmp_path: Path) -> None:
    promtool = toolchain.BUILDS["promtool"]
    gobuild._go_build(promtool, bp.Step("promtool", "promtool"), tmp_path, tmp_path / "bin", {})
    (args,) = go_commands
    assert args[:2] == ["go", "build"]
    assert args[args.index("-tags") + 1] == "remove_all_sd"
    assert "-X github.com/prometheus/common/version.Version=3.16.0" in args[args.index("-ldflags") + 1]
    assert args[-3:] == ["-o", str(tmp_path / "bin" / "promtool"), "github.com/prometheus/prometheus/cmd/promtool"]


def test_a_tool_without_build_tags_passes_none(go_commands: list[list[str]], tmp_path: Path) -> None:
    jaeger = toolchain.BUILDS["jaeger"]
    gobuild._go_build(jaeger, bp.Step("jaeger", "jaeger"), tmp_path, tmp_path / "bin", {})
    (args,) = go_commands
    assert "-tags" not in args
    assert "internal/version.latestVersion=v2.13.0" in args[args.index("-ldflags") + 1]
    assert args[-1] == "github.com/jaegertracing/jaeger/cmd/jaeger"


def test_multiple_build_tags_are_one_comma_separated_argument(go_commands: list[list[str]], tmp_path: Path) -> None:
    tagged = toolchain.GoBuild("t", "v1", (), (("t", "example.com/t"),), tags=("a", "b"))
    gobuild._go_build(tagged, bp.Step("t", "t"), tmp_path, tmp_path / "bin", {})
    assert go_commands[0][go_commands[0].index("-tags") :][:2] == ["-tags", "a,b"]


def test_the_new_tools_require_their_modules_at_the_pinned_module_versions() -> None:
    assert toolchain.BUILDS["promtool"].requires == (
        ("github.com/prometheus/prometheus", toolchain.PROMETHEUS_MODULE_VERSION),
    )
    assert toolchain.BUILDS["jaeger"].requires == (
        ("github.com/jaegertracing/jaeger", toolchain.JAEGER_MODULE_VERSION),
    )
    assert toolchain.VERSIONS["promtool"] == toolchain.PROMETHEUS_VERSION == "v3.16.0"
    assert toolchain.VERSIONS["jaeger"] == toolchain.JAEGER_VERSION == "v2.13.0"
