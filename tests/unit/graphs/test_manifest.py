"""The app manifest: parsing, Cargo-style requirements, every unmet requirement listed, and the
start-up refusal of `python -m graphs.serve` before Ray starts."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deployments.control.capabilities import Category, categories, registry
from deployments.slots import SLOTS
from graphs.config import GraphArgs
from graphs.manifest import ManifestError, check_manifest, load_manifest, unmet_requirements
from graphs.omni import check_app_manifest

ROOT = Path(__file__).resolve().parents[3]
AVAILABLE = {
    "llm": Category("0.32.2", frozenset({"streaming", "tool_use", "thinking"})),
    "tts": Category("0.6.2", frozenset({"streaming", "voice_cloning"})),
}


def write(tmp_path, text, name="ominix.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def unmet(tmp_path, text, server="0.1.0"):
    return unmet_requirements(load_manifest(write(tmp_path, text)), server, AVAILABLE)


def test_satisfied_manifest(tmp_path):
    text = """
[app]
name = "bot"
ominix_api = ">=0.1.0, <1"
[requires]
llm = ">=0.30"
tts = { version = "^0.6", capabilities = { streaming = true, voice_cloning = true, wings = false } }
"""
    assert unmet(tmp_path, text) == []
    manifest = check_manifest(write(tmp_path, text), "0.1.0", AVAILABLE)
    assert manifest.name == "bot" and len(manifest.requires) == 2


def test_every_unmet_requirement_is_listed(tmp_path):
    text = """
[app]
name = "greedy"
ominix_api = ">=2.0"
[requires]
llm = { version = ">=0.40", capabilities = { vision = true, streaming = true } }
image = ">=0.1"
tts = { capabilities = { singing = true } }
"""
    problems = unmet(tmp_path, text)
    assert problems == [
        "App requires ominix_api >=2.0, but server is 0.1.0",
        "Capability 'llm' version 0.32.2 does not satisfy requirement >=0.40",
        "Capability 'llm' does not support 'vision' (available: ['streaming', 'thinking', 'tool_use'])",
        "Required capability 'image' is not available (enabled: ['llm', 'tts'])",
        "Capability 'tts' does not support 'singing' (available: ['streaming', 'voice_cloning'])",
    ]
    with pytest.raises(ManifestError) as e:
        check_manifest(write(tmp_path, text), "0.1.0", AVAILABLE)
    assert "App 'greedy' has 5 unsatisfied requirements" in str(e.value)
    assert all(p in str(e.value) for p in problems)


@pytest.mark.parametrize(
    "requirement, version, ok",
    [
        ("0.32", "0.32.9", True),  # a bare version is a caret requirement, as in Cargo
        ("0.32", "0.33.0", False),
        ("^1.2", "1.9.0", True),
        ("~1.2", "1.3.0", False),
        (">=0.1, <0.3", "0.2.9", True),
        (">=0.1,<0.3", "0.3.0", False),
        ("=0.6.2", "0.6.2", True),
        ("*", "9.9.9", True),
    ],
)
def test_cargo_style_requirements(tmp_path, requirement, version, ok):
    text = f'[app]\nname = "a"\n[requires]\nllm = "{requirement}"\n'
    available = {"llm": Category(version, frozenset())}
    assert (unmet_requirements(load_manifest(write(tmp_path, text)), "0.1.0", available) == []) is ok


@pytest.mark.parametrize(
    "text, message",
    [
        ("[app\nname = 'x'", "Failed to parse manifest"),  # not TOML
        ("[requires]\nllm = '>=1'", "[app] needs a non-empty name"),
        ("[app]\nname = ''", "[app] needs a non-empty name"),
        ("[app]\nname = 'x'\n[requires]\nllm = '>>1'", "invalid version requirement '>>1'"),
        ("[app]\nname = 'x'\n[requires]\nllm = 3", "requires.llm must be a version string or a table"),
        ("[app]\nname = 'x'\n[requires]\nllm = { capabilities = ['a'] }", "must be a table of true/false"),
        ("requires = 'all'\n[app]\nname = 'x'", "[requires] must be a table"),
    ],
)
def test_malformed_manifests(tmp_path, text, message):
    with pytest.raises(ManifestError) as e:
        load_manifest(write(tmp_path, text))
    assert message in str(e.value) and "Failed to parse manifest" in str(e.value)


def test_missing_manifest_file(tmp_path):
    with pytest.raises(ManifestError, match="Failed to read manifest"):
        load_manifest(tmp_path / "nope.toml")


def test_registry_covers_only_enabled_slots_with_installed_engines():
    entries = registry([SLOTS["llm"], SLOTS["tts"]])
    assert {e["category"] for e in entries.values()} == {"llm", "tts"}
    assert entries["mlx-lm"]["version"] and "streaming" in entries["mlx-lm"]["capabilities"]
    merged = categories(registry([SLOTS["llm"], SLOTS["asr"], SLOTS["tts"]]))
    assert set(merged) == {"llm", "asr", "tts"}
    assert "voice_cloning" in merged["tts"].capabilities


def test_the_graph_checks_the_manifest_named_by_env(tmp_path):
    bad = write(tmp_path, '[app]\nname = "needs-image"\n[requires]\nimage = ">=0.1"\n')
    config = GraphArgs.from_args(
        {"asr": {"enabled": False}, "image": {"enabled": False}}, environ={"OMINIX_APP_MANIFEST": bad}
    )
    assert config.manifest == bad
    with pytest.raises(ManifestError, match="Required capability 'image' is not available"):
        check_app_manifest(config)
    check_app_manifest(GraphArgs.from_args({"manifest": str(ROOT / "examples/voice-bot.ominix.toml")}, environ={}))


def test_the_shipped_example_needs_asr(tmp_path):
    config = GraphArgs.from_args(
        {"asr": {"enabled": False}, "manifest": str(ROOT / "examples/voice-bot.ominix.toml")}, environ={}
    )
    with pytest.raises(ManifestError, match="'asr' is not available"):
        check_app_manifest(config)


def test_make_serve_refuses_to_start_and_lists_every_problem(tmp_path):
    manifest = write(
        tmp_path,
        """
[app]
name = "greedy"
ominix_api = ">=99"
[requires]
image = ">=0.1"
llm = { capabilities = { vision = true } }
""",
    )
    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    config["applications"][0]["args"]["image"]["enabled"] = False  # the image slot is what is missing
    config_path = tmp_path / "serve_config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "OMINIX_SERVE_CONFIG": str(config_path), "OMINIX_APP_MANIFEST": manifest}
    proc = subprocess.run(
        [sys.executable, "-m", "graphs.serve"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    assert "App 'greedy' has 3 unsatisfied requirements" in proc.stderr
    for item in ("ominix_api >=99", "'image' is not available", "does not support 'vision'"):
        assert item in proc.stderr
    assert "Submitted deploy config" not in proc.stdout + proc.stderr  # Ray was never started
