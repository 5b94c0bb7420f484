"""What text generation shares across slots (the LLM and the VLM): the sampling parameters a
request asks for (`sampling.py`) and the parsing of a model's streamed text into answer,
reasoning, tool calls and stop strings (`output.py`). Pure Python: no Ray, no MLX."""
