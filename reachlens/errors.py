"""The error class for user errors: bad input, a refused run, a missing file.

A :class:`ReachlensError` is something the user can fix; its message names the bad value with
``!r`` and says how to fix it. The CLI prints it as one line and exits with status 2. Anything else
that escapes is a bug and keeps its traceback. It is deliberately not a ``ValueError``: a
``ValueError`` or ``KeyError`` raised by a bug (in reachlens, pandas, torch) must never be mistaken
for a user error.
"""

from __future__ import annotations

__all__ = ["ReachlensError"]


class ReachlensError(Exception):
    """A user error: printed by the CLI as one line, exit status 2."""
