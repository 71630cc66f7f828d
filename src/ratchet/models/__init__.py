"""Model backends: ``local`` (transformers), ``openai`` (any compatible server), ``fake`` (tests).

All implement :class:`Model`: complete a batch of conversations that offer tools.
"""

from ratchet.models.base import Completion, Model, ModelError, Prompt, Sampling, make_model

__all__ = ["Completion", "Model", "ModelError", "Prompt", "Sampling", "make_model"]
