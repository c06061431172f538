"""The one registry of reward names: PPO's own matchers, the shared rules, and a run's custom catalog.

Nothing here is mutable at runtime: custom providers arrive through ``reward_provider_catalog`` (a dotted path every
worker process imports for itself), never by registering into a module-level dict that only one process would see.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from types import MappingProxyType

from lightning_rl.errors import ConfigError, RewardError
from lightning_rl.rewards import countdown, gsm8k, rules
from lightning_rl.rewards.provider import AnyProvider, ProviderFunction, coerce_needs, is_group_level

PPO_MATCHERS: Mapping[str, AnyProvider] = MappingProxyType(
    {"arithmetic_exact_match": rules.ARITHMETIC_EXACT_MATCH, "none": rules.NONE}
)
"""PPO's own matchers. ``none`` scores 0.0 and is not mapped onto the correct/incorrect scale."""

SHARED_RULES: Mapping[str, AnyProvider] = MappingProxyType(
    {
        "arithmetic": rules.ARITHMETIC,
        "gsm8k": gsm8k.GSM8K,
        "countdown": countdown.COUNTDOWN,
        "exact_match": rules.EXACT_MATCH,
        "nonempty": rules.NONEMPTY,
        "constant": rules.CONSTANT,
    }
)
"""The rule rewards every algorithm selects from (``model.reward.terminal``; the spec's ``rl.reward``)."""

BUILTINS: Mapping[str, AnyProvider] = MappingProxyType({**PPO_MATCHERS, **SHARED_RULES})

UNSCALED: frozenset[str] = frozenset({"none"})
"""Built-ins whose output is returned as-is rather than mapped onto ``correct_reward`` / ``incorrect_reward``."""


def builtin_names() -> list[str]:
    return sorted(BUILTINS)


def unknown_name(name: str, known: list[str], where: str) -> ConfigError:
    return ConfigError(f"{where}: unknown reward {name!r}; known: {', '.join(known)}")


def load_callable(path: str, key: str) -> object:
    """Import ``"package.module:attr"`` (``attr`` may be dotted) for config key ``key``.

    Raises ConfigError for a malformed path and RewardError, naming ``key`` and the path, for an import that fails,
    a missing attribute, or an object that is not callable.
    """
    module_name, sep, attr_path = path.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigError(f"{key}={path!r}: expected 'package.module:callable'")
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as exc:  # a user module may fail with anything on import; report it with the path
        raise RewardError(f"{key}={path!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise RewardError(f"{key}={path!r}: {module_name!r} has no attribute {attr_path!r}") from exc
    if not callable(obj):
        raise RewardError(f"{key}={path!r}: {attr_path!r} is a {type(obj).__name__}, not a callable")
    return obj


def check_provider(provider: object, owner: str) -> AnyProvider:
    """Check that ``provider`` can be called as a pointwise or group-level provider and has usable ``needs``.

    A provider without a ``needs`` attribute needs nothing. Raises RewardError naming ``owner``.
    """
    if not callable(provider):
        raise RewardError(f"{owner}: a reward provider must be callable, got {type(provider).__name__}")
    try:
        needs = coerce_needs(getattr(provider, "needs", frozenset()), owner)
    except (TypeError, ValueError) as exc:
        raise RewardError(str(exc)) from exc
    group = is_group_level(provider)
    columns = ("completions", "references", "prompts", "rows") + (("group_ids",) if group else ())
    try:  # a decorated function is checked by its own signature, not the wrapper's (*columns)
        signature = inspect.signature(provider.fn if isinstance(provider, ProviderFunction) else provider)
    except (TypeError, ValueError):  # some C callables have no introspectable signature; trust them
        signature = None
    if signature is not None:
        try:
            signature.bind(*columns)
        except TypeError as exc:
            kind = "group-level" if group else "pointwise"
            raise RewardError(
                f"{owner}: unusable signature {signature} ({exc}); a {kind} reward provider is called as "
                f"fn({', '.join(columns)}) and returns one float per completion"
            ) from exc
    if needs != getattr(provider, "needs", None):
        provider = ProviderFunction(fn=provider, needs=needs, group_level=group)
    return provider  # type: ignore[return-value]


def load_catalog(path: str, key: str) -> dict[str, AnyProvider]:
    """Import and call the zero-argument factory at ``path`` (config key ``key``); return its providers, each checked.

    An entry may not reuse a built-in name (refused by name) and every value must be a usable provider.
    """
    factory = load_callable(path, key)
    try:
        inspect.signature(factory).bind()  # type: ignore[arg-type]
    except TypeError as exc:
        raise RewardError(f"{key}={path!r}: the catalog factory must take no arguments ({exc})") from exc
    except ValueError:
        pass
    try:
        entries = factory()  # type: ignore[operator]
    except Exception as exc:
        raise RewardError(f"{key}={path!r}: the catalog factory raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(entries, Mapping):
        raise RewardError(
            f"{key}={path!r}: the catalog factory must return a mapping name -> provider, got {type(entries).__name__}"
        )
    clashes = sorted(str(name) for name in entries if name in BUILTINS)
    if clashes:
        raise ConfigError(f"{key}={path!r}: catalog entries may not override built-in rewards: {', '.join(clashes)}")
    checked: dict[str, AnyProvider] = {}
    for name, provider in entries.items():
        if not isinstance(name, str) or not name:
            raise RewardError(f"{key}={path!r}: catalog names must be non-empty strings, got {name!r}")
        checked[name] = check_provider(provider, f"{key}={path!r} entry {name!r}")
    return checked


def resolve(name: str, catalog: Mapping[str, AnyProvider] | None, where: str) -> AnyProvider:
    """The provider called ``name``: a built-in, else a catalog entry; unknown names list every known one."""
    provider = BUILTINS.get(name)
    if provider is None and catalog is not None:
        provider = catalog.get(name)
    if provider is None:
        raise unknown_name(name, builtin_names() + sorted(catalog or ()), where)
    return provider
