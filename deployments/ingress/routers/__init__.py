"""One router module per API surface."""
