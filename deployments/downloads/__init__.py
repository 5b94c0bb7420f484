"""OminiX-API's model catalog and downloads (/v1/models/catalog, /v1/models/download*,
/remove, /scan) through huggingface_hub: its cache, its HTTP protocol. No Ray, no MLX."""
