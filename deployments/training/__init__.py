"""Voice training jobs (OminiX-API's /v1/voices/train*): a composition above the slots, run by
the ingress: the ASR slot transcribes, the TTS slot computes and caches a voice's conditioning."""
