"""The worker runtime: claiming, executing, batched finalising, heartbeats, supervisor."""
