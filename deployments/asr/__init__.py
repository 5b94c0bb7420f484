"""The ASR slot: speech to text with mlx-audio STT models (whisper first)."""
