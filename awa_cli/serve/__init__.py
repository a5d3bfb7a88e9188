"""``awa serve``: the dashboard, the admin API, auth and audit, and the HTTP callback routes.

``app.build_app`` assembles the Starlette application; ``auth`` holds the one guard (tokens,
sessions, roles, CSRF); ``pages`` and ``api`` are thin routes over the client; ``audit`` is the
seam every action goes through; templates and the stylesheet ship in the package.
"""
