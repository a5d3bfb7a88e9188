"""Reliability and security: chaos runs (worker kills, PostgreSQL restarts, dropped
connections), races, bad input and secrets. Long runs are marked ``slow``; a short version of
each runs by default."""
