"""The ingress's serving classes, one per endpoint family, as vLLM's entrypoints/openai has
`OpenAIServingChat` and `OpenAIServingModels`: they call the slots (through the clients in
ingress/clients.py) and assemble the responses, so the routers only parse, pick and return."""
