"""One router module per API surface: it parses the request and returns the response; the
work on the slots is its serving class's (ingress/serving/)."""
