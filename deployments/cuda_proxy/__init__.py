"""Remote-CUDA proxy: exact model-id routing to an OminiX-SGLang worker-v0 shim.

`config` (the six OMINIX_V0_* settings), `sse` (strict SSE decoder), `protocol` (request rules,
generate envelope, worker event grammar, error mapping) and `client` (httpx client of the shim)
are free of Ray and MLX; `deployment` is the thin Serve wrapper.
"""
