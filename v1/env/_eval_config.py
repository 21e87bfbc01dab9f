"""`EvalConfig`: one evaluation run, resolved (the seed's model; `v1 eval` builds one and runs from it).

The limits and defaults of the fields that `v1 eval`'s settings share with it
(`NumExamples`, `RolloutsPerExample`, ...) are defined here once and used by both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from v1.config import ClientConfig
from v1.types import SamplingArgs


def _all_or_positive(value: int) -> int:
    if value != -1 and value < 1:
        raise ValueError("must be at least 1, or -1 for all")
    return value


NumExamples = Annotated[int, AfterValidator(_all_or_positive)]
"""Examples to evaluate: at least 1, or -1 for all."""
RolloutsPerExample = Annotated[int, Field(ge=1)]
MaxConcurrent = Annotated[int, Field(ge=1)]
MaxRetries = Annotated[int, Field(ge=0)]

DEFAULT_NUM_EXAMPLES = 5
DEFAULT_ROLLOUTS_PER_EXAMPLE = 3
DEFAULT_MAX_CONCURRENT = 32


class EvalConfig(BaseModel):
    """One evaluation run: the environment, the model and client, and how many rollouts.

    `v1 eval` resolves its flags, ``V1_EVAL_*`` variables and ``[eval]`` table into one of these
    (``save_results`` is ``--save``, ``resume_path`` is ``--resume``, ``hf_hub_dataset_name`` is
    ``--save-to-hf-hub NAME``, ``env_args`` holds the ``--taskset.*``/``--harness.*`` overrides).
    """

    model_config = ConfigDict(extra="forbid")

    env_id: str
    name: str | None = None
    env_args: dict[str, Any] = Field(default_factory=dict)
    env_dir_path: str = "./environments"
    endpoint_id: str | None = None
    model: str
    client_config: ClientConfig = Field(default_factory=ClientConfig)
    sampling_args: SamplingArgs = Field(default_factory=dict)
    num_examples: NumExamples = DEFAULT_NUM_EXAMPLES
    rollouts_per_example: RolloutsPerExample = DEFAULT_ROLLOUTS_PER_EXAMPLE
    max_concurrent: MaxConcurrent = DEFAULT_MAX_CONCURRENT
    independent_scoring: bool = False
    extra_env_kwargs: dict[str, Any] = Field(default_factory=dict)
    max_retries: MaxRetries = 0
    verbose: bool = False
    state_columns: list[str] | None = None
    save_results: bool = False
    resume_path: Path | None = None
    save_to_hf_hub: bool = False
    hf_hub_dataset_name: str | None = None


__all__ = [
    "DEFAULT_MAX_CONCURRENT",
    "DEFAULT_NUM_EXAMPLES",
    "DEFAULT_ROLLOUTS_PER_EXAMPLE",
    "EvalConfig",
    "MaxConcurrent",
    "MaxRetries",
    "NumExamples",
    "RolloutsPerExample",
]
