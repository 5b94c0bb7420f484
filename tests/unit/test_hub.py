"""Model resolution: built-in, local directory, Hugging Face; clear errors naming the model."""

import pytest

from deployments.hub import ModelUnavailable, check_model_available, resolve_model_dir


def test_builtin_and_local_directories_resolve(tmp_path):
    calls = []
    builtins = {"tiny": lambda cache: calls.append(cache) or cache / "tiny"}
    assert resolve_model_dir("tiny", builtins=builtins, cache_dir=tmp_path) == tmp_path / "tiny"
    assert resolve_model_dir(str(tmp_path), builtins=builtins) == tmp_path


@pytest.mark.parametrize("model_id", ["not a repo", "a/b/c", "./missing-dir"])
def test_malformed_ids_fail_naming_the_model(model_id):
    with pytest.raises(ModelUnavailable, match="not-a-real|" + model_id.replace(".", r"\.")):
        resolve_model_dir(model_id, builtins={})


def test_uncached_repo_offline_fails_with_the_model_name(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelUnavailable, match="acme/not-a-real-model"):
        resolve_model_dir("acme/not-a-real-model", builtins={}, cache_dir=tmp_path)
    with pytest.raises(ModelUnavailable, match="acme/not-a-real-model"):
        check_model_available("acme/not-a-real-model", builtins={})
