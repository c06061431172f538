"""A terminal_callable that fails on purpose (a failing fit must still tear its engines down)."""


def explode(completions, references, prompts, rows):
    raise RuntimeError("this reward always fails")
