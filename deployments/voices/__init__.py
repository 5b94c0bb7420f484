"""Voices, in one wing beside the slots: the registry file and how a request's voice resolves
(registry.py), the cluster's store and each replica's mirror of it (store.py), the voice service
Control serves it through (service.py), a TTS replica's voice library (library.py), and voice
training's job records (jobs.py). It imports no slot package: the TTS slot imports it."""
