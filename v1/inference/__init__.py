"""The built-in inference server: an OpenAI-compatible, continuously batching server over a transformers model.

Importing this package imports torch and transformers (the `[train]` extra);
`import v1` does not import it.
"""

from v1.inference.engine import Engine, EngineStats, SamplingParams
from v1.inference.server import InferenceServer, serve_in_thread
from v1.inference.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer, save_tiny_model
from v1.inference.weights import load_state_dict

__all__ = [
    "Engine",
    "EngineStats",
    "InferenceServer",
    "SamplingParams",
    "TinyModelConfig",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "load_state_dict",
    "save_tiny_model",
    "serve_in_thread",
]
