"""The voice agent: a composition above the slots (LLM -> TTS sentence by sentence). Ray-free."""
