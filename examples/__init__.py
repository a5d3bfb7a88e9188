"""Example job kinds used by ``awa.toml.example`` and the README."""
