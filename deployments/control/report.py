"""What models are on disk: the Hugging Face cache, the built-in model cache and configured
model directories, grouped by the slot that can serve them (from config.json's model_type).

Which types a slot serves is its registry entry's (`Slot.model_types`, declared in each slot
package's slot.py); the caller passes the entries in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Optional

from deployments.hub import default_cache_dir
from deployments.slot_types import Slot


def slot_of(model_dir: Path, slots: Iterable[Slot]) -> Optional[str]:
    slots = list(slots)
    config = model_dir / "config.json"
    if not config.exists():
        return next((s.name for s in slots if any((model_dir / d).is_dir() for d in s.model_dirs)), None)
    try:
        model_type = str(json.loads(config.read_text()).get("model_type", "")).lower()
    except (OSError, ValueError):
        return None
    if not model_type:
        return None
    listed = next((s.name for s in slots if model_type in s.model_types), None)
    return listed or next((s.name for s in slots if s.other_model_types), None)


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def disk_report(models_dirs: dict[str, str], slots: Iterable[Slot]) -> dict:
    slots = list(slots)
    entries = []
    try:
        from huggingface_hub import scan_cache_dir

        for repo in scan_cache_dir().repos:
            if repo.repo_type != "model":
                continue
            newest = max(repo.revisions, key=lambda r: r.last_modified, default=None)
            slot = slot_of(Path(newest.snapshot_path), slots) if newest else None
            entries.append(
                {
                    "id": repo.repo_id,
                    "slot": slot,
                    "source": "huggingface_cache",
                    "size_bytes": repo.size_on_disk,
                    "path": str(repo.repo_path),
                }
            )
    except Exception:  # no cache yet
        pass
    roots = [("builtin_cache", default_cache_dir())] + [
        ("models_dir", Path(d).expanduser()) for d in models_dirs.values()
    ]
    for source, root in roots:
        if not root.is_dir():
            continue
        for model_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            entries.append(
                {
                    "id": str(model_dir),
                    "slot": slot_of(model_dir, slots),
                    "source": source,
                    "size_bytes": _dir_size(model_dir),
                    "path": str(model_dir),
                }
            )
    by_slot: dict[str, list] = {}
    for entry in entries:
        by_slot.setdefault(entry["slot"] or "unknown", []).append(entry)
    return {"total": len(entries), "total_bytes": sum(e["size_bytes"] for e in entries), "by_slot": by_slot}
