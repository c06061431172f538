"""The project's user-facing error types.

A ``UserError`` is a mistake the user can fix (a config key, a data file, a reward callable, a checkpoint). The CLI
prints
its message alone, without a traceback, and exits with status 2. Everything else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """A bad input: the message names where (key, file:line:col, row) and what to do."""


class ConfigError(UserError):
    """A config value or combination of values that cannot run."""


class DataError(UserError):
    """A data file or source that cannot be read as prompts."""


class RewardError(UserError):
    """A reward provider that raised, returned a non-finite value, or cannot be imported."""
