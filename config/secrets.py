"""A settings section's secret (`token`, `api_key`): its own value, or the Prefect Secret
block its `<name>_secret_block` names. Prefect is imported only to read such a block, so a
reader whose settings hold their secrets (or none) never loads it."""

from __future__ import annotations

from typing import Any


def in_secret_block(section: Any, name: str) -> bool:
    """Whether the secret `name` of a settings section (`token`, `api_key`) is to be read
    from the Prefect Secret block its `<name>_secret_block` names: it is not set itself."""
    return getattr(section, name, None) is None and bool(
        getattr(section, f"{name}_secret_block", None)
    )


def secret_value(section: Any, name: str) -> str | None:
    """The secret `name` of a settings section: its value, else that of the Prefect Secret
    block its `<name>_secret_block` names; never logged."""
    if in_secret_block(section, name):
        from prefect.blocks.system import Secret

        block = Secret.load(getattr(section, f"{name}_secret_block"))
        return str(block.get())  # type: ignore[union-attr]
    value = getattr(section, name, None)
    return str(value.get_secret_value()) if value is not None else None
