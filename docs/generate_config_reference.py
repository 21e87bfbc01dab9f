"""Write docs/config-reference.md from the pydantic config models: `python docs/generate_config_reference.py`.

tests/test_config_reference.py fails when the page and the models disagree.
"""

from __future__ import annotations

import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

import v1.config._config as config
from v1.cli._eval import EvalSettings
from v1.env._loading import ENV_KEYS

PAGE = Path(__file__).resolve().parent / "config-reference.md"
SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("[eval]", EvalSettings),
    ("[env] (EnvConfig)", config.EnvConfig),
    ("[env.taskset]", config.TasksetConfig),
    ("[env.harness]", config.HarnessConfig),
    ("[env.harness.program]", config.ProgramConfig),
    ("[env.harness.sandbox]", config.SandboxConfig),
    ("[env.harness.sandbox.network]", config.NetworkPolicy),
    ("[env.harness.client]", config.ClientConfig),
    ("client endpoint_configs", config.EndpointClientConfig),
    ("[[env.taskset.toolsets]]", config.ToolsetConfig),
    ("MCP tools in a toolset's tools", config.MCPToolConfig),
    ("[env.taskset.user]", config.UserConfig),
    ("handlers ([[env.taskset.rewards]], ...)", config.HandlerConfig),
    ("[env.taskset.scoring.NAME]", config.ScoringConfig),
    ("artifacts", config.ArtifactConfig),
]


def type_name(annotation: Any) -> str:
    """A short, stable name for a field's type."""
    if annotation is None or annotation is type(None):
        return "None"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        return " | ".join(type_name(arg) for arg in args)
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        if name == "Callable":
            return "callable"
        return f"{name}[{', '.join(type_name(arg) for arg in args)}]" if args else name
    if annotation is object:
        return "ref or object"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def default_of(field: FieldInfo) -> str:
    if field.is_required():
        return "required" if not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)) else "{}"
    if field.default_factory is not None:
        return "(factory)"
    return f"`{field.default!r}`"


def annotated_metadata(annotation: Any) -> list[Any]:
    """The constraints of `Annotated[...]` types in a field's annotation (`TokenBudget | None`, say)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return [item for arg in args[1:] for item in (arg.metadata if isinstance(arg, FieldInfo) else [arg])]
    return [item for arg in args for item in annotated_metadata(arg)]


def constraints(field: FieldInfo) -> str:
    parts = []
    for item in [*field.metadata, *annotated_metadata(field.annotation)]:
        for name in ("gt", "ge", "lt", "le"):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{ {'gt': '>', 'ge': '>=', 'lt': '<', 'le': '<='}[name] } {value}")
    return ", ".join(parts)


def summary(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    return re.sub(r"\s+", " ", doc.split("\n\n")[0]).strip()


def render() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from the pydantic models by `python docs/generate_config_reference.py`; do not edit by hand",
        "(tests/test_config_reference.py fails when this page and the models disagree). Every model rejects",
        'unknown fields. A "ref" is a `"module:object"` string ([evaluation.md](evaluation.md) says where refs',
        "are found). See [config.md](config.md) for how the models are used.",
        "",
    ]
    for title, model in SECTIONS:
        lines += [
            f"## {title}",
            "",
            f"`{model.__name__}`: {summary(model)}",
            "",
            "| field | type | default | constraint |",
            "| --- | --- | --- | --- |",
        ]
        for name, field in model.model_fields.items():
            cells = [f"`{name}`", type_name(field.annotation), default_of(field), constraints(field)]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        lines.append("")
        if model is config.EnvConfig:
            others = [key for key in ENV_KEYS if key not in model.model_fields]
            lines += [
                f"The `[env]` table of a file also takes {', '.join(f'`{key}`' for key in others)}: `id` loads a module's",
                "environment (the file's sections override its fields), `name` sets the env id, `pass_threshold`",
                "(default 0.5) sets the pass@k threshold.",
                "",
            ]
    return "\n".join(lines).replace("|  |", "| |")


def main() -> int:
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
