"""``python -m awa_cli``: the same as the ``awa`` command (the supervisor starts its workers so)."""

from awa_cli.cli import main

if __name__ == "__main__":
    main()
