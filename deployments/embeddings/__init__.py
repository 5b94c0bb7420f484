"""The embeddings slot: POST /v1/embeddings through mlx-embeddings, batched with @serve.batch."""
