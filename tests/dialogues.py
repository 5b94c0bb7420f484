"""Multi-speaker dialogues for diarization tests and the bench, spoken by the built-in Kokoro-82M
(different Kokoro voices are told apart by a GE2E embedding; espeak-ng's variants are not).

Synthesis is slow on this CPU, so each (voice, sentence) utterance is
synthesized once and cached on disk keyed by its content (model id and format, voice, text):
`<OMINIX_CACHE_DIR or ~/.cache/ominix-serve>/diarization-utterances/<sha256>.npy`, 16 kHz,
trimmed to its voiced samples. A dialogue is assembled from cached utterances with exact gaps,
so its reference turns (who speaks when) are known to the sample.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.der import DERComponents, der_components

RATE = 16000
VOICES = ("af_heart", "am_michael", "bf_emma", "bm_george")
# Turns of about 2 to 8 s in Kokoro's voices; each voice reads its own sentences.
SENTENCES = (
    "Good morning, did you get my message?",
    "Yes, I read it on the train this morning and I think the plan is mostly fine.",
    "Sounds good to me, let us do that.",
    "The delivery is late again, so we should call the warehouse before lunch and ask them why.",
    "Right, let us start with the numbers.",
    "Sales went up in the north, but the south stayed flat for the whole quarter.",
    "I can take that one if nobody else wants it.",
    "Could you send me the slides after the meeting, with the charts we talked about yesterday?",
    "That is a fair point, I had not thought of it.",
    "We will need another week to finish the testing, maybe two if the new parts arrive late.",
    "Let me check the calendar for next week.",
    "Thursday afternoon works for everyone on my team, and the room on the third floor is free.",
    "I am not sure about that, to be honest.",
    "The old printer keeps jamming, so I ordered a new one and it should be here on Monday.",
    "Who is going to write the summary?",
    "I will write it tonight and share it with the group first thing tomorrow morning.",
)
KOKORO_FORMAT = 1  # bump when the synthesis or trimming changes


def cache_dir() -> Path:
    from deployments.hub import default_cache_dir

    return default_cache_dir() / "diarization-utterances"


def utterance_key(voice: str, text: str) -> str:
    from deployments.tts.kokoro import KOKORO_TTS_ID

    return hashlib.sha256(f"{KOKORO_TTS_ID}|{KOKORO_FORMAT}|{voice}|{text}".encode()).hexdigest()[:32]


def trim(samples: np.ndarray, threshold: float = 0.01) -> np.ndarray:
    """The samples between the first and last one louder than `threshold`."""
    loud = np.flatnonzero(np.abs(samples) > threshold)
    return samples[loud[0] : loud[-1] + 1] if len(loud) else samples[:0]


class Kokoro:
    """The built-in Kokoro-82M (deployments/tts/kokoro.py: its G2P, voices and config) run by
    onnxruntime on the int8 ONNX export its MLX weights are converted from: the same network and
    weights the graph's TTS slot serves, at a real-time factor of ~0.15 instead of 1-4 here
    (bench/kokoro.py measures both), which is what makes a dialogue corpus affordable."""

    def __init__(self):
        self._session = None

    def _start(self) -> None:
        import json

        import onnxruntime as ort

        from deployments.hub import default_cache_dir
        from deployments.tts.kokoro import ensure_kokoro, prepare_g2p, read_onnx_bytes

        self.model_dir = ensure_kokoro(default_cache_dir())
        prepare_g2p(default_cache_dir())  # misaki's spaCy model, offline
        self.vocab = json.loads((self.model_dir / "config.json").read_text())["vocab"]
        self._session = ort.InferenceSession(read_onnx_bytes(), providers=["CPUExecutionProvider"])
        self._pipelines = {}

    def phonemes(self, voice: str, text: str) -> str:
        from mlx_audio.tts.models.kokoro.pipeline import KokoroPipeline

        from deployments.tts.model_hooks import kokoro_lang_code

        lang = kokoro_lang_code(None, voice)
        if lang not in self._pipelines:  # G2P only: no model
            self._pipelines[lang] = KokoroPipeline(lang, model=False, repo_id="local", model_path=self.model_dir)
        pipeline = self._pipelines[lang]
        _, tokens = pipeline.g2p(text)
        return " ".join(ps for _, ps, _ in pipeline.en_tokenize(tokens) if ps)

    def speak(self, voice: str, text: str) -> np.ndarray:
        """`text` in `voice` at 16 kHz."""
        from safetensors.numpy import load_file

        from deployments.audio.resample import resample

        if self._session is None:
            self._start()
        phonemes = self.phonemes(voice, text)
        style = load_file(str(self.model_dir / "voices" / f"{voice}.safetensors"))["voice"][len(phonemes) - 1]
        ids = [0, *[self.vocab[p] for p in phonemes if p in self.vocab], 0]
        feeds = {
            "tokens": np.array([ids], dtype=np.int64),
            "style": style.reshape(1, -1).astype(np.float32),
            "speed": np.array([1.0], dtype=np.float32),
        }
        (audio,) = self._session.run(None, feeds)
        return resample(audio.reshape(-1).astype(np.float32), 24000, RATE)

    def close(self) -> None:
        self._session = None


def utterance(voice: str, text: str, kokoro: Kokoro | None = None) -> np.ndarray:
    """`text` in `voice`, 16 kHz float32, trimmed; from the cache, else synthesized and cached."""
    path = cache_dir() / f"{utterance_key(voice, text)}.npy"
    if path.exists():
        return np.load(path)
    own = kokoro is None
    kokoro = kokoro or Kokoro()
    try:
        samples = trim(kokoro.speak(voice, text)).astype(np.float32)
    finally:
        if own:
            kokoro.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(f".{np.random.randint(1 << 30)}.tmp.npy")
    np.save(scratch, samples)
    scratch.rename(path)  # atomic: a racing writer leaves the same content
    return samples


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: str


@dataclass
class Dialogue:
    name: str
    samples: np.ndarray  # 16 kHz mono float32
    turns: list[Turn]  # the reference: who speaks when (seconds)
    gap_s: float

    @property
    def speakers(self) -> set[str]:
        return {t.speaker for t in self.turns}


def script(n_speakers: int, n_turns: int, seed: int) -> list[tuple[str, str]]:
    """(voice, sentence) turns: speakers take turns (never twice in a row), each reading its own
    sentences in order, and every speaker speaks at least once."""
    rng = np.random.default_rng(seed)
    voices = [VOICES[(seed + i) % len(VOICES)] for i in range(n_speakers)]
    order = list(range(n_speakers))
    while len(order) < n_turns:
        order.append(int(rng.choice([i for i in range(n_speakers) if i != order[-1]])))
    said = {v: 0 for v in voices}
    out = []
    for i in order:
        voice = voices[i]
        per_voice = len(SENTENCES) // len(VOICES)
        own = SENTENCES[VOICES.index(voice) * per_voice :][:per_voice]
        out.append((voice, own[said[voice] % len(own)]))
        said[voice] += 1
    return out


def dialogue(
    n_speakers: int, n_turns: int, gap_s: float, seed: int = 0, kokoro: Kokoro | None = None, lead_s: float = 0.5
) -> Dialogue:
    """A dialogue of `n_turns` turns between `n_speakers` Kokoro voices, `gap_s` of silence
    between turns and `lead_s` before the first and after the last."""
    parts, turns, t = [np.zeros(int(lead_s * RATE), np.float32)], [], lead_s
    gap = np.zeros(int(round(gap_s * RATE)), np.float32)
    for k, (voice, text) in enumerate(script(n_speakers, n_turns, seed)):
        if k:
            parts.append(gap)
            t += len(gap) / RATE
        speech = utterance(voice, text, kokoro)
        turns.append(Turn(round(t, 4), round(t + len(speech) / RATE, 4), voice))
        parts.append(speech)
        t += len(speech) / RATE
    parts.append(np.zeros(int(lead_s * RATE), np.float32))
    return Dialogue(f"{n_speakers}spk-{n_turns}turns-gap{gap_s:g}-seed{seed}", np.concatenate(parts), turns, gap_s)


# The measured set: per gap size, dialogues of two, three and four voices (one Kokoro voice set).
GAPS_S = (0.3, 0.5, 1.0, 1.5)
SHAPES = ((2, 6, 0), (2, 6, 1), (3, 6, 2), (4, 8, 3))  # (speakers, turns, seed)


def dialogue_set(gaps=GAPS_S, shapes=SHAPES) -> list[Dialogue]:
    kokoro = Kokoro()
    try:
        return [dialogue(n, turns, gap, seed, kokoro) for gap in gaps for n, turns, seed in shapes]
    finally:
        kokoro.close()


def _main() -> None:
    import time

    t0 = time.perf_counter()
    for d in dialogue_set():
        print(f"{d.name}: {len(d.samples) / RATE:.1f} s, {len(d.speakers)} speakers ({time.perf_counter() - t0:.0f} s)")


@dataclass
class Score:
    """One dialogue diarized: its DER components and the speakers found vs present."""

    dialogue: Dialogue
    der: DERComponents
    found: int

    @property
    def count_right(self) -> bool:
        return self.found == len(self.dialogue.speakers)


def reference(d: Dialogue) -> list[tuple[float, float, str]]:
    return [(t.start, t.end, t.speaker) for t in d.turns]


def score(d: Dialogue, result) -> Score:
    """A `Diarization` of `d` against its reference turns."""
    hypothesis = [(t.start, t.end, t.speaker) for t in result.turns]
    return Score(d, der_components(reference(d), hypothesis), result.speakers)


if __name__ == "__main__":  # fill the cache: python -m tests.dialogues
    _main()
