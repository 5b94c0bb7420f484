"""The ingress deployment: HTTP concerns only (parse, validate, route, stream). Holds no model."""
