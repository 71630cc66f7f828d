"""Token ids and per-token loss masks of trajectories, for trainers that take tokens.

A trajectory is rendered exactly as the ``local`` backend prompts its model
(:func:`ratchet.engine.models.render.to_chat` and the tokenizer's chat template), message by
message: each message adds the text between the rendering of the conversation before it and
the rendering with it, so the ids are those of the whole conversation and every token belongs
to one message. Tokens the model generated (assistant messages, after the template's
assistant header) have mask 1; the system prompt, the task, tool results, the headers and the
assistant turns a client wrote (:attr:`~ratchet.core.trajectory.Step.given`) have mask 0.
This is the ``input_ids``/``loss_mask`` pair TRL, verl and OpenRLHF read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ratchet.core.trajectory import Trajectory, generated_turns
from ratchet.engine.models.base import Prompt
from ratchet.engine.models.render import to_chat


def token_ids(trajectory: Trajectory, tokenizer: Any) -> tuple[list[int], list[int]]:
    """Return the conversation's token ids and its loss mask (1 on generated tokens).

    Args:
        trajectory: The episode.
        tokenizer: A Hugging Face tokenizer with a chat template.

    Raises:
        ValueError: If the chat template does not render a conversation as a prefix of its
            continuation (the tokens could not be split by message).
    """
    chat = to_chat(Prompt(tuple(trajectory.messages), tuple(trajectory.tools)))
    ids: list[int] = []
    mask: list[int] = []
    rendered = ""

    def extend(text: str, generated: int) -> None:
        nonlocal rendered
        if not text.startswith(rendered):
            raise ValueError(
                "the tokenizer's chat template does not render a conversation as a prefix of "
                "its continuation, so its tokens cannot be split by message"
            )
        new = tokenizer(text[len(rendered) :], add_special_tokens=False)["input_ids"]
        ids.extend(new)
        mask.extend([generated] * len(new))
        rendered = text

    generated = iter(generated_turns(trajectory))
    for index, message in enumerate(chat):
        assistant = message["role"] == "assistant"
        if assistant:  # the assistant header is the template's, not the model's
            extend(_render(tokenizer, chat[:index], opening=True), 0)
        learned = assistant and next(generated)
        extend(_render(tokenizer, chat[: index + 1], opening=False), int(learned))
    return ids, mask


def load_tokenizer(spec: str) -> Any:
    """Load a tokenizer: ``local`` (the embedded model's), a model directory, or a GGUF file.

    Raises:
        ValueError: If nothing loadable is there (the message says what was tried).
    """
    import transformers

    from ratchet.engine.models.checkpoints import converted_dir, embedded_model_file

    try:
        path = embedded_model_file() if spec == "local" else Path(spec).expanduser()
        if path.suffix == ".gguf":
            cached = converted_dir(path)
            if cached.is_dir():
                return transformers.AutoTokenizer.from_pretrained(cached)
            return transformers.AutoTokenizer.from_pretrained(
                path.parent, gguf_file=path.name, local_files_only=True
            )
        return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # transformers raises many kinds; all mean "not a tokenizer"
        raise ValueError(f"no tokenizer at {spec!r}: {type(exc).__name__}: {exc}") from None


def _render(tokenizer: Any, chat: list[dict[str, str]], opening: bool) -> str:
    if not chat:
        return ""
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=opening)
    return str(text)
