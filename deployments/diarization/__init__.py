"""Speaker diarization (who spoke when) for whole recordings: speech spans from the VAD, GE2E
voice embeddings of sliding windows over them, agglomerative clustering on cosine distance
(average linkage), each moment's speaker voted by its windows, optional known speakers matched
by embedding distance.

`clustering`, `spans` and `formats` are pure (numpy, scipy); `pipeline` runs the MLX
models (Silero VAD, the GE2E encoder of deployments/audio_models) and `engine` gives them a
thread of their own inside the ASR slot's replica.
"""
