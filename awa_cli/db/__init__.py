"""The database layer: connections, migrations, the embedded server and SQL text.

Never imports click or rich.
"""
