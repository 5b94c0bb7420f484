"""Wire shapes shared by the ingress and the slots: OpenAI request/response models,
the slot-to-ingress generation chunks, error bodies and SSE framing. No Ray, no MLX."""
