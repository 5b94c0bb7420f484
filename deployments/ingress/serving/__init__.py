"""The ingress's serving classes, one per endpoint surface, as vLLM's entrypoints/openai has
`OpenAIServingChat` and `OpenAIServingModels`: they alone call the slots and the other
deployments (through the clients in ingress/clients.py) and assemble the responses, so the
routers only parse, pick and return (tests/unit/test_ingress_layout.py holds them to it)."""
