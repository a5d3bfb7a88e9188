"""Worker scripts for the peer queues that ``python -m benchmarks --compare`` runs."""
