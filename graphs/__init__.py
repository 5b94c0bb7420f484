"""Application builders: typed graph args in, a bound Ray Serve application out."""
