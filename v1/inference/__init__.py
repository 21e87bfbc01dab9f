"""The built-in inference server: an OpenAI-compatible, continuously batching server over a transformers model,
and the vLLM wiring (its managed environment, server, engine and weight sync).

Importing this package imports torch and transformers (the `[train]` extra);
`import v1` does not import it. The vLLM, sampling and weight-sync names load on first use.
"""

from typing import TYPE_CHECKING

from v1._util.lazy import lazy_attributes
from v1.inference._engine import Engine, EngineStats, SamplingParams
from v1.inference._server import InferenceServer, serve_in_thread
from v1.inference._tiny import build_tiny_model, build_tiny_tokenizer, save_tiny_model
from v1.inference._weights import SafetensorsWriter, load_state_dict

if TYPE_CHECKING:
    from v1.inference._sampling import LogitProcessing, entropy_of, processed_logits
    from v1.inference._vllm_engine import VLLM_CPU_THREADS, check_vllm_start, server_sync, vllm_endpoint
    from v1.inference._vllm_env import cache_root, vllm_python
    from v1.inference._vllm_server import VLLMServer, port_is_free, startup_error
    from v1.inference._weight_sync import InProcessWeightSync, Streamed, WeightReceiver, WeightSync

__getattr__ = lazy_attributes(
    __name__,
    {
        **dict.fromkeys(["LogitProcessing", "entropy_of", "processed_logits"], "v1.inference._sampling"),
        **dict.fromkeys(["VLLM_CPU_THREADS", "check_vllm_start", "server_sync", "vllm_endpoint"], "v1.inference._vllm_engine"),
        **dict.fromkeys(["cache_root", "vllm_python"], "v1.inference._vllm_env"),
        **dict.fromkeys(["VLLMServer", "port_is_free", "startup_error"], "v1.inference._vllm_server"),
        **dict.fromkeys(["InProcessWeightSync", "Streamed", "WeightReceiver", "WeightSync"], "v1.inference._weight_sync"),
    },
)

__all__ = [
    "VLLM_CPU_THREADS",
    "Engine",
    "EngineStats",
    "InProcessWeightSync",
    "InferenceServer",
    "LogitProcessing",
    "SafetensorsWriter",
    "SamplingParams",
    "Streamed",
    "VLLMServer",
    "WeightReceiver",
    "WeightSync",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "cache_root",
    "check_vllm_start",
    "entropy_of",
    "load_state_dict",
    "port_is_free",
    "processed_logits",
    "save_tiny_model",
    "serve_in_thread",
    "server_sync",
    "startup_error",
    "vllm_endpoint",
    "vllm_python",
]
