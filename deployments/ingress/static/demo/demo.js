// ominix-serve demo page. Plain browser JavaScript, no build step, nothing loaded from
// elsewhere. Every request goes to the graph that served this page (relative to <base>), with
// the API key typed into the page: kept in this variable only, sent as a header.
"use strict";

const state = { key: "", voices: [], agentMessages: [], chatMessages: [] };
const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------ HTTP

function withKey(headers = {}) {
  return state.key ? { ...headers, Authorization: `Bearer ${state.key}` } : headers;
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: withKey(options.headers) });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      message = `${response.status}: ${body.error?.message ?? JSON.stringify(body)}`;
    } catch (_) { /* not JSON */ }
    throw new ApiError(response.status, message);
  }
  return response;
}

const postJson = (path, body, signal) =>
  api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal });

// Server-sent events of a fetch response: each `data:` payload, parsed, until [DONE].
async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      const event = JSON.parse(data);
      if (event.error) throw new ApiError(0, event.error.message);
      yield event;
    }
  }
}

function base64Bytes(b64) {
  const text = atob(b64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

function setStatus(id, message, kind = "info") {
  const el = $(id);
  el.textContent = message || "";
  el.className = `status ${kind}`;
}

const fmtTime = (s) => `${Math.floor(s / 60)}:${(s % 60).toFixed(1).padStart(4, "0")}`;

// ------------------------------------------------------------------ audio playback

let audioContext = null;
function sharedAudioContext() {
  audioContext = audioContext || new AudioContext();
  if (audioContext.state === "suspended") audioContext.resume();
  return audioContext;
}

// Plays s16le PCM chunks back to back as they arrive, draws the waveform, counts samples.
class PcmPlayer {
  constructor(canvas, stats) {
    this.canvas = canvas;
    this.stats = stats;
    this.reset(24000);
  }

  reset(sampleRate) {
    this.stop();
    this.rate = sampleRate;
    this.chunks = [];
    this.samples = 0;
    this.sources = [];
    this.next = 0;
    this.t0 = performance.now();
    this.firstAudioMs = null;
    this.stats.dataset.samples = "0";
    this.draw();
    this.report();
  }

  push(bytes) {
    const n = bytes.length >> 1;
    if (!n) return;
    const view = new DataView(bytes.buffer, bytes.byteOffset, n * 2);
    const floats = new Float32Array(n);
    for (let i = 0; i < n; i++) floats[i] = view.getInt16(2 * i, true) / 32768;
    const ctx = sharedAudioContext();
    const buffer = ctx.createBuffer(1, n, this.rate);
    buffer.copyToChannel(floats, 0);
    const source = ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(ctx.destination);
    const at = Math.max(this.next, ctx.currentTime + 0.05);
    source.start(at);
    this.next = at + n / this.rate;
    this.sources.push(source);
    if (this.firstAudioMs === null) this.firstAudioMs = performance.now() - this.t0;
    this.chunks.push(floats);
    this.samples += n;
    this.stats.dataset.samples = String(this.samples);
    this.draw();
    this.report();
    return (at - ctx.currentTime) * 1000; // ms until this chunk is heard
  }

  // ms until everything received so far has been played
  remainingMs() {
    return audioContext ? Math.max(0, (this.next - audioContext.currentTime) * 1000) : 0;
  }

  stop() {
    for (const source of this.sources || []) {
      try { source.stop(); } catch (_) { /* already ended */ }
    }
    this.sources = [];
  }

  report(extra = "") {
    if (!this.samples) {
      this.stats.textContent = extra;
      return;
    }
    const seconds = (this.samples / this.rate).toFixed(2);
    this.stats.textContent =
      `first audio ${Math.round(this.firstAudioMs)} ms · ${seconds} s received · ` +
      `${this.samples.toLocaleString("en")} samples @ ${(this.rate / 1000).toFixed(1)} kHz${extra}`;
  }

  draw() {
    const { canvas } = this;
    const g = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, mid = h / 2;
    g.clearRect(0, 0, w, h);
    g.fillStyle = "#c7cdf5";
    g.fillRect(0, mid, w, 1);
    if (!this.samples) return;
    // The whole answer fits the width once it is long; short audio keeps a readable scale.
    const total = Math.max(this.samples, this.rate * 4);
    const perPixel = total / w;
    g.fillStyle = "#4f46e5";
    let x = 0, lo = 0, hi = 0, seen = 0;
    for (const chunk of this.chunks) {
      for (let i = 0; i < chunk.length; i++) {
        const v = chunk[i];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        if (++seen >= perPixel) {
          g.fillRect(x, mid - hi * mid * 0.95, 1, Math.max(1, (hi - lo) * mid * 0.95));
          x++; lo = hi = 0; seen = 0;
        }
      }
    }
  }

  wav() {
    return wavBlob(this.chunks, this.rate);
  }
}

// A mono 16-bit WAV file of float chunks.
function wavBlob(chunks, rate) {
  const samples = chunks.reduce((n, c) => n + c.length, 0);
  const data = new DataView(new ArrayBuffer(44 + samples * 2));
  const text = (at, s) => [...s].forEach((c, i) => data.setUint8(at + i, c.charCodeAt(0)));
  text(0, "RIFF"); data.setUint32(4, 36 + samples * 2, true); text(8, "WAVE");
  text(12, "fmt "); data.setUint32(16, 16, true); data.setUint16(20, 1, true); data.setUint16(22, 1, true);
  data.setUint32(24, rate, true); data.setUint32(28, rate * 2, true);
  data.setUint16(32, 2, true); data.setUint16(34, 16, true);
  text(36, "data"); data.setUint32(40, samples * 2, true);
  let at = 44;
  for (const chunk of chunks) {
    for (const v of chunk) { data.setInt16(at, Math.max(-1, Math.min(1, v)) * 32767, true); at += 2; }
  }
  return new Blob([data], { type: "audio/wav" });
}

// ------------------------------------------------------------------ models, voices, status

async function refresh() {
  const status = $("status");
  try {
    await fetch("health").then((r) => { if (!r.ok) throw new Error(); });
  } catch (_) {
    status.textContent = "server unreachable";
    status.className = "pill pill-bad";
    return;
  }
  try {
    const models = (await (await api("v1/models")).json()).data;
    fillModelSelects(models);
    status.textContent = `connected · ${models.length} models`;
    status.className = "pill pill-ok";
  } catch (e) {
    status.textContent = e.status === 401 ? "needs an API key" : "models unavailable";
    status.className = "pill pill-warn";
    if (e.status === 401) $("api-key").focus();
    return;
  }
  try {
    fillVoices(await (await api("v1/voices")).json());
  } catch (e) {
    setStatus("speech-status", `Voices: ${e.message}`, "error");
  }
}

function fillModelSelects(models) {
  for (const select of document.querySelectorAll("select[data-models]")) {
    const current = select.value;
    const ids = models.filter((m) => m.type === select.dataset.models).map((m) => m.id);
    select.replaceChildren(new Option("default", ""), ...ids.map((id) => new Option(id, id)));
    if (ids.includes(current)) select.value = current;
  }
}

function fillVoices(answer) {
  state.voices = answer.voices || [];
  for (const select of document.querySelectorAll("select.voices")) {
    const current = select.value;
    const options = state.voices.map((v) => new Option(v.aliases?.length ? `${v.name} (${v.aliases.join(", ")})` : v.name, v.name));
    select.replaceChildren(new Option(answer.default_voice ? `default (${answer.default_voice})` : "default", ""), ...options);
    if (state.voices.some((v) => v.name === current)) select.value = current;
  }
}

function selectTab(name) {
  if (!$(`panel-${name}`)) return;
  history.replaceState(null, "", `#${name}`); // a link or a reload opens the same panel
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.panel === name);
  for (const panel of document.querySelectorAll(".panel")) panel.classList.toggle("active", panel.id === `panel-${name}`);
}

// ------------------------------------------------------------------ live transcription

const CHUNK_MS = 500;
const mic = { session: null, stream: null, context: null, pending: [], timer: null, sending: Promise.resolve(), started: 0 };

function floatToPcm16(floats) {
  const out = new Int16Array(floats.length);
  for (let i = 0; i < floats.length; i++) out[i] = Math.max(-1, Math.min(1, floats[i])) * 32767;
  return out;
}

function takePending() {
  const total = mic.pending.reduce((n, a) => n + a.length, 0);
  const all = new Int16Array(total);
  let at = 0;
  for (const part of mic.pending) { all.set(part, at); at += part.length; }
  mic.pending = [];
  return new Uint8Array(all.buffer);
}

function showLive(result) {
  $("mic-empty").hidden = Boolean(result.text || result.partial);
  $("mic-text").textContent = result.text || "";
  $("mic-partial").textContent = result.partial || "";
  const segments = result.segments || [];
  $("mic-segments").replaceChildren(...segments.map((s) => {
    const li = document.createElement("li");
    li.textContent = `${fmtTime(s.start)}–${fmtTime(s.end)}  ${s.text}`;
    return li;
  }));
}

function sendChunk(body, finish = false) {
  // A sid may name its replica ("@<replica>/<token>"): its slashes stay path separators.
  const sid = mic.session.split("/").map(encodeURIComponent).join("/");
  const path = `v1/audio/stream/sessions/${sid}${finish ? "?finish=1" : ""}`;
  mic.sending = mic.sending.then(async () => {
    const r = await api(path, { method: "POST", headers: { "Content-Type": "application/octet-stream" }, body });
    showLive(await r.json());
  }).catch((e) => setStatus("mic-status", e.message, "error"));
  return mic.sending;
}

// The microphone at 16 kHz (the browser resamples it), each block of samples to `onSamples`,
// its level on `meter`. Returns {stream, context}; stop the stream's tracks and close the context.
async function openMicrophone(onSamples, meter) {
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  const context = new AudioContext({ sampleRate: 16000 });
  const source = context.createMediaStreamSource(stream);
  const processor = context.createScriptProcessor(4096, 1, 1);
  processor.onaudioprocess = (e) => {
    const floats = e.inputBuffer.getChannelData(0);
    onSamples(new Float32Array(floats));
    let peak = 0;
    for (const v of floats) peak = Math.max(peak, Math.abs(v));
    meter.style.width = `${Math.min(100, peak * 140)}%`;
  };
  source.connect(processor);
  processor.connect(context.destination);
  return { stream, context };
}

async function closeMicrophone(opened, meter) {
  opened.stream?.getTracks().forEach((t) => t.stop());
  await opened.context?.close();
  meter.style.width = "0";
}

async function startMic() {
  setStatus("mic-status", "");
  $("mic-start").disabled = true;
  try {
    const model = $("mic-model").value;
    const created = await api(`v1/audio/stream/sessions${model ? `?model=${encodeURIComponent(model)}` : ""}`, { method: "POST" });
    mic.session = (await created.json()).sid;
  } catch (e) {
    $("mic-start").disabled = false;
    const why = e.status === 404 ? "This graph does not serve streaming transcription sessions (POST /v1/audio/stream/sessions answered 404)." : e.message;
    return setStatus("mic-status", why, "error");
  }
  try {
    Object.assign(mic, await openMicrophone((floats) => mic.pending.push(floatToPcm16(floats)), $("mic-level")));
  } catch (e) {
    $("mic-start").disabled = false;
    return setStatus("mic-status", `No microphone: ${e.message}`, "error");
  }
  mic.started = performance.now();
  mic.timer = setInterval(() => {
    $("mic-clock").textContent = fmtTime((performance.now() - mic.started) / 1000).replace(/\.\d$/, "");
    if (mic.pending.length) sendChunk(takePending());
  }, CHUNK_MS);
  $("mic-stop").disabled = false;
  setStatus("mic-status", "Listening…");
}

async function stopMic() {
  $("mic-stop").disabled = true;
  clearInterval(mic.timer);
  await closeMicrophone(mic, $("mic-level"));
  if (mic.pending.length) sendChunk(takePending());
  setStatus("mic-status", "Finishing…");
  await sendChunk(new Uint8Array(0), true);
  mic.session = null;
  $("mic-start").disabled = false;
  if (!$("mic-status").classList.contains("error")) setStatus("mic-status", "Done.");
}

// ------------------------------------------------------------------ file transcription

async function transcribeFile(event) {
  event.preventDefault();
  const file = $("file-input").files[0];
  if (!file) return setStatus("file-status", "Choose an audio file first.", "error");
  const format = $("file-format").value;
  const form = new FormData();
  form.append("file", file);
  form.append("response_format", format);
  if ($("file-model").value) form.append("model", $("file-model").value);
  $("file-go").disabled = true;
  setStatus("file-status", `Transcribing ${file.name}…`);
  const t0 = performance.now();
  try {
    const r = await api("v1/audio/transcriptions", { method: "POST", body: form });
    const json = format === "json" || format === "verbose_json";
    showFileResult(json ? await r.json() : await r.text(), format);
    setStatus("file-status", `Done in ${((performance.now() - t0) / 1000).toFixed(1)} s.`);
  } catch (e) {
    setStatus("file-status", e.message, "error");
  } finally {
    $("file-go").disabled = false;
  }
}

function showFileResult(result, format) {
  $("file-result").hidden = false;
  const table = $("file-segments"), raw = $("file-raw"), text = $("file-text");
  table.hidden = raw.hidden = true;
  text.hidden = false;
  if (typeof result === "string") {
    text.hidden = format !== "text";
    text.textContent = result;
    if (format !== "text") { raw.hidden = false; raw.textContent = result; }
    return;
  }
  text.textContent = result.text || "(no speech)";
  const segments = result.segments || [];
  if (segments.length) {
    table.hidden = false;
    table.tBodies[0].replaceChildren(...segments.map((s, i) => {
      const row = table.tBodies[0].insertRow();
      [String(i + 1), fmtTime(s.start), fmtTime(s.end), s.text.trim()].forEach((v) => { row.insertCell().textContent = v; });
      return row;
    }));
  }
}

// ------------------------------------------------------------------ speech

const speech = { player: null, abort: null };

async function speak() {
  const input = $("speech-text").value.trim();
  if (!input) return setStatus("speech-status", "Type something to say.", "error");
  speech.abort = new AbortController();
  $("speech-go").disabled = true;
  $("speech-stop").disabled = false;
  $("speech-download").hidden = true;
  setStatus("speech-status", "Synthesizing…");
  const body = { input, stream_format: "sse", speed: Number($("speech-speed").value) };
  if ($("speech-model").value) body.model = $("speech-model").value;
  if ($("speech-voice").value) body.voice = $("speech-voice").value;
  speech.player.reset(24000);
  try {
    const r = await postJson("v1/audio/speech", body, speech.abort.signal);
    speech.player.rate = Number(r.headers.get("X-Audio-Sample-Rate")) || 24000;
    for await (const event of sseEvents(r)) {
      if (event.type === "speech.audio.delta") speech.player.push(base64Bytes(event.audio));
    }
    setStatus("speech-status", "Done.");
    offerDownload(speech.player);
  } catch (e) {
    setStatus("speech-status", e.name === "AbortError" ? "Stopped." : e.message, e.name === "AbortError" ? "info" : "error");
  } finally {
    $("speech-go").disabled = false;
    $("speech-stop").disabled = true;
  }
}

function offerDownload(player) {
  if (!player.samples) return;
  const link = $("speech-download");
  if (link.href) URL.revokeObjectURL(link.href);
  link.href = URL.createObjectURL(player.wav());
  link.hidden = false;
}

// ------------------------------------------------------------------ conversations (agent, chat)

function addMessage(log, role, text = "") {
  log.querySelector(".placeholder")?.remove();
  const el = document.createElement("div");
  el.className = `msg ${role}`;
  el.textContent = text;
  log.append(el);
  log.scrollTop = log.scrollHeight;
  return el;
}

function resetLog(log, messages, hint) {
  messages.length = 0;
  log.replaceChildren(Object.assign(document.createElement("p"), { className: "placeholder", textContent: hint }));
}

const agent = { player: null, abort: null, timers: [] };

// Mark `sentence` (null: none) as the one being heard, `ms` from now.
function highlightAt(answer, sentence, ms) {
  agent.timers.push(setTimeout(() => {
    answer.querySelectorAll(".speaking").forEach((s) => s.classList.remove("speaking"));
    sentence?.classList.add("speaking");
  }, ms));
}

// Silence the agent: its audio stops and no sentence stays lit.
function hushAgent() {
  agent.player.stop();
  agent.timers.forEach(clearTimeout);
  agent.timers = [];
  $("agent-log").querySelectorAll(".speaking").forEach((s) => s.classList.remove("speaking"));
}

async function askAgent(event) {
  event.preventDefault();
  const input = $("agent-input").value.trim();
  if (!input) return;
  const log = $("agent-log");
  addMessage(log, "user", input);
  $("agent-input").value = "";
  const answer = addMessage(log, "assistant");
  answer.classList.add("cursor");
  const body = { input, messages: [...state.agentMessages], max_tokens: Number($("agent-max").value) || 120 };
  if ($("agent-model").value) body.model = $("agent-model").value;
  if ($("agent-voice").value) body.voice = $("agent-voice").value;
  hushAgent();
  agent.abort = new AbortController();
  $("agent-go").disabled = true;
  $("agent-stop").disabled = false;
  setStatus("agent-status", "Thinking…");
  agent.player.reset(24000);
  const sentences = [];
  let firstTextMs = null, unheard = null;
  try {
    const r = await postJson("v1/agent/stream", body, agent.abort.signal);
    for await (const e of sseEvents(r)) {
      if (e.type === "meta") {
        agent.player.rate = e.sample_rate;
        setStatus("agent-status", `${e.model} → ${e.tts_model || "TTS"}${e.voice ? ` (${e.voice})` : ""}`);
      } else if (e.type === "text") {
        if (firstTextMs === null) firstTextMs = performance.now() - agent.player.t0;
        sentences.push(e.text);
        unheard = Object.assign(document.createElement("span"), { className: "sentence", textContent: e.text + " " });
        answer.append(unheard);
        log.scrollTop = log.scrollHeight;
      } else if (e.type === "audio") {
        const inMs = agent.player.push(base64Bytes(e.delta));
        if (unheard) highlightAt(answer, unheard, inMs); // the sentence lights up as it is heard
        unheard = null;
        agent.player.report(` · first sentence ${Math.round(firstTextMs)} ms`);
      }
    }
    state.agentMessages.push({ role: "user", content: input }, { role: "assistant", content: sentences.join(" ") });
    setStatus("agent-status", "Done.");
  } catch (e) {
    if (e.name !== "AbortError") addMessage(log, "error", e.message);
    setStatus("agent-status", e.name === "AbortError" ? "Stopped." : "", "info");
  } finally {
    answer.classList.remove("cursor");
    highlightAt(answer, null, agent.player.remainingMs());
    if (!answer.textContent) answer.remove();
    $("agent-go").disabled = false;
    $("agent-stop").disabled = true;
  }
}

// A spoken question: recorded until the button is pressed again, transcribed by the ASR slot
// (POST /v1/audio/transcriptions), then asked like a typed one.
const said = { opened: null, chunks: [] };

async function toggleSaying() {
  if (said.opened) return finishSaying();
  said.chunks = [];
  try {
    said.opened = await openMicrophone((floats) => said.chunks.push(floats), $("agent-level"));
  } catch (e) {
    return setStatus("agent-status", `No microphone: ${e.message}`, "error");
  }
  $("agent-say-label").textContent = "Done speaking";
  setStatus("agent-status", "Listening… press again when you are done.");
}

async function finishSaying() {
  const opened = said.opened;
  said.opened = null;
  $("agent-say-label").textContent = "Say it";
  await closeMicrophone(opened, $("agent-level"));
  setStatus("agent-status", "Transcribing…");
  const form = new FormData();
  form.append("file", wavBlob(said.chunks, 16000), "question.wav");
  try {
    const text = (await (await api("v1/audio/transcriptions", { method: "POST", body: form })).json()).text.trim();
    if (!text) return setStatus("agent-status", "Nothing was heard.", "error");
    $("agent-input").value = text;
    $("agent-form").requestSubmit();
  } catch (e) {
    setStatus("agent-status", e.message, "error");
  }
}

const chat = { abort: null };

async function sendChat(event) {
  event.preventDefault();
  const input = $("chat-input").value.trim();
  if (!input) return;
  const log = $("chat-log");
  addMessage(log, "user", input);
  $("chat-input").value = "";
  state.chatMessages.push({ role: "user", content: input });
  const answer = addMessage(log, "assistant");
  answer.classList.add("cursor");
  const system = $("chat-system").value.trim();
  const body = {
    messages: [...(system ? [{ role: "system", content: system }] : []), ...state.chatMessages],
    temperature: Number($("chat-temp").value),
    stream: true,
    stream_options: { include_usage: true },
  };
  if ($("chat-model").value) body.model = $("chat-model").value;
  chat.abort = new AbortController();
  $("chat-go").disabled = true;
  $("chat-stop").disabled = false;
  const t0 = performance.now();
  let first = null, usage = null;
  try {
    const r = await postJson("v1/chat/completions", body, chat.abort.signal);
    for await (const e of sseEvents(r)) {
      const delta = e.choices?.[0]?.delta?.content;
      if (delta) {
        if (first === null) first = performance.now() - t0;
        answer.textContent += delta;
        log.scrollTop = log.scrollHeight;
      }
      usage = e.usage || usage;
    }
    state.chatMessages.push({ role: "assistant", content: answer.textContent });
    const seconds = (performance.now() - t0) / 1000;
    $("chat-stats").textContent = usage
      ? `first token ${Math.round(first)} ms · ${usage.completion_tokens} tokens · ${(usage.completion_tokens / seconds).toFixed(1)} tokens/s`
      : "";
    setStatus("chat-status", "");
  } catch (e) {
    state.chatMessages.pop();
    if (e.name !== "AbortError") addMessage(log, "error", e.message);
  } finally {
    answer.classList.remove("cursor");
    if (!answer.textContent) answer.remove();
    $("chat-go").disabled = false;
    $("chat-stop").disabled = true;
  }
}

// ------------------------------------------------------------------ wiring

function main() {
  speech.player = new PcmPlayer($("speech-wave"), $("speech-stats"));
  agent.player = new PcmPlayer($("agent-wave"), $("agent-stats"));
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => selectTab(tab.dataset.panel));
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.key = $("api-key").value.trim();
    refresh();
  });
  $("mic-start").addEventListener("click", startMic);
  $("mic-stop").addEventListener("click", stopMic);
  $("file-input").addEventListener("change", () => { $("file-name").textContent = $("file-input").files[0]?.name || "Choose a file…"; });
  $("file-form").addEventListener("submit", transcribeFile);
  $("speech-speed").addEventListener("input", () => { $("speech-speed-out").textContent = `${Number($("speech-speed").value).toFixed(1)}×`; });
  $("speech-go").addEventListener("click", speak);
  $("speech-stop").addEventListener("click", () => { speech.abort?.abort(); speech.player.stop(); });
  $("agent-form").addEventListener("submit", askAgent);
  $("agent-stop").addEventListener("click", () => { agent.abort?.abort(); hushAgent(); });
  $("agent-say").addEventListener("click", toggleSaying);
  $("agent-reset").addEventListener("click", () => resetLog($("agent-log"), state.agentMessages, "Ask something; the answer is read out as it is written."));
  $("chat-form").addEventListener("submit", sendChat);
  $("chat-stop").addEventListener("click", () => chat.abort?.abort());
  $("chat-reset").addEventListener("click", () => resetLog($("chat-log"), state.chatMessages, "Say hello."));
  $("speech-text").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) speak(); });
  if (location.hash) selectTab(location.hash.slice(1));
  refresh();
}

main();
