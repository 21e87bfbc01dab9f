"""The run engine: `Env` (eval and training workers), run configs, loading by name or TOML,
scheduling and executors, and the results a run writes."""

from v1.env._env import MESSAGE_TYPES, Env, EnvOrigin, is_retryable
from v1.env._env_state import EnvState
from v1.env._eval_config import (
    DEFAULT_MAX_CONCURRENT,
    DEFAULT_NUM_EXAMPLES,
    DEFAULT_ROLLOUTS_PER_EXAMPLE,
    EvalConfig,
    MaxConcurrent,
    MaxRetries,
    NumExamples,
    RolloutsPerExample,
)
from v1.env._executors import RayActorsLost, RayExecutor, check_ray_address
from v1.env._handler_rubric import HandlerRubric
from v1.env._loading import (
    EnvSource,
    environment_config_file,
    load_environment,
    load_example_dataset,
    load_id_environment,
    load_toml_environment,
)
from v1.env._rescore import RescoreReport, SavedRun, rescore_run
from v1.env._results import (
    METADATA_FILE,
    RESULTS_FILE,
    EvalSummary,
    PassRates,
    ResultsWriter,
    RolloutKey,
    create_run_folder,
    k_values,
    pass_all_at_k,
    pass_at_k,
)
from v1.env._scheduling import Executor, LocalExecutor, Unit, UnitJob
from v1.env._validate import ValidationWriter, gold_env, run_gold, validate_threshold

__all__ = [
    "DEFAULT_MAX_CONCURRENT",
    "DEFAULT_NUM_EXAMPLES",
    "DEFAULT_ROLLOUTS_PER_EXAMPLE",
    "Env",
    "ValidationWriter",
    "EnvOrigin",
    "EnvState",
    "EnvSource",
    "EvalConfig",
    "EvalSummary",
    "HandlerRubric",
    "Executor",
    "LocalExecutor",
    "MESSAGE_TYPES",
    "METADATA_FILE",
    "MaxConcurrent",
    "MaxRetries",
    "NumExamples",
    "PassRates",
    "RESULTS_FILE",
    "RayActorsLost",
    "RayExecutor",
    "ResultsWriter",
    "RolloutKey",
    "RolloutsPerExample",
    "RescoreReport",
    "SavedRun",
    "Unit",
    "UnitJob",
    "check_ray_address",
    "create_run_folder",
    "environment_config_file",
    "gold_env",
    "is_retryable",
    "k_values",
    "load_environment",
    "load_example_dataset",
    "load_id_environment",
    "load_toml_environment",
    "pass_all_at_k",
    "pass_at_k",
    "rescore_run",
    "run_gold",
    "validate_threshold",
]
