"""One click group (or command) per module; ``cli.py`` assembles them."""
