"""The demo page (/demo) and the API docs (/docs) in a real browser: Debian's chromium driven by
Playwright (no browser download), with Chromium's fake microphone playing espeak-ng speech.

Each page test runs twice: on the session graph (keyless, loopback) and on a keyed front door
to the same slots (a second Ingress deployment, API keys on), where the key is typed into the
page. Every request a page makes to another host is refused and recorded, so passing also
proves the pages work offline. A screenshot of each panel is saved (the path is printed).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
import soundfile as sf
import yaml

from tests.assertions import wait_for
from tests.speech import silence, speak, word_error_rate, words

SENTENCE = "The quick brown fox jumps over the lazy dog."
KEY = "demo-key-456"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TIMEOUT_MS = 180_000  # two busy cores shared with the rest of the suite


@pytest.fixture(scope="module")
def spoken_wav(tmp_path_factory):
    """SENTENCE with pauses around it: the file to transcribe and the fake microphone's input."""
    import numpy as np

    path = tmp_path_factory.mktemp("demo-audio") / "fox.wav"
    audio = np.concatenate([silence(0.5), speak(SENTENCE), silence(1.5)])
    sf.write(path, audio, 16000, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory):
    """The session's tmp dir, or DEMO_SCREENSHOTS_DIR (kept after the run, e.g. by CI)."""
    chosen = os.environ.get("DEMO_SCREENSHOTS_DIR")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("demo-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nDemo page screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def keyed_url(server):
    """An Ingress with API keys in front of the session graph's own slot deployments."""
    from ray import serve

    from deployments.ingress.deployment import Ingress
    from deployments.slots import SLOTS
    from graphs.config import GraphArgs
    from tests.e2e.conftest import ROOT

    args = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"][0]["args"]
    args["security"] = {**args["security"], "api_keys": [KEY]}
    config = GraphArgs.from_args(args, environ={})
    slots = {
        name: serve.get_deployment_handle(SLOTS[name].deployment_name, app_name="ominix") for name in config.slots()
    }
    ingress = Ingress.options(name="DemoKeyedIngress")
    app = ingress.bind(config.catalog(), config.ingress_settings("127.0.0.1").model_dump(), slots=slots)
    serve.run(app, name="demo-keyed", route_prefix="/demo-keyed", blocking=False)
    url = f"{server}/demo-keyed"
    wait_for(lambda: _healthy(url), timeout_s=120)
    yield url
    serve.delete("demo-keyed")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def browser(spoken_wav):
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "Debian's chromium is required (apt-get install chromium; .ci/run installs it)"
    flags = [
        "--use-fake-ui-for-media-stream",  # grant the microphone without asking
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={spoken_wav}",
        "--autoplay-policy=no-user-gesture-required",
        "--no-sandbox",  # CI runs as root
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=flags)
        yield browser
        browser.close()


@pytest.fixture
def demo(request, server):
    """(base URL, API key or None) of the graph the page is opened on."""
    if request.param == "keyless":
        return server, None
    return request.getfixturevalue("keyed_url"), KEY


# The page sends the key on each of its three kinds of call: a fetch through its one helper
# (`api()`: chat), the streaming-session routes (microphone) and the docs page. Those run in both
# modes; the file, speech and agent panels use the same helper as chat, so they run keyless only
# (each is 10-35 s of a 2-core machine's time per mode).
BOTH_MODES = pytest.mark.parametrize("demo", ["keyless", "keyed"], indirect=True)
KEYLESS = pytest.mark.parametrize("demo", ["keyless"], indirect=True)


class DemoPage:
    """The page, with every request to another host refused and recorded."""

    def __init__(self, browser, base: str, key: str | None, screenshots, mode: str):
        self.base, self.key, self.screenshots, self.mode = base, key, screenshots, mode
        self.context = browser.new_context(viewport={"width": 1180, "height": 900})
        self.context.set_default_timeout(TIMEOUT_MS)
        self.elsewhere: list[str] = []
        self.urls: list[str] = []
        self.context.route("**/*", self._only_the_graph)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _only_the_graph(self, route):
        url = route.request.url
        self.urls.append(url)
        if url.startswith(("http://127.0.0.1:", "data:", "blob:")):
            route.continue_()
        else:
            self.elsewhere.append(url)
            route.abort()

    def open(self, path: str = "/demo"):
        self.page.goto(f"{self.base}{path}")
        if path == "/demo":
            status = self.page.locator("#status")
            if self.key:
                status.filter(has_text="needs an API key").wait_for()
                self.page.fill("#api-key", self.key)
                self.page.click("#key-form button")
            status.filter(has_text="connected").wait_for()
        return self.page

    def tab(self, name: str):
        self.page.click(f".tab[data-panel={name}]")

    def shoot(self, name: str):
        self.page.screenshot(path=str(self.screenshots / f"{self.mode}-{name}.png"), full_page=True)

    def samples(self, stats_id: str) -> int:
        return int(self.page.get_attribute(f"#{stats_id}", "data-samples") or 0)

    def close(self):
        assert not self.elsewhere, f"the page loaded from elsewhere: {self.elsewhere}"
        assert not self.errors, f"JavaScript errors: {self.errors}"
        if self.key:
            assert not any(self.key in url for url in self.urls), "the key must never be in a URL"
            stored = self.page.evaluate(
                "JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])"
            )
            assert self.key not in stored
        self.context.close()


@pytest.fixture
def page(browser, demo, screenshots, request):
    base, key = demo
    mode = request.node.callspec.params["demo"]
    demo_page = DemoPage(browser, base, key, screenshots, mode)
    yield demo_page
    demo_page.close()


@KEYLESS
def test_file_transcription_shows_the_transcript_and_its_segments(page, spoken_wav):
    p = page.open()
    page.tab("file")
    p.set_input_files("#file-input", str(spoken_wav))
    p.select_option("#file-format", "verbose_json")
    p.click("#file-go")
    p.locator("#file-segments tbody tr").first.wait_for()
    assert word_error_rate(SENTENCE, p.inner_text("#file-text")) <= 0.5  # Whisper tiny.en: "roundfark stump"
    times = p.locator("#file-segments tbody tr").first.locator("td").all_inner_texts()
    assert times[1].startswith("0:0") and times[2] > times[1]
    page.shoot("file")


@KEYLESS
def test_speech_plays_as_it_arrives(page):
    p = page.open()
    page.tab("speech")
    p.locator("#speech-voice option[value=bf_emma]").wait_for(state="attached")  # the default model's (Kokoro)
    p.select_option("#speech-voice", "bf_emma")
    text = "Hello from the demo page. This sentence is streamed."
    p.fill("#speech-text", text)
    p.click("#speech-go")
    p.locator("#speech-status", has_text="Done.").wait_for()
    # Every sample of the synthesis reached the player: the same request answers that many
    # samples to a plain client (Kokoro's durations are deterministic; its samples are not).
    headers = {"Authorization": f"Bearer {page.key}"} if page.key else {}
    body = {"input": text, "voice": "bf_emma", "response_format": "pcm"}
    pcm = httpx.post(f"{page.base}/v1/audio/speech", json=body, headers=headers, timeout=300)
    assert page.samples("speech-stats") == len(pcm.content) // 2 > 0
    assert p.is_visible("#speech-download")
    page.shoot("speech")


@KEYLESS
def test_the_agent_answer_is_shown_and_played(page):
    p = page.open()
    page.tab("agent")
    p.fill("#agent-input", "What is the capital of France?")
    p.fill("#agent-max", "16")
    p.click("#agent-go")
    p.locator("#agent-status", has_text="Done.").wait_for()
    answer = p.locator("#agent-log .msg.assistant").inner_text()
    assert answer.strip() and page.samples("agent-stats") > 0
    assert "first audio" in p.inner_text("#agent-stats")
    page.shoot("agent")


@KEYLESS
def test_the_agent_hears_a_spoken_question(page):
    """Say it: the fake microphone's sentence is recorded, transcribed by the ASR slot, shown as
    the user's turn and answered aloud."""
    p = page.open()
    page.tab("agent")
    p.fill("#agent-max", "12")
    p.click("#agent-say")
    p.locator("#agent-status", has_text="Listening").wait_for()
    p.wait_for_timeout(4500)  # the file loops: at least one whole sentence
    p.click("#agent-say")
    p.locator("#agent-status", has_text="Done.").wait_for(timeout=TIMEOUT_MS)
    asked = p.locator("#agent-log .msg.user").last.inner_text()
    assert set(words(asked)) & set(words(SENTENCE)), asked
    assert p.locator("#agent-log .msg.assistant").last.inner_text().strip() and page.samples("agent-stats") > 0
    page.shoot("agent-spoken")


@BOTH_MODES
def test_chat_answers(page):
    p = page.open()
    page.tab("chat")
    p.fill("#chat-input", "What is the capital of France? Answer in one word.")
    p.fill("#chat-temp", "0")
    p.click("#chat-go")
    p.locator("#chat-stats", has_text="tokens/s").wait_for()
    assert "paris" in p.locator("#chat-log .msg.assistant").inner_text().lower()
    page.shoot("chat")


@BOTH_MODES
def test_docs_render_swagger_ui_offline(page):
    p = page.open("/docs")
    p.locator(".swagger-ui .info .title").filter(has_text="ominix").wait_for()
    p.locator('.opblock-summary-path[data-path="/v1/agent/stream"]').first.wait_for()
    page.shoot("docs")


@BOTH_MODES
def test_microphone_transcription_shows_the_spoken_words(page, demo):
    base, key = demo
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    probe = httpx.post(f"{base}/v1/audio/stream/sessions", headers=headers, timeout=60)
    p = page.open()
    assert probe.status_code == 200, probe.text
    httpx.post(f"{base}/v1/audio/stream/sessions/{probe.json()['sid']}?finish=1", headers=headers, timeout=60)
    p.click("#mic-start")
    p.wait_for_function(
        "() => /quick|brown|fox|lazy|dog/i.test(document.getElementById('mic-transcript').innerText)",
        timeout=TIMEOUT_MS,
    )
    page.shoot("mic")
    # The pause after the sentence finalises it (a segment) before Stop: the whole sentence.
    p.wait_for_function("() => document.querySelectorAll('#mic-segments li').length > 0", timeout=TIMEOUT_MS)
    p.click("#mic-stop")
    p.locator("#mic-status", has_text="Done.").wait_for(timeout=TIMEOUT_MS)
    heard = p.inner_text("#mic-text")
    page.shoot("mic-done")
    # The fake microphone loops the file, so Stop may cut the next repetition short: the final
    # text must hold most of the sentence's words (Whisper tiny.en hears "the quick roundfark
    # stump over the lazy dog").
    spoken = set(words(SENTENCE))
    assert len(spoken & set(words(heard))) >= len(spoken) // 2, heard
