"""``python -m tether``: the same as the ``tether`` command."""

from __future__ import annotations

from .cli.main import main

if __name__ == "__main__":
    main()
