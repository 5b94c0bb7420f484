"""The vision-language slot: chat with images and /v1/vlm/completions through mlx-vlm."""
