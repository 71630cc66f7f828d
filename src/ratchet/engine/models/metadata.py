"""The keys of ``Completion.metadata`` that backends fill and callers read.

Besides ``finish_reason``: a backend that knows its tokens (``local``) records the turn token
for token, so what the model read and wrote can be trained on exactly, without tokenising the
text again:

- :data:`PROMPT_IDS`: the prompt's token ids, as the model read them;
- :data:`COMPLETION_IDS`: the generated token ids, the end-of-turn token included when the
  model stopped by itself;
- :data:`TOKEN_LOGPROBS`: each generated token's log-probability under the model (before
  temperature, nucleus and grammar), aligned with :data:`COMPLETION_IDS`;
- :data:`GRAMMAR`: the grammar decoding was constrained to (``None``: free).

:data:`LOGPROBS` holds the reply's tokens in OpenAI's ``logprobs.content`` shape (``token``,
``logprob``, ``bytes``, ``top_logprobs``; the end-of-turn token left out). :data:`REFUSED`
marks an ``error`` that is the request's fault (a prompt longer than the window, a schema
that cannot be enforced) rather than the backend's.
"""

from __future__ import annotations

PROMPT_IDS = "prompt_ids"
COMPLETION_IDS = "completion_ids"
TOKEN_LOGPROBS = "token_logprobs"
GRAMMAR = "grammar"
LOGPROBS = "logprobs"
REFUSED = "refused"
