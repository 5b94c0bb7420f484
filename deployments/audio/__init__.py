"""Audio helpers shared by the audio routes: Ray-free and MLX-free (numpy + soundfile)."""
