"""Plugins: the hook specifications, the plugin manager factory and the built-in plugins."""
