"""A plugin module that fails at import."""

raise RuntimeError("broken_plugin cannot be imported")
