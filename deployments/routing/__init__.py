"""Request routing across a slot's replicas: affinity keys (Ray-free, `affinity`) and the Serve
request router that uses them (`router`). See docs/routing.md."""
