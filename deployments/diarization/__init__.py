"""Speaker diarization (who spoke when) for whole recordings: speech spans from the VAD (and the
ASR segments' boundaries), a GE2E voice embedding per span, agglomerative clustering on cosine
distance, optional known speakers matched by embedding distance.

`clustering`, `spans` and `formats` are pure (numpy only); `pipeline` runs the MLX
models (Silero VAD, the GE2E encoder of deployments/audio_models) and `engine` gives them a
thread of their own inside the ASR slot's replica.
"""
