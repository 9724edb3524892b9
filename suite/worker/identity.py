"""What a cell records of its model and its training curve. Model identity: what the model is,
as `ctx.model(module, config=...)` names it — its class, parameter counts, and its config
reduced to JSON (a transformers config's to_dict(), a dataclass, a mapping), so that two records
of "gpt2" can be told apart by more than a name."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CONFIG_LIMIT = 16_384  # characters of config kept in the record; the digest covers all of it


def _jsonable(value: Any, depth: int = 0) -> Any:
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    return repr(value)


def config_dict(config: Any) -> dict[str, Any] | None:
    if config is None:
        return None
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    elif not isinstance(config, Mapping):
        config = vars(config) if hasattr(config, "__dict__") else {"value": config}
    out = _jsonable(config)
    return out if isinstance(out, dict) else {"value": out}


def model_record(module: torch.nn.Module, config: Any = None) -> dict[str, Any]:
    params = list(module.parameters())
    record: dict[str, Any] = {
        "class": f"{type(module).__module__}.{type(module).__qualname__}",
        "parameters": sum(p.numel() for p in params),
        "trainable_parameters": sum(p.numel() for p in params if p.requires_grad),
        "dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params}),
    }
    conf = config_dict(config)
    if conf is not None:
        text = json.dumps(conf, sort_keys=True)
        record["config_sha256"] = hashlib.sha256(text.encode()).hexdigest()
        record["config"] = conf if len(text) <= CONFIG_LIMIT else None
    return record


def finite_or_none(values: Sequence[Any]) -> list[float | None]:
    """A curve as JSON can hold it: a step whose loss is NaN or infinite is null (diverged)."""
    out: list[float | None] = []
    for value in values:
        number = float(value)
        out.append(number if math.isfinite(number) else None)
    return out
