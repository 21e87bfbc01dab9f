"""What a step hands the weight sync: the trainer's own tensors in one process on the CPU, copied once into the engine."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from v1.inference import (  # noqa: E402
    InferenceServer,
    build_tiny_model,
)
from v1.train import (  # noqa: E402
    LossConfig,
    OptimConfig,
    PolicyTrainer,
    Sample,
)
from v1.train._ranks import weights_for_sync  # noqa: E402


def test_the_sync_gets_the_trainers_tensors_uncopied_and_the_engine_serves_the_trained_weights() -> None:
    model, tokenizer = build_tiny_model({"hidden_size": 16, "intermediate_size": 16, "tie_word_embeddings": True})
    served = copy.deepcopy(model)
    trainer = PolicyTrainer(model, LossConfig(), OptimConfig(lr=1e-2), max_steps=1, micro_batch_size=4)
    samples = [
        Sample([1, 2, 3, 4 + i], [0, 0, 1, 1], [0.0, 0.0, -1.0, -1.0], [0.0, 0.0, a, a]) for i, a in enumerate((1.0, -1.0))
    ]
    trainer.train_step(samples)

    weights = weights_for_sync(trainer)
    own = dict(model.named_parameters())
    assert weights["model.embed_tokens.weight"].data_ptr() == own["model.embed_tokens.weight"].data_ptr(), "not a copy"
    assert weights["lm_head.weight"].data_ptr() == weights["model.embed_tokens.weight"].data_ptr(), "tied: one tensor"
    assert not weights["lm_head.weight"].requires_grad

    server = InferenceServer(served, tokenizer)
    assert not torch.equal(served.lm_head.weight, model.lm_head.weight), "the step moved the weights"
    assert server.load_weights(weights) == 1
    for name, tensor in model.state_dict().items():
        assert torch.equal(served.state_dict()[name], tensor), name
    assert served.lm_head.weight is served.model.embed_tokens.weight, "the served model's tie is kept"
